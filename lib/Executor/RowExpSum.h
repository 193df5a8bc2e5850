//===- RowExpSum.h - the shared half of softmax and logsumexp ---*- C++ -*-===//
//
// Private to the executor's kernels: softmax, cross-entropy and its gradient
// all start a row the same way, and must agree to the bit.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_LIB_EXECUTOR_ROWEXPSUM_H
#define GPTC_LIB_EXECUTOR_ROWEXPSUM_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace gptc::exec {

/// The max of row[0, n) and the sum of exp(row[i] - max): float
/// exponentials (a few ulp), summed in double.
struct RowExpSum {
  float max;
  double sum;
};

inline RowExpSum rowExpSum(const float *row, int64_t n) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i)
    max = std::max(max, row[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i)
    sum += std::exp(row[i] - max);
  return {max, sum};
}

} // namespace gptc::exec

#endif // GPTC_LIB_EXECUTOR_ROWEXPSUM_H
