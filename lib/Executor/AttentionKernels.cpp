//===- AttentionKernels.cpp - blocked flash attention, both directions ----===//
//
// The CPU twin of the GPU kernel (FlashAttention-2). Per batch·head, tiles
// of Br query rows meet tiles of Bc keys; a tile's Br x Bc scores exist only
// while it is processed, so memory is O(T·D), not O(T·S). The forward keeps
// a running row max m and sum l and rescales its output accumulator whenever
// m grows (online softmax); the backward recomputes each tile's
// probabilities from the forward's logsumexp. Causal attention never visits
// a tile wholly above the diagonal and masks inside the diagonal tiles.
//
// Tile products go through BLAS (one thread inside the OpenMP loops). The
// forward runs (batch·head, query tile) tasks, each the only writer of its
// rows. The backward runs one task per batch·head: dk and dv of a key tile
// and dq of every query tile are summed in a fixed order, so gradients do
// not depend on the thread count.
//
//===----------------------------------------------------------------------===//

#include "gptc/Executor/Kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <cblas.h>

namespace gptc::exec {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// q [..., T, D] and k [..., S, D], the leading dimensions flattened.
struct AttentionDims {
  int64_t heads, T, S, D;
};

AttentionDims dimsOf(const HostTensor &q, const HostTensor &k) {
  size_t rank = q.shape.size();
  int64_t T = q.shape[rank - 2], D = q.shape[rank - 1];
  return {q.numel() / (T * D), T, k.shape[rank - 2], D};
}

/// c = alpha · op(a) · op(b) + beta · c, row-major, m x n with depth `depth`.
void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t depth,
          float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
          float beta, float *c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, m, n, depth, alpha, a, lda, b,
              ldb, beta, c, ldc);
}

/// Whether key `key` is hidden from query `query`.
bool masked(bool causal, int64_t query, int64_t key) {
  return causal && key > query;
}

} // namespace

std::vector<HostTensor> flashAttention(const HostTensor &q, const HostTensor &k,
                                       const HostTensor &v, float scale,
                                       bool causal, AttentionTiles tiles) {
  const AttentionDims dims = dimsOf(q, k);
  const int64_t heads = dims.heads, T = dims.T, S = dims.S, D = dims.D;
  HostTensor out = HostTensor::floats(q.shape);
  HostTensor lse = HostTensor::floats(
      std::vector<int64_t>(q.shape.begin(), q.shape.end() - 1));
  const int64_t Br = tiles.queries, Bc = tiles.keys;
  const int64_t rowTiles = (T + Br - 1) / Br;

  // Causal tiles near the top do little work: hand them out dynamically.
#pragma omp parallel for schedule(dynamic)
  for (int64_t task = 0; task < heads * rowTiles; ++task) {
    int64_t h = task / rowTiles, i0 = (task % rowTiles) * Br;
    int64_t rows = std::min(Br, T - i0);
    const float *qTile = q.data() + (h * T + i0) * D;
    const float *kHead = k.data() + h * S * D, *vHead = v.data() + h * S * D;

    std::vector<float> p(rows * Bc);
    std::vector<float> acc(rows * D, 0.0f); // unnormalised output rows
    std::vector<float> rowMax(rows, kNegInf);
    std::vector<double> rowSum(rows, 0.0);
    // The last row of the tile sees keys [0, i0 + rows): later keys are
    // masked for every row, so their tiles are skipped.
    int64_t keyEnd = causal ? std::min(S, i0 + rows) : S;
    for (int64_t j0 = 0; j0 < keyEnd; j0 += Bc) {
      int64_t cols = std::min(Bc, keyEnd - j0);
      gemm(false, true, rows, cols, D, scale, qTile, D, kHead + j0 * D, D, 0.0f,
           p.data(), cols);
      for (int64_t r = 0; r < rows; ++r) {
        float *pr = p.data() + r * cols;
        float tileMax = kNegInf;
        for (int64_t c = 0; c < cols; ++c) {
          if (masked(causal, i0 + r, j0 + c))
            pr[c] = kNegInf;
          tileMax = std::max(tileMax, pr[c]);
        }
        // Every row sees key 0 in the first tile, so the max is finite from
        // then on; on the first tile the correction is exp(-inf) = 0.
        float newMax = std::max(rowMax[r], tileMax);
        float correction = std::exp(rowMax[r] - newMax);
        double sum = 0.0;
        for (int64_t c = 0; c < cols; ++c) {
          pr[c] = std::exp(pr[c] - newMax);
          sum += pr[c];
        }
        rowSum[r] = rowSum[r] * correction + sum;
        rowMax[r] = newMax;
        for (int64_t d = 0; d < D; ++d)
          acc[r * D + d] *= correction;
      }
      gemm(false, false, rows, D, cols, 1.0f, p.data(), cols, vHead + j0 * D, D,
           1.0f, acc.data(), D);
    }
    for (int64_t r = 0; r < rows; ++r) {
      float *o = out.data() + (h * T + i0 + r) * D;
      for (int64_t d = 0; d < D; ++d)
        o[d] = float(acc[r * D + d] / rowSum[r]);
      lse.f32[h * T + i0 + r] = float(rowMax[r] + std::log(rowSum[r]));
    }
  }
  return {std::move(out), std::move(lse)};
}

