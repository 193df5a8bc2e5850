//===- AttentionGraph.h - attention as cuDNN's operation graph --*- C++ -*-===//
//
// Private to lib/Runtime. The graphs of matmuls, pointwise ops and
// reductions that cuDNN's fused flash-attention engines recognise, for
// gpt.flash_attention(_qkv) and its gradient: the forward writes out and
// lse (cuDNN's "stats", the same m + log l a query row as gptc's kernels),
// the backward dq, dk and dv from q, k, v, out, lse and dout. The graph is
// plain data, so that a test can evaluate it on the CPU against the
// executor's attention (unittests/Runtime/AttentionGraphTest.cpp) where no
// GPU can; CudnnAttention.cpp hands the same graph to cuDNN's backend API.
// The ops and their order are those cudnn-frontend's composite SDPA nodes
// build (cuDNN's engines match that pattern).
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_LIB_RUNTIME_ATTENTIONGRAPH_H
#define GPTC_LIB_RUNTIME_ATTENTIONGRAPH_H

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gptc::rt::attention {

enum class GraphType { F32, BF16, I32, Bool };

/// A tensor of the graph: 4-D (batch, head, row, column), strides in
/// elements. Virtual tensors live inside cuDNN's kernels; the others are
/// operands bound to device memory at each run (GraphRole), or a float
/// scalar passed by value (`byValue`: the scale, -inf, 1).
struct GraphTensor {
  int64_t uid = 0;
  std::string name;
  GraphType type = GraphType::F32;
  std::array<int64_t, 4> dims{}, strides{};
  bool isVirtual = true;
  bool byValue = false;
  float value = 0; ///< byValue: what it holds
};

enum class PointwiseMode {
  Add,
  Sub,
  Mul,
  Div,
  Exp,
  Log,
  Identity,
  GenIndex,     ///< the element's index along `axis`
  CmpGe,        ///< x >= y
  BinarySelect, ///< t ? x : y
};
enum class ReductionMode { Max, Add };

/// One operation. Pointwise: inputs x[, y[, t]]; matmul: a, b (a batched
/// [M, K] by [K, N]); reduction: x to the output's dims (size 1 where
/// reduced); reshape: the same elements seen through the output's dims and
/// strides (how the graph transposes a virtual tensor).
struct GraphOp {
  enum class Kind { Matmul, Pointwise, Reduction, Reshape };
  Kind kind = Kind::Pointwise;
  std::string name;
  std::vector<int64_t> inputs;
  int64_t output = 0;
  PointwiseMode pointwise = PointwiseMode::Identity;
  ReductionMode reduction = ReductionMode::Add;
  int axis = -1;                      ///< GenIndex
  GraphType compute = GraphType::F32; ///< the op's math precision
};

/// The device memory a non-virtual tensor is bound to at each run.
enum class GraphRole {
  Q,
  K,
  V,
  Out,
  Lse,
  Dout,
  Dq,
  Dk,
  Dv,
  /// Workspace gptc allocates beside cuDNN's own (at workspaceOffset):
  /// Σ dout·out a query row (float32, [B, H, T, 1]), and the backward's
  /// float32 dq sums where its dq adds across key tiles.
  RowDot,
  DqSums,
};

/// The sizes and layouts of one attention launch. Strides are in elements
/// of (batch, head, row, d): gpt.flash_attention's [B, H, T, D] tensors,
/// or gpt.flash_attention_qkv's heads in place in packed [B, T, 3C] rows
/// (q, k and v then start at columns 0, C and 2C: the caller's pointers).
struct AttentionShape {
  int64_t batch = 1, heads = 1, queries = 1, keys = 1, headDim = 1;
  bool causal = false;
  float scale = 1;
  std::array<int64_t, 4> q{}, k{}, v{}, out{}; ///< dq, dk, dv: as q, k, v
  /// bf16 operands (q, k, v, out and their gradients); lse is float32.
  GraphType dtype = GraphType::BF16;
};

/// [B, H, rows, D] contiguous.
std::array<int64_t, 4> headMajorStrides(int64_t heads, int64_t rows,
                                        int64_t headDim);
/// Heads in place in [B, rows, width] rows, head h at column h · D.
std::array<int64_t, 4> packedStrides(int64_t rows, int64_t width,
                                     int64_t headDim);

struct AttentionGraph {
  std::vector<GraphTensor> tensors;   ///< by uid - 1
  std::vector<GraphOp> ops;           ///< in an order that computes them
  std::map<GraphRole, int64_t> roles; ///< the bound tensors' uids
  /// Where the RowDot and DqSums tensors lie in gptc's workspace, and its
  /// bytes (each part 256-byte aligned).
  std::map<GraphRole, int64_t> workspaceOffset;
  int64_t workspaceBytes = 0;

  const GraphTensor &tensor(int64_t uid) const { return tensors.at(uid - 1); }
};

/// The forward: out = softmax(scale · q kᵀ, causal) v, lse = m + log l.
AttentionGraph attentionForwardGraph(const AttentionShape &s);

/// The backward. `dqSums`: dq as float32 sums of dS·k over key tiles (in
/// the DqSums workspace), rounded to dq after, cuDNN's fastest form, whose
/// sums add in any order; otherwise dq is dS·k straight, a graph cuDNN
/// runs with dP kept in its own workspace, and the same bits every run.
AttentionGraph attentionBackwardGraph(const AttentionShape &s, bool dqSums);

/// "q", "lse", "dq sums", ... for messages.
const char *graphRoleName(GraphRole r);

} // namespace gptc::rt::attention

#endif // GPTC_LIB_RUNTIME_ATTENTIONGRAPH_H
