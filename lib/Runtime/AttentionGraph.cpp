//===- AttentionGraph.cpp - attention as cuDNN's operation graph ----------===//

#include "AttentionGraph.h"

#include <limits>
#include <utility>

namespace gptc::rt::attention {

std::array<int64_t, 4> headMajorStrides(int64_t heads, int64_t rows,
                                        int64_t headDim) {
  return {heads * rows * headDim, rows * headDim, headDim, 1};
}

std::array<int64_t, 4> packedStrides(int64_t rows, int64_t width,
                                     int64_t headDim) {
  return {rows * width, headDim, width, 1};
}

const char *graphRoleName(GraphRole r) {
  switch (r) {
  case GraphRole::Q:
    return "q";
  case GraphRole::K:
    return "k";
  case GraphRole::V:
    return "v";
  case GraphRole::Out:
    return "out";
  case GraphRole::Lse:
    return "lse";
  case GraphRole::Dout:
    return "dout";
  case GraphRole::Dq:
    return "dq";
  case GraphRole::Dk:
    return "dk";
  case GraphRole::Dv:
    return "dv";
  case GraphRole::RowDot:
    return "row dot";
  case GraphRole::DqSums:
    return "dq sums";
  }
  return "?";
}

namespace {

using Dims = std::array<int64_t, 4>;

/// (b, h, d, row) of a (b, h, row, d) layout: kᵀ and vᵀ as the products
/// read them.
Dims swapLast(Dims a) {
  std::swap(a[2], a[3]);
  return a;
}

class Builder {
public:
  explicit Builder(const AttentionShape &s) : s(s) {}

  int64_t tensor(const std::string &name, GraphType type, Dims dims,
                 Dims strides) {
    GraphTensor t;
    t.uid = int64_t(g.tensors.size()) + 1;
    t.name = name;
    t.type = type;
    t.dims = dims;
    t.strides = strides;
    g.tensors.push_back(t);
    return t.uid;
  }
  int64_t bound(GraphRole role, GraphType type, Dims dims, Dims strides) {
    const int64_t uid = tensor(graphRoleName(role), type, dims, strides);
    g.tensors.back().isVirtual = false;
    g.roles[role] = uid;
    return uid;
  }
  /// A float32 tensor in gptc's workspace.
  int64_t workspace(GraphRole role, Dims dims) {
    const Dims strides = {dims[1] * dims[2] * dims[3], dims[2] * dims[3],
                          dims[3], 1};
    g.workspaceOffset[role] = g.workspaceBytes;
    g.workspaceBytes +=
        (dims[0] * strides[0] * int64_t(sizeof(float)) + 255) / 256 * 256;
    return bound(role, GraphType::F32, dims, strides);
  }
  int64_t scalar(const std::string &name, float value) {
    const int64_t uid =
        tensor(name, GraphType::F32, {1, 1, 1, 1}, {1, 1, 1, 1});
    GraphTensor &t = g.tensors.back();
    t.isVirtual = false;
    t.byValue = true;
    t.value = value;
    return uid;
  }

  /// A virtual float32 tensor of the scores' shape, [B, H, T, S].
  int64_t scores(const std::string &name, GraphType type = GraphType::F32) {
    return tensor(
        name, type, {s.batch, s.heads, s.queries, s.keys},
        {s.heads * s.queries * s.keys, s.queries * s.keys, s.keys, 1});
  }
  /// A virtual float32 [B, H, T, 1]: one value a query row.
  int64_t rows(const std::string &name) {
    return tensor(name, GraphType::F32, {s.batch, s.heads, s.queries, 1},
                  {s.heads * s.queries, s.queries, 1, 1});
  }

