//===- GPTEpilogueOps.cpp - the verifiers of the GEMM-epilogue ops --------===//
//
// gpt.matmul_epilogue (bias, tanh GELU), gpt.matmul_gelu_grad (GELU's
// derivative, bias gradient) and gpt.matmul_bias_grad (the weight gradient
// with the bias gradient) are one GEMM each with cuBLASLt epilogue work
// (GPTFusedOps.td). The verifiers hold them to the shapes cuBLASLt's
// epilogues take, so the executor, the CPU backend and the CUDA backend meet
// nothing else.
//
//===----------------------------------------------------------------------===//

#include "gptc/Dialect/GPT/GPTOps.h"

using namespace mlir;
using namespace gptc::gpt;

namespace {

/// Checks `a` (`[batch..., M, K]`, or `[K, M]` transposed) times the 2-D `b`
/// gives `result` `[batch..., M, N]` as one GEMM; sets N.
LogicalResult verifyOneGemm(Operation *op, Value aValue, Value bValue,
                            bool transposeA, bool transposeB, Value resultValue,
                            int64_t &N) {
  auto a = cast<RankedTensorType>(aValue.getType());
  auto b = cast<RankedTensorType>(bValue.getType());
  auto result = cast<RankedTensorType>(resultValue.getType());
  if (a.getRank() < 2 || b.getRank() != 2)
    return op->emitOpError(
        "takes a [batch..., M, K] operand and a 2-D right operand");
  if (transposeA && a.getRank() > 2)
    return op->emitOpError("a batched, transposed left operand is several "
                           "GEMMs; the epilogue belongs to one");
  if (a.getElementType() != b.getElementType())
    return op->emitOpError("operands must share one element type");
  ArrayRef<int64_t> as = a.getShape();
  size_t r = as.size();
  int64_t M = transposeA ? as[r - 1] : as[r - 2];
  int64_t K = transposeA ? as[r - 2] : as[r - 1];
  int64_t kb = transposeB ? b.getDimSize(1) : b.getDimSize(0);
  N = transposeB ? b.getDimSize(0) : b.getDimSize(1);
  if (K != kb)
    return op->emitOpError() << "contraction dimensions differ: a has K=" << K
                             << ", b has K=" << kb;
  SmallVector<int64_t> shape(as.begin(), as.end() - 2);
  shape.push_back(M);
  shape.push_back(N);
  if (result.getShape() != ArrayRef<int64_t>(shape))
    return op->emitOpError("result must be [batch..., M, N]");
  return success();
}

/// cuBLASLt reads or writes the bias (gradient) as a vector of length N.
LogicalResult verifyBiasVector(Operation *op, Value bias, int64_t N,
                               StringRef what) {
  auto t = cast<RankedTensorType>(bias.getType());
  if (t.getRank() != 1 || t.getDimSize(0) != N || !t.getElementType().isF32())
    return op->emitOpError() << what << " must be a float32 [" << N << "]";
  return success();
}

} // namespace

LogicalResult MatmulEpilogueOp::verify() {
  int64_t N;
  if (failed(verifyOneGemm(*this, getA(), getB(), getTransposeA(),
                           getTransposeB(), getResult(), N)) ||
      failed(verifyBiasVector(*this, getBias(), N, "bias")))
    return failure();
  if (Value pre = getPre()) {
    if (!getGelu())
      return emitOpError("the pre-activation result needs 'gelu'");
    if (cast<RankedTensorType>(pre.getType()).getShape() !=
        cast<RankedTensorType>(getResult().getType()).getShape())
      return emitOpError("the pre-activation must have the result's shape");
  }
  return success();
}

LogicalResult MatmulGeluGradOp::verify() {
  int64_t N;
  if (failed(verifyOneGemm(*this, getA(), getB(), getTransposeA(),
                           getTransposeB(), getResult(), N)))
    return failure();
  auto pre = cast<RankedTensorType>(getPre().getType());
  auto result = cast<RankedTensorType>(getResult().getType());
  if (pre.getShape() != result.getShape())
    return emitOpError("the pre-activation must have the result's shape");
  if (!pre.getElementType().isF32() || !result.getElementType().isF32())
    return emitOpError("the pre-activation and the result are float32");
  if (Value db = getBiasGrad())
    return verifyBiasVector(*this, db, N, "the bias gradient");
  return success();
}

LogicalResult MatmulBiasGradOp::verify() {
  auto b = cast<RankedTensorType>(getB().getType());
  if (cast<RankedTensorType>(getA().getType()).getRank() != 2 ||
      b.getRank() != 2)
    return emitOpError("takes 2-D operands (the weight gradient of a "
                       "flattened batch)");
  int64_t N;
  if (failed(verifyOneGemm(*this, getA(), getB(), getTransposeA(),
                           /*transposeB=*/false, getResult(), N)))
    return failure();
  return verifyBiasVector(*this, getBiasGrad(), N, "the bias gradient");
}
