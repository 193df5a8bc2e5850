//===- HostTensor.cpp -----------------------------------------------------===//

#include "gptc/Executor/HostTensor.h"

namespace gptc::exec {

int64_t numElements(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string shapeString(const std::vector<int64_t> &shape) {
  if (shape.empty())
    return "scalar";
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? "x" : "") + std::to_string(shape[i]);
  return s;
}

HostTensor HostTensor::floats(std::vector<int64_t> shape, float fill) {
  HostTensor t;
  t.kind = ElementKind::F32;
  t.f32.assign(numElements(shape), fill);
  t.shape = std::move(shape);
  return t;
}

HostTensor HostTensor::ids(std::vector<int64_t> shape, int32_t fill) {
  HostTensor t;
  t.kind = ElementKind::I32;
  t.i32.assign(numElements(shape), fill);
  t.shape = std::move(shape);
  return t;
}

int64_t HostTensor::numel() const { return numElements(shape); }

} // namespace gptc::exec
