//===- LinalgKernels.cpp - matmul and embedding ---------------------------===//

#include "gptc/Executor/Kernels.h"

#include <algorithm>
#include <cmath>

#include <cblas.h>

namespace gptc::exec {

HostTensor embedding(const HostTensor &table, const HostTensor &ids) {
  int64_t rows = table.shape[0], C = table.shape[1];
  std::vector<int64_t> shape = ids.shape;
  shape.push_back(C);
  HostTensor out = HostTensor::floats(shape);
  int64_t n = ids.numel();
  for (int64_t i = 0; i < n; ++i) {
    int32_t id = ids.i32[i];
    if (id < 0 || id >= rows)
      throw KernelError("id " + std::to_string(id) + " at position " +
                        std::to_string(i) + " is outside the table's " +
                        std::to_string(rows) + " rows");
  }
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(table.data() + int64_t(ids.i32[i]) * C, C, out.data() + i * C);
  return out;
}

HostTensor matmul(const HostTensor &a, const HostTensor &b, bool transposeA,
                  bool transposeB) {
  size_t ra = a.shape.size(), rb = b.shape.size();
  int64_t M = transposeA ? a.shape[ra - 1] : a.shape[ra - 2];
  int64_t K = transposeA ? a.shape[ra - 2] : a.shape[ra - 1];
  int64_t N = transposeB ? b.shape[rb - 2] : b.shape[rb - 1];
  std::vector<int64_t> shape(a.shape.begin(), a.shape.end() - 2);
  int64_t batch = numElements(shape);
  shape.push_back(M);
  shape.push_back(N);
  HostTensor out = HostTensor::floats(shape);

  int64_t lda = transposeA ? M : K, ldb = transposeB ? K : N;
  auto ta = transposeA ? CblasTrans : CblasNoTrans;
  auto tb = transposeB ? CblasTrans : CblasNoTrans;
  // A shared 2-D b with a row-major a is one GEMM over all batch rows.
  if (rb == 2 && !transposeA) {
    cblas_sgemm(CblasRowMajor, ta, tb, batch * M, N, K, 1.0f, a.data(), lda,
                b.data(), ldb, 0.0f, out.data(), N);
    return out;
  }
  int64_t strideB = rb == 2 ? 0 : K * N;
  for (int64_t i = 0; i < batch; ++i)
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, a.data() + i * M * K,
                lda, b.data() + i * strideB, ldb, 0.0f,
                out.data() + i * M * N, N);
  return out;
}

std::vector<HostTensor> matmulEpilogue(const HostTensor &a, const HostTensor &b,
                                       const HostTensor &bias, bool transposeA,
                                       bool transposeB, bool gelu,
                                       bool keepPre) {
  // The float32 accumulator is the same GEMM as gpt.matmul's; the epilogue
  // then works on it before anything is rounded.
  HostTensor pre = matmul(a, b, transposeA, transposeB);
  int64_t N = pre.shape.back(), rows = pre.numel() / N;
  float *p = pre.data();
  const float *bs = bias.data();
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t n = 0; n < N; ++n)
      p[r * N + n] += bs[n];
  if (!gelu)
    return {std::move(pre)};
  HostTensor out = HostTensor::floats(pre.shape);
  float *o = out.data();
  // The operations and float32 constants of gpt-fuse-elementwise's tanh
  // GELU body, in its order, so the fp32 step is unchanged bit for bit.
  const float half = 0.5f, one = 1.0f, k0 = float(std::sqrt(2.0 / M_PI)),
              k1 = float(0.044715);
  int64_t n = pre.numel();
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    float x = p[i];
    float cube = (x * x) * x;
    float t = std::tanh(k0 * (x + k1 * cube));
    o[i] = (half * x) * (one + t);
  }
  std::vector<HostTensor> results;
  results.push_back(std::move(out));
  if (keepPre)
    results.push_back(std::move(pre));
  return results;
}

namespace {
/// gelu_tanh'(x) * dy with the operations and float32 constants of
/// gpt-fuse-elementwise's body for gpt.gelu_grad (ScalarBuilder::geluGrad),
/// in its order, so the fused GEMM leaves the fp32 step unchanged bit for
/// bit.
float geluTanhGrad(float x, float dy) {
  const float half = 0.5f, one = 1.0f, k0 = float(std::sqrt(2.0 / M_PI)),
              k1 = float(0.044715), k3 = float(3.0 * 0.044715);
  float t = std::tanh(k0 * (x + k1 * ((x * x) * x)));
  float dInner = k0 * (one + k3 * (x * x));
  float left = half * (one + t);
  float right = ((half * x) * (one - t * t)) * dInner;
  return (left + right) * dy;
}
} // namespace

std::vector<HostTensor> matmulGeluGrad(const HostTensor &a, const HostTensor &b,
                                       const HostTensor &pre, bool transposeA,
                                       bool transposeB, bool biasGrad) {
  HostTensor out = matmul(a, b, transposeA, transposeB);
  float *o = out.data();
  const float *p = pre.data();
  int64_t n = out.numel();
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i)
    o[i] = geluTanhGrad(p[i], o[i]);
  std::vector<HostTensor> results;
  if (biasGrad) {
    // The same sum, in the same order, as the gpt.reduce_sum it replaces.
    HostTensor db = reduceSum(out, {out.shape.back()});
    results.push_back(std::move(out));
    results.push_back(std::move(db));
  } else {
    results.push_back(std::move(out));
  }
  return results;
}

std::vector<HostTensor> matmulBiasGrad(const HostTensor &a, const HostTensor &b,
                                       bool transposeA) {
  std::vector<HostTensor> results;
  results.push_back(matmul(a, b, transposeA, /*transposeB=*/false));
  results.push_back(reduceSum(b, {b.shape.back()}));
  return results;
}

} // namespace gptc::exec