  /// Appends an op of `kind` and returns it, for the caller to fill in.
  GraphOp &op(GraphOp::Kind kind, const std::string &name,
              std::vector<int64_t> inputs, int64_t output) {
    GraphOp &o = g.ops.emplace_back();
    o.kind = kind;
    o.name = name;
    o.inputs = std::move(inputs);
    o.output = output;
    return o;
  }
  int64_t pointwise(const std::string &name, PointwiseMode mode,
                    std::vector<int64_t> inputs, int64_t output,
                    GraphType compute = GraphType::F32, int axis = -1) {
    GraphOp &o = op(GraphOp::Kind::Pointwise, name, std::move(inputs), output);
    o.pointwise = mode;
    o.compute = compute;
    o.axis = axis;
    return output;
  }
  int64_t matmul(const std::string &name, int64_t a, int64_t b,
                 int64_t output) {
    op(GraphOp::Kind::Matmul, name, {a, b}, output);
    return output;
  }
  int64_t reduction(const std::string &name, ReductionMode mode, int64_t x,
                    int64_t output) {
    op(GraphOp::Kind::Reduction, name, {x}, output).reduction = mode;
    return output;
  }
  int64_t reshape(const std::string &name, int64_t x, int64_t output) {
    op(GraphOp::Kind::Reshape, name, {x}, output);
    return output;
  }

  /// Scores above the diagonal (key column > query row) set to -inf:
  /// cudnn-frontend's top-left causal mask.
  int64_t causalMask(int64_t scoresIn) {
    const int64_t row =
        pointwise("row index", PointwiseMode::GenIndex, {scoresIn},
                  scores("row", GraphType::I32), GraphType::F32, 2);
    const int64_t col =
        pointwise("column index", PointwiseMode::GenIndex, {scoresIn},
                  scores("col", GraphType::I32), GraphType::F32, 3);
    const int64_t keep =
        pointwise("row >= column", PointwiseMode::CmpGe, {row, col},
                  scores("keep", GraphType::Bool), GraphType::Bool);
    const int64_t minusInf =
        scalar("-inf", -std::numeric_limits<float>::infinity());
    return pointwise("causal mask", PointwiseMode::BinarySelect,
                     {scoresIn, minusInf, keep}, scores("masked"));
  }