std::vector<HostTensor>
flashAttentionGrad(const HostTensor &q, const HostTensor &k,
                   const HostTensor &v, const HostTensor &out,
                   const HostTensor &lse, const HostTensor &dout, float scale,
                   bool causal, AttentionTiles tiles, const HostTensor *delta) {
  const AttentionDims dims = dimsOf(q, k);
  const HostTensor rowDots = delta ? HostTensor() : attentionRowDot(out, dout);
  const float *allRowDots = delta ? delta->data() : rowDots.data();
  const int64_t heads = dims.heads, T = dims.T, S = dims.S, D = dims.D;
  HostTensor dq = HostTensor::floats(q.shape);
  HostTensor dk = HostTensor::floats(k.shape);
  HostTensor dv = HostTensor::floats(v.shape);
  const int64_t Br = tiles.queries, Bc = tiles.keys;

#pragma omp parallel for schedule(dynamic)
  for (int64_t h = 0; h < heads; ++h) {
    const float *qHead = q.data() + h * T * D, *kHead = k.data() + h * S * D;
    const float *vHead = v.data() + h * S * D;
    const float *doHead = dout.data() + h * T * D;
    const float *lseHead = lse.data() + h * T;
    float *dqHead = dq.data() + h * T * D, *dkHead = dk.data() + h * S * D;
    float *dvHead = dv.data() + h * S * D;

    // rowDot[t] = Σ_d dout·out = Σ_j P·dP: the softmax backward's row term.
    const float *rowDot = allRowDots + h * T;

    std::vector<float> p(Br * Bc), ds(Br * Bc);
    for (int64_t j0 = 0; j0 < S; j0 += Bc) {
      int64_t cols = std::min(Bc, S - j0);
      const float *kTile = kHead + j0 * D, *vTile = vHead + j0 * D;
      float *dkTile = dkHead + j0 * D, *dvTile = dvHead + j0 * D;
      // Causal: query rows before j0 see none of these keys; start at the
      // query tile that holds row j0.
      for (int64_t i0 = causal ? j0 / Br * Br : 0; i0 < T; i0 += Br) {
        int64_t rows = std::min(Br, T - i0);
        const float *qTile = qHead + i0 * D, *doTile = doHead + i0 * D;
        // P = exp(scale · q kᵀ − lse), 0 where masked.
        gemm(false, true, rows, cols, D, scale, qTile, D, kTile, D, 0.0f,
             p.data(), cols);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) {
            float &x = p[r * cols + c];
            x = masked(causal, i0 + r, j0 + c) ? 0.0f
                                               : std::exp(x - lseHead[i0 + r]);
          }
        // dv += Pᵀ dout
        gemm(true, false, cols, D, rows, 1.0f, p.data(), cols, doTile, D, 1.0f,
             dvTile, D);
        // dS = P ∘ (dout vᵀ − rowDot)
        gemm(false, true, rows, cols, D, 1.0f, doTile, D, vTile, D, 0.0f,
             ds.data(), cols);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c)
            ds[r * cols + c] =
                p[r * cols + c] * (ds[r * cols + c] - rowDot[i0 + r]);
        // dq += scale · dS k,  dk += scale · dSᵀ q
        gemm(false, false, rows, D, cols, scale, ds.data(), cols, kTile, D,
             1.0f, dqHead + i0 * D, D);
        gemm(true, false, cols, D, rows, scale, ds.data(), cols, qTile, D, 1.0f,
             dkTile, D);
      }
    }
  }
  return {std::move(dq), std::move(dk), std::move(dv)};
}

