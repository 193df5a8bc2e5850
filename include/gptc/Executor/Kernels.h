//===- Kernels.h - reference CPU kernels for the gpt ops --------*- C++ -*-===//
//
// One function per op, written to be obviously right first and fast second:
// GEMMs go through BLAS, loops over independent rows through OpenMP.
// Reductions accumulate in double where that costs nothing, so the executor
// is a tight reference for every later pass and GPU kernel.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_EXECUTOR_KERNELS_H
#define GPTC_EXECUTOR_KERNELS_H

#include "gptc/Executor/HostTensor.h"

#include <optional>

namespace gptc::exec {

HostTensor embedding(const HostTensor &table, const HostTensor &ids);
HostTensor iota(int64_t n);
HostTensor matmul(const HostTensor &a, const HostTensor &b, bool transposeA,
                  bool transposeB);
/// gpt.matmul_epilogue: matmul(a, b) + bias[N], then the tanh GELU if
/// `gelu`, all in float32 (the result and, with `keepPre`, the
/// pre-activation as a second tensor); the caller rounds on store.
std::vector<HostTensor> matmulEpilogue(const HostTensor &a, const HostTensor &b,
                                       const HostTensor &bias, bool transposeA,
                                       bool transposeB, bool gelu,
                                       bool keepPre);
/// gpt.matmul_gelu_grad: gelu_tanh'(pre) * matmul(a, b) in float32 and,
/// with `biasGrad`, its column sums as a second tensor.
std::vector<HostTensor> matmulGeluGrad(const HostTensor &a, const HostTensor &b,
                                       const HostTensor &pre, bool transposeA,
                                       bool transposeB, bool biasGrad);
/// gpt.matmul_bias_grad: {matmul(a, b), the column sums of the 2-D b}.
std::vector<HostTensor> matmulBiasGrad(const HostTensor &a, const HostTensor &b,
                                       bool transposeA);
HostTensor layernorm(const HostTensor &x, const HostTensor &gamma,
                     const HostTensor &beta, float epsilon);
HostTensor softmax(const HostTensor &x);
/// Sets x[..., i, j] = fill for j > i.
HostTensor causalMask(const HostTensor &x, float fill);
HostTensor gelu(const HostTensor &x, bool tanhApproximation);
HostTensor reshape(const HostTensor &x, const std::vector<int64_t> &shape);
HostTensor transpose(const HostTensor &x,
                     const std::vector<int64_t> &permutation);
std::vector<HostTensor> split(const HostTensor &x, int64_t axis,
                              const std::vector<int64_t> &sizes);
/// `numClasses` (< 0: all) columns take part in the softmax; positions whose
/// target is `ignoreIndex` (if set) add nothing and are not counted in the
/// mean (gpt-pad-dims' padded vocabulary and positions).
HostTensor crossEntropy(const HostTensor &logits, const HostTensor &targets,
                        int64_t numClasses = -1,
                        std::optional<int32_t> ignoreIndex = std::nullopt);
/// gpt.pad: `x` in the leading corner of `shape`, `value` elsewhere.
HostTensor pad(const HostTensor &x, const std::vector<int64_t> &shape,
               int64_t value);
/// gpt.slice: the leading corner of `x` of `shape`.
HostTensor slice(const HostTensor &x, const std::vector<int64_t> &shape);

enum class BinaryKind { Add, Sub, Mul, Div, Max, Min };
HostTensor binary(BinaryKind kind, const HostTensor &a, const HostTensor &b,
                  const std::vector<int64_t> &resultShape);

enum class UnaryKind { Neg, Exp, Log, Tanh, Sqrt, Rsqrt };
HostTensor unary(UnaryKind kind, const HostTensor &x);

/// Sums `x` down to `shape`, which broadcasts back to x's shape.
HostTensor reduceSum(const HostTensor &x, const std::vector<int64_t> &shape);
HostTensor concat(const std::vector<const HostTensor *> &inputs, int64_t axis);

/// gpt.attention_bias_grad: [3C] = dq's column sums (the first third of
/// each row of dqkv [..., 3C]), zeros, dout's column sums (dout [..., C]),
/// each summed in double in row order and rounded once, as reduceSum.
HostTensor attentionBiasGrad(const HostTensor &dqkv, const HostTensor &dout);

/// Tile sizes of the blocked attention kernels: Br query rows by Bc keys.
struct AttentionTiles {
  int64_t queries = 64;
  int64_t keys = 64;
};
/// gpt.flash_attention over q [..., T, D], k and v [..., S, D]: {out, lse},
/// lse = logsumexp of each query row of the scaled (causal: masked) scores.
/// Blocked as the GPU kernel: an online softmax over tiles of keys.
std::vector<HostTensor> flashAttention(const HostTensor &q, const HostTensor &k,
                                       const HostTensor &v, float scale,
                                       bool causal, AttentionTiles tiles = {});
/// gpt.flash_attention_grad: {dq, dk, dv}, recomputing the probabilities of
/// each tile from q, k and lse. The row terms D come from `delta` when
/// given (gpt.attention_row_dot's result), else from out and dout.
std::vector<HostTensor>
flashAttentionGrad(const HostTensor &q, const HostTensor &k,
                   const HostTensor &v, const HostTensor &out,
                   const HostTensor &lse, const HostTensor &dout, float scale,
                   bool causal, AttentionTiles tiles = {},
                   const HostTensor *delta = nullptr);
/// gpt.attention_row_dot: D [B, H, T] = Σ_d dout·out per query row, summed
/// in double and rounded once. out and dout are [B, H, T, D] (heads = 0) or
/// packed [B, T, heads·D].
HostTensor attentionRowDot(const HostTensor &out, const HostTensor &dout,
                           int64_t heads = 0);
/// gpt.flash_attention_qkv: {out [B, T, C], lse [B, H, T]} from qkv
/// [B, T, 3C] (q, k, v side by side, `heads` heads of C/heads each). The
/// reference for the strided GPU kernels: it unpacks the heads, runs
/// flashAttention and packs out back, so it agrees bit for bit with the
/// split, transpose, flash_attention, transpose sequence it replaces.
std::vector<HostTensor> flashAttentionQKV(const HostTensor &qkv, int64_t heads,
                                          float scale, bool causal,
                                          AttentionTiles tiles = {});
/// gpt.flash_attention_qkv_grad: {dqkv [B, T, 3C]}, by way of
/// flashAttentionGrad as flashAttentionQKV goes by way of flashAttention.
std::vector<HostTensor>
flashAttentionQKVGrad(const HostTensor &qkv, const HostTensor &out,
                      const HostTensor &lse, const HostTensor &dout,
                      int64_t heads, float scale, bool causal,
                      AttentionTiles tiles = {},
                      const HostTensor *delta = nullptr);

// Gradients (the adjoints gpt-autodiff emits).
/// With `addend` (float32, the table's shape): addend + the scatter-add,
/// the bits of the two ops apart.
HostTensor embeddingGrad(const HostTensor &dy, const HostTensor &ids,
                         const std::vector<int64_t> &tableShape,
                         const HostTensor *addend = nullptr);
/// The bits a position takes in sortIds' keys: those of positions - 1.
int sortedIdPositionBits(int64_t positions);
/// The most positions sortIds takes (its CUDA kernel keeps them in one
/// block's shared memory), and whether ids of `positions` over a table of
/// `rows` rows fit its keys: at most that many, and the row's bits (of
/// `rows` itself: an id outside the table sorts as `rows`) and the
/// position's within 31.
constexpr int64_t kMaxSortedIds = 32768;
bool idsSortable(int64_t positions, int64_t rows);
/// gptc's sort_ids launch (the sorted form of embedding_grad,
/// LowerToKernels.h): the keys id · 2^positionBits + position of every
/// position, ascending ([n] i32): each row's positions together, in
/// order. An id outside [0, rows) is embeddingGrad's error.
HostTensor sortIds(const HostTensor &ids, int64_t rows, int positionBits);
/// The ids sortIds' keys came from ([n] i32, in position order); keys that
/// are not every position once are an error.
HostTensor idsOfSortedKeys(const HostTensor &keys, int positionBits);
/// dx, dgamma, dbeta.
std::vector<HostTensor> layernormGrad(const HostTensor &x,
                                      const HostTensor &gamma,
                                      const HostTensor &dy, float epsilon);
HostTensor softmaxGrad(const HostTensor &y, const HostTensor &dy);
HostTensor geluGrad(const HostTensor &x, const HostTensor &dy,
                    bool tanhApproximation);
/// Padded columns and ignored positions get exactly zero.
HostTensor crossEntropyGrad(const HostTensor &logits,
                            const HostTensor &targets, const HostTensor &dloss,
                            int64_t numClasses = -1,
                            std::optional<int32_t> ignoreIndex = std::nullopt);

} // namespace gptc::exec

#endif // GPTC_EXECUTOR_KERNELS_H