  const AttentionShape &s;
  AttentionGraph g;
};

} // namespace

AttentionGraph attentionForwardGraph(const AttentionShape &s) {
  Builder b(s);
  const int64_t B = s.batch, H = s.heads, T = s.queries, S = s.keys,
                D = s.headDim;
  const int64_t q = b.bound(GraphRole::Q, s.dtype, {B, H, T, D}, s.q);
  const int64_t kT =
      b.bound(GraphRole::K, s.dtype, {B, H, D, S}, swapLast(s.k));
  const int64_t v = b.bound(GraphRole::V, s.dtype, {B, H, S, D}, s.v);
  int64_t x = b.matmul("q kT", q, kT, b.scores("scores"));
  x = b.pointwise("scale", PointwiseMode::Mul, {x, b.scalar("scale", s.scale)},
                  b.scores("scaled"));
  if (s.causal)
    x = b.causalMask(x);
  // The softmax, with its statistics: lse = m + log l.
  const int64_t m =
      b.reduction("row max", ReductionMode::Max, x, b.rows("max"));
  const int64_t shifted =
      b.pointwise("minus max", PointwiseMode::Sub, {x, m}, b.scores("shifted"));
  const int64_t e =
      b.pointwise("exp", PointwiseMode::Exp, {shifted}, b.scores("exp"));
  const int64_t l =
      b.reduction("row sum", ReductionMode::Add, e, b.rows("sum"));
  const int64_t logL =
      b.pointwise("log sum", PointwiseMode::Log, {l}, b.rows("log sum"));
  b.pointwise(
      "lse", PointwiseMode::Add, {m, logL},
      b.bound(GraphRole::Lse, GraphType::F32, {B, H, T, 1}, {H * T, T, 1, 1}));
  // The probabilities in the operands' type, as the product reads them.
  const int64_t p = b.pointwise("softmax", PointwiseMode::Div, {e, l},
                                b.scores("probabilities", s.dtype));
  b.matmul("p v", p, v, b.bound(GraphRole::Out, s.dtype, {B, H, T, D}, s.out));
  return std::move(b.g);
}

AttentionGraph attentionBackwardGraph(const AttentionShape &s, bool dqSums) {
  Builder b(s);
  const int64_t B = s.batch, H = s.heads, T = s.queries, S = s.keys,
                D = s.headDim;
  const int64_t q = b.bound(GraphRole::Q, s.dtype, {B, H, T, D}, s.q);
  const int64_t kT =
      b.bound(GraphRole::K, s.dtype, {B, H, D, S}, swapLast(s.k));
  const int64_t vT =
      b.bound(GraphRole::V, s.dtype, {B, H, D, S}, swapLast(s.v));
  const int64_t out = b.bound(GraphRole::Out, s.dtype, {B, H, T, D}, s.out);
  const int64_t dout = b.bound(GraphRole::Dout, s.dtype, {B, H, T, D}, s.out);
  const int64_t lse =
      b.bound(GraphRole::Lse, GraphType::F32, {B, H, T, 1}, {H * T, T, 1, 1});

  // Σ dout·out a query row, kept in gptc's workspace.
  const int64_t products =
      b.pointwise("dout out", PointwiseMode::Mul, {dout, out},
                  b.tensor("dout out", GraphType::F32, {B, H, T, D},
                           {H * T * D, T * D, H * D, 1}));
  const int64_t sums = b.reduction("row dot", ReductionMode::Add, products,
                                   b.rows("row dot sums"));
  const int64_t rowDot =
      b.pointwise("row dot", PointwiseMode::Mul, {sums, b.scalar("one", 1.0f)},
                  b.workspace(GraphRole::RowDot, {B, H, T, 1}));

  // P = exp(scale · q kᵀ − lse), 0 where masked.
  int64_t x = b.matmul("q kT", q, kT, b.scores("scores"));
  x = b.pointwise("scale", PointwiseMode::Mul, {x, b.scalar("scale", s.scale)},
                  b.scores("scaled"));
  x = b.pointwise("minus lse", PointwiseMode::Sub, {x, lse},
                  b.scores("shifted"));
  if (s.causal)
    x = b.causalMask(x);
  const int64_t p =
      b.pointwise("exp", PointwiseMode::Exp, {x}, b.scores("probabilities"));

  // The scores' transposes by strides: [B, H, S, T], the T index fastest.
  auto transposed = [&](const std::string &name) {
    return b.tensor(name, s.dtype, {B, H, S, T}, {H * T * S, T * S, 1, S});
  };
  const int64_t pT = b.reshape("pT", p, transposed("pT"));
  b.matmul("pT dout", pT, dout,
           b.bound(GraphRole::Dv, s.dtype, {B, H, S, D}, s.v));

  // dS = scale · P ∘ (dout vᵀ − D).
  x = b.matmul("dout vT", dout, vT, b.scores("dP"));
  x = b.pointwise("minus row dot", PointwiseMode::Sub, {x, rowDot},
                  b.scores("dP - D"));
  x = b.pointwise("times p", PointwiseMode::Mul, {x, p}, b.scores("dS"));
  const int64_t dS =
      b.pointwise("scale dS", PointwiseMode::Mul,
                  {x, b.scalar("scale", s.scale)}, b.scores("scaled dS"));
  const int64_t dST = b.reshape("dST", dS, transposed("dST"));
  b.matmul("dST q", dST, q, b.bound(GraphRole::Dk, s.dtype, {B, H, S, D}, s.k));

  // dq = dS k, k seen as [B, H, S, D] again.
  const int64_t k =
      b.reshape("k", kT, b.tensor("k", GraphType::F32, {B, H, S, D}, s.k));
  const int64_t dq = b.bound(GraphRole::Dq, s.dtype, {B, H, T, D}, s.q);
  if (dqSums) {
    const int64_t acc =
        b.matmul("dS k", dS, k, b.workspace(GraphRole::DqSums, {B, H, T, D}));
    b.pointwise("dq", PointwiseMode::Identity, {acc}, dq);
  } else {
    b.matmul("dS k", dS, k, dq);
  }
  return std::move(b.g);
}

} // namespace gptc::rt::attention
