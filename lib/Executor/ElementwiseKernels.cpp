//===- ElementwiseKernels.cpp - broadcasting binary and unary ops ---------===//

#include "gptc/Executor/Kernels.h"

#include <algorithm>
#include <cmath>

namespace gptc::exec {

namespace {
/// Strides of `shape` seen from a result of rank `rank`, with 0 for the
/// broadcast (missing or size-1) dimensions.
std::vector<int64_t> broadcastStrides(const std::vector<int64_t> &shape,
                                      const std::vector<int64_t> &result) {
  std::vector<int64_t> strides(result.size(), 0);
  int64_t stride = 1;
  size_t offset = result.size() - shape.size();
  for (size_t i = shape.size(); i-- > 0;) {
    strides[offset + i] = shape[i] == 1 ? 0 : stride;
    stride *= shape[i];
  }
  return strides;
}

template <typename F>
HostTensor broadcastApply(const HostTensor &a, const HostTensor &b,
                          const std::vector<int64_t> &shape, F f) {
  HostTensor out = HostTensor::floats(shape);
  if (a.shape == shape && b.shape == shape) {
    int64_t n = out.numel();
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i)
      out.f32[i] = f(a.f32[i], b.f32[i]);
    return out;
  }
  std::vector<int64_t> sa = broadcastStrides(a.shape, shape);
  std::vector<int64_t> sb = broadcastStrides(b.shape, shape);
  int64_t inner = shape.empty() ? 1 : shape.back();
  int64_t rows = out.numel() / std::max<int64_t>(inner, 1);
  int64_t ia = sa.empty() ? 0 : sa.back(), ib = sb.empty() ? 0 : sb.back();
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    // Offsets of this row in a and b, from its multi-index.
    int64_t rest = r, offA = 0, offB = 0;
    for (size_t d = shape.size() - 1; d-- > 0;) {
      int64_t idx = rest % shape[d];
      rest /= shape[d];
      offA += idx * sa[d];
      offB += idx * sb[d];
    }
    float *o = out.data() + r * inner;
    for (int64_t c = 0; c < inner; ++c)
      o[c] = f(a.f32[offA + c * ia], b.f32[offB + c * ib]);
  }
  return out;
}
} // namespace

HostTensor binary(BinaryKind kind, const HostTensor &a, const HostTensor &b,
                  const std::vector<int64_t> &shape) {
  switch (kind) {
  case BinaryKind::Add:
    return broadcastApply(a, b, shape, [](float x, float y) { return x + y; });
  case BinaryKind::Sub:
    return broadcastApply(a, b, shape, [](float x, float y) { return x - y; });
  case BinaryKind::Mul:
    return broadcastApply(a, b, shape, [](float x, float y) { return x * y; });
  case BinaryKind::Div:
    return broadcastApply(a, b, shape, [](float x, float y) { return x / y; });
  case BinaryKind::Max:
    return broadcastApply(a, b, shape,
                          [](float x, float y) { return std::max(x, y); });
  case BinaryKind::Min:
    return broadcastApply(a, b, shape,
                          [](float x, float y) { return std::min(x, y); });
  }
  throw KernelError("unknown binary op");
}

HostTensor unary(UnaryKind kind, const HostTensor &x) {
  HostTensor out = HostTensor::floats(x.shape);
  int64_t n = x.numel();
  auto apply = [&](auto f) {
#pragma omp parallel for
    for (int64_t i = 0; i < n; ++i)
      out.f32[i] = f(x.f32[i]);
  };
  switch (kind) {
  case UnaryKind::Neg:
    apply([](float v) { return -v; });
    break;
  case UnaryKind::Exp:
    apply([](float v) { return std::exp(v); });
    break;
  case UnaryKind::Log:
    apply([](float v) { return std::log(v); });
    break;
  case UnaryKind::Tanh:
    apply([](float v) { return std::tanh(v); });
    break;
  case UnaryKind::Sqrt:
    apply([](float v) { return std::sqrt(v); });
    break;
  case UnaryKind::Rsqrt:
    apply([](float v) { return 1.0f / std::sqrt(v); });
    break;
  }
  return out;
}

} // namespace gptc::exec
