//===- ShapeKernels.cpp - iota, reshape, transpose, split -----------------===//

#include "gptc/Executor/Kernels.h"

#include <algorithm>

namespace gptc::exec {

namespace {
std::vector<int64_t> rowMajorStrides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;)
    strides[i - 1] = strides[i] * shape[i];
  return strides;
}
} // namespace

HostTensor iota(int64_t n) {
  HostTensor out = HostTensor::ids({n});
  for (int64_t i = 0; i < n; ++i)
    out.i32[i] = int32_t(i);
  return out;
}

HostTensor reshape(const HostTensor &x, const std::vector<int64_t> &shape) {
  HostTensor out = x;
  out.shape = shape;
  return out;
}

HostTensor transpose(const HostTensor &x,
                     const std::vector<int64_t> &permutation) {
  size_t rank = x.shape.size();
  if (rank == 0)
    return x;
  std::vector<int64_t> shape(rank), inStrides = rowMajorStrides(x.shape);
  std::vector<int64_t> strides(rank); // input stride of each result dim
  for (size_t i = 0; i < rank; ++i) {
    shape[i] = x.shape[permutation[i]];
    strides[i] = inStrides[permutation[i]];
  }
  HostTensor out = HostTensor::floats(shape);
  int64_t inner = shape.back(), rows = out.numel() / std::max<int64_t>(inner, 1);
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rest = r, off = 0;
    for (size_t d = rank - 1; d-- > 0;) {
      off += (rest % shape[d]) * strides[d];
      rest /= shape[d];
    }
    float *o = out.data() + r * inner;
    for (int64_t c = 0; c < inner; ++c)
      o[c] = x.f32[off + c * strides.back()];
  }
  return out;
}

std::vector<HostTensor> split(const HostTensor &x, int64_t axis,
                              const std::vector<int64_t> &sizes) {
  // View x as [outer, x.shape[axis], inner] and copy slabs of the middle.
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= x.shape[d];
  for (size_t d = axis + 1; d < x.shape.size(); ++d)
    inner *= x.shape[d];
  int64_t full = x.shape[axis];
  std::vector<HostTensor> pieces;
  int64_t start = 0;
  for (int64_t size : sizes) {
    std::vector<int64_t> shape = x.shape;
    shape[axis] = size;
    HostTensor piece = HostTensor::floats(shape);
#pragma omp parallel for
    for (int64_t o = 0; o < outer; ++o)
      std::copy_n(x.data() + (o * full + start) * inner, size * inner,
                  piece.data() + o * size * inner);
    pieces.push_back(std::move(piece));
    start += size;
  }
  return pieces;
}

} // namespace gptc::exec
