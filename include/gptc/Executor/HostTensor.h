//===- HostTensor.h - dense tensors in host memory --------------*- C++ -*-===//
//
// The CPU executor's value type. Floats are stored as float32; ids as int32.
// Plain data and no MLIR, so kernels and tests can use it directly.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_EXECUTOR_HOSTTENSOR_H
#define GPTC_EXECUTOR_HOSTTENSOR_H

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace gptc::exec {

enum class ElementKind { F32, I32 };

struct HostTensor {
  ElementKind kind = ElementKind::F32;
  std::vector<int64_t> shape;
  std::vector<float> f32;   // kind == F32
  std::vector<int32_t> i32; // kind == I32

  static HostTensor floats(std::vector<int64_t> shape, float fill = 0.0f);
  static HostTensor ids(std::vector<int64_t> shape, int32_t fill = 0);

  int64_t numel() const;
  float *data() { return f32.data(); }
  const float *data() const { return f32.data(); }
};

int64_t numElements(const std::vector<int64_t> &shape);
std::string shapeString(const std::vector<int64_t> &shape);

/// A run-time failure of a kernel (for example an id outside the table);
/// the executor reports it at the location of the op that raised it.
struct KernelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

} // namespace gptc::exec

#endif // GPTC_EXECUTOR_HOSTTENSOR_H
