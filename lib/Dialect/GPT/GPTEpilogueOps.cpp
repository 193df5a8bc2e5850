//===- GPTEpilogueOps.cpp - the verifier of gpt.matmul_epilogue -----------===//
//
// gpt.matmul_epilogue is a GEMM by a 2-D weight with a bias and an optional
// tanh GELU applied before the one rounding (GPTFusedOps.td). The verifier
// holds it to the shapes cuBLASLt's BIAS / GELU(_AUX)_BIAS epilogues take,
// so the executor, the CPU backend and the CUDA backend meet nothing else.
//
//===----------------------------------------------------------------------===//

#include "gptc/Dialect/GPT/GPTOps.h"

using namespace mlir;
using namespace gptc::gpt;

LogicalResult MatmulEpilogueOp::verify() {
  auto a = cast<RankedTensorType>(getA().getType());
  auto b = cast<RankedTensorType>(getB().getType());
  auto bias = cast<RankedTensorType>(getBias().getType());
  auto result = cast<RankedTensorType>(getResult().getType());
  if (a.getRank() < 2 || b.getRank() != 2)
    return emitOpError("takes a [batch..., M, K] operand and a 2-D weight");
  if (getTransposeA() && a.getRank() > 2)
    return emitOpError("a batched, transposed left operand is several GEMMs; "
                       "the epilogue belongs to one");
  if (a.getElementType() != b.getElementType())
    return emitOpError("operands must share one element type");
  ArrayRef<int64_t> as = a.getShape();
  size_t r = as.size();
  int64_t M = getTransposeA() ? as[r - 1] : as[r - 2];
  int64_t K = getTransposeA() ? as[r - 2] : as[r - 1];
  int64_t kb = getTransposeB() ? b.getDimSize(1) : b.getDimSize(0);
  int64_t N = getTransposeB() ? b.getDimSize(0) : b.getDimSize(1);
  if (K != kb)
    return emitOpError() << "contraction dimensions differ: a has K=" << K
                         << ", b has K=" << kb;
  SmallVector<int64_t> shape(as.begin(), as.end() - 2);
  shape.push_back(M);
  shape.push_back(N);
  if (result.getShape() != ArrayRef<int64_t>(shape))
    return emitOpError("result must be [batch..., M, N]");
  // cuBLASLt reads the bias as a vector of the epilogue's length, N.
  if (bias.getRank() != 1 || bias.getDimSize(0) != N ||
      !bias.getElementType().isF32())
    return emitOpError() << "bias must be a float32 [" << N << "]";
  if (Value pre = getPre()) {
    if (!getGelu())
      return emitOpError("the pre-activation result needs 'gelu'");
    auto p = cast<RankedTensorType>(pre.getType());
    if (p.getShape() != result.getShape())
      return emitOpError("the pre-activation must have the result's shape");
  }
  return success();
}
