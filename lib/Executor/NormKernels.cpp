//===- NormKernels.cpp - layernorm, softmax, masking, GELU, loss ----------===//
//
// Row-wise ops over the last dimension. Means, variances and sums run in
// double: the executor is the reference the float32 GPU kernels answer to.
//
// Exponentials are float (correctly rounded to a few ulp); their sums are
// double.
//
//===----------------------------------------------------------------------===//

#include "gptc/Executor/Kernels.h"

#include "RowExpSum.h"

#include <cmath>
#include <limits>

namespace gptc::exec {

HostTensor layernorm(const HostTensor &x, const HostTensor &gamma,
                     const HostTensor &beta, float epsilon) {
  int64_t C = x.shape.back(), rows = x.numel() / C;
  HostTensor out = HostTensor::floats(x.shape);
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    const float *in = x.data() + r * C;
    float *o = out.data() + r * C;
    double mean = 0.0;
    for (int64_t c = 0; c < C; ++c)
      mean += in[c];
    mean /= double(C);
    double var = 0.0;
    for (int64_t c = 0; c < C; ++c)
      var += (in[c] - mean) * (in[c] - mean);
    var /= double(C);
    double rstd = 1.0 / std::sqrt(var + double(epsilon));
    for (int64_t c = 0; c < C; ++c)
      o[c] = float((in[c] - mean) * rstd * gamma.f32[c] + beta.f32[c]);
  }
  return out;
}

HostTensor softmax(const HostTensor &x) {
  int64_t C = x.shape.back(), rows = x.numel() / C;
  HostTensor out = HostTensor::floats(x.shape);
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    const float *in = x.data() + r * C;
    float *o = out.data() + r * C;
    auto [max, sum] = rowExpSum(in, C);
    for (int64_t c = 0; c < C; ++c)
      o[c] = float(std::exp(in[c] - max) / sum);
  }
  return out;
}

HostTensor causalMask(const HostTensor &x, float fill) {
  int64_t T = x.shape.back(), mats = x.numel() / (T * T);
  HostTensor out = x;
#pragma omp parallel for
  for (int64_t m = 0; m < mats; ++m)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = i + 1; j < T; ++j)
        out.f32[(m * T + i) * T + j] = fill;
  return out;
}

HostTensor gelu(const HostTensor &x, bool tanhApproximation) {
  HostTensor out = HostTensor::floats(x.shape);
  int64_t n = x.numel();
  const double k = std::sqrt(2.0 / M_PI);
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    double v = x.f32[i];
    double g = tanhApproximation
                   ? 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v)))
                   : 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    out.f32[i] = float(g);
  }
  return out;
}

HostTensor crossEntropy(const HostTensor &logits, const HostTensor &targets,
                        int64_t numClasses,
                        std::optional<int32_t> ignoreIndex) {
  int64_t V = logits.shape.back(), rows = targets.numel();
  int64_t classes = numClasses < 0 ? V : numClasses;
  auto ignored = [&](int64_t r) { return ignoreIndex && targets.i32[r] == *ignoreIndex; };
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (ignored(r))
      continue;
    ++counted;
    if (targets.i32[r] < 0 || targets.i32[r] >= classes)
      throw KernelError("target id " + std::to_string(targets.i32[r]) +
                        " at position " + std::to_string(r) +
                        " is outside the vocabulary of " +
                        std::to_string(classes));
  }
  // Per-row losses summed in order afterwards: the result does not depend
  // on how OpenMP split the rows, which exact --resume relies on.
  std::vector<double> losses(rows, 0.0);
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    if (ignored(r))
      continue;
    const float *row = logits.data() + r * V;
    auto [max, sum] = rowExpSum(row, classes);
    losses[r] = std::log(sum) + max - row[targets.i32[r]];
  }
  double total = 0.0;
  for (double l : losses)
    total += l;
  return HostTensor::floats({}, float(total / double(counted)));
}

} // namespace gptc::exec
