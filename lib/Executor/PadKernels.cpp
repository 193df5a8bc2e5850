//===- PadKernels.cpp - gpt.pad and gpt.slice -----------------------------===//
//
// Both copy the leading corner shared by a small and a large tensor of the
// same rank; pad fills the rest of the large one first.
//
//===----------------------------------------------------------------------===//

#include "gptc/Executor/Kernels.h"

#include <algorithm>

namespace gptc::exec {

namespace {
/// Calls copy(smallOffset, largeOffset, n) for every innermost run of the
/// small shape inside the large one.
template <typename Copy>
void forEachRow(const std::vector<int64_t> &small,
                const std::vector<int64_t> &large, Copy copy) {
  size_t rank = small.size();
  if (rank == 0) {
    copy(0, 0, 1);
    return;
  }
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < rank; ++i)
    rows *= small[i];
  int64_t inner = small.back();
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    // Row r's index in the small shape, as an offset in both layouts.
    int64_t rest = r, smallOffset = 0, largeOffset = 0;
    int64_t smallStride = inner, largeStride = large.back();
    for (size_t i = rank - 1; i-- > 0;) {
      int64_t index = rest % small[i];
      rest /= small[i];
      smallOffset += index * smallStride;
      largeOffset += index * largeStride;
      smallStride *= small[i];
      largeStride *= large[i];
    }
    copy(smallOffset, largeOffset, inner);
  }
}
} // namespace

HostTensor pad(const HostTensor &x, const std::vector<int64_t> &shape,
               int64_t value) {
  if (x.kind == ElementKind::I32) {
    HostTensor out = HostTensor::ids(shape, int32_t(value));
    forEachRow(x.shape, shape, [&](int64_t s, int64_t l, int64_t n) {
      std::copy_n(x.i32.data() + s, n, out.i32.data() + l);
    });
    return out;
  }
  HostTensor out = HostTensor::floats(shape, float(value));
  forEachRow(x.shape, shape, [&](int64_t s, int64_t l, int64_t n) {
    std::copy_n(x.f32.data() + s, n, out.f32.data() + l);
  });
  return out;
}

HostTensor slice(const HostTensor &x, const std::vector<int64_t> &shape) {
  if (x.kind == ElementKind::I32) {
    HostTensor out = HostTensor::ids(shape);
    forEachRow(shape, x.shape, [&](int64_t s, int64_t l, int64_t n) {
      std::copy_n(x.i32.data() + l, n, out.i32.data() + s);
    });
    return out;
  }
  HostTensor out = HostTensor::floats(shape);
  forEachRow(shape, x.shape, [&](int64_t s, int64_t l, int64_t n) {
    std::copy_n(x.f32.data() + l, n, out.f32.data() + s);
  });
  return out;
}

} // namespace gptc::exec