namespace {

/// Part `part` of `packed` [B, T, parts·H·D] (parts side by side along the
/// last axis, heads contiguous within each) as [B, H, T, D].
HostTensor unpackHeads(const HostTensor &packed, int64_t parts, int64_t part,
                       int64_t heads) {
  const int64_t B = packed.shape[0], T = packed.shape[1];
  const int64_t width = packed.shape[2], D = width / parts / heads;
  HostTensor x = HostTensor::floats({B, heads, T, D});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < T; ++t)
        std::copy_n(packed.data() + (b * T + t) * width + (part * heads + h) * D,
                    D, x.data() + ((b * heads + h) * T + t) * D);
  return x;
}

/// Writes x [B, H, T, D] into part `part` of `packed`: unpackHeads undone.
void packHeads(const HostTensor &x, int64_t parts, int64_t part,
               HostTensor &packed) {
  const int64_t B = x.shape[0], heads = x.shape[1], T = x.shape[2];
  const int64_t D = x.shape[3], width = parts * heads * D;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t = 0; t < T; ++t)
        std::copy_n(x.data() + ((b * heads + h) * T + t) * D, D,
                    packed.data() + (b * T + t) * width +
                        (part * heads + h) * D);
}

} // namespace

std::vector<HostTensor> flashAttentionQKV(const HostTensor &qkv, int64_t heads,
                                          float scale, bool causal,
                                          AttentionTiles tiles) {
  std::vector<HostTensor> r = flashAttention(
      unpackHeads(qkv, 3, 0, heads), unpackHeads(qkv, 3, 1, heads),
      unpackHeads(qkv, 3, 2, heads), scale, causal, tiles);
  HostTensor out =
      HostTensor::floats({qkv.shape[0], qkv.shape[1], qkv.shape[2] / 3});
  packHeads(r[0], 1, 0, out);
  return {std::move(out), std::move(r[1])};
}

std::vector<HostTensor>
flashAttentionQKVGrad(const HostTensor &qkv, const HostTensor &out,
                      const HostTensor &lse, const HostTensor &dout,
                      int64_t heads, float scale, bool causal,
                      AttentionTiles tiles, const HostTensor *delta) {
  std::vector<HostTensor> g = flashAttentionGrad(
      unpackHeads(qkv, 3, 0, heads), unpackHeads(qkv, 3, 1, heads),
      unpackHeads(qkv, 3, 2, heads), unpackHeads(out, 1, 0, heads), lse,
      unpackHeads(dout, 1, 0, heads), scale, causal, tiles, delta);
  HostTensor dqkv = HostTensor::floats(qkv.shape);
  for (int64_t part = 0; part < 3; ++part)
    packHeads(g[size_t(part)], 3, part, dqkv);
  return {std::move(dqkv)};
}

HostTensor attentionRowDot(const HostTensor &out, const HostTensor &dout,
                           int64_t heads) {
  if (heads > 0)
    return attentionRowDot(unpackHeads(out, 1, 0, heads),
                           unpackHeads(dout, 1, 0, heads));
  const std::vector<int64_t> &s = out.shape;
  const int64_t D = s.back(), rows = out.numel() / D;
  HostTensor delta =
      HostTensor::floats(std::vector<int64_t>(s.begin(), s.end() - 1));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float *o = out.data() + r * D, *g = dout.data() + r * D;
    double sum = 0.0;
    for (int64_t d = 0; d < D; ++d)
      sum += double(g[d]) * o[d];
    delta.data()[r] = float(sum);
  }
  return delta;
}

} // namespace gptc::exec
