//===- GPTEpilogueOps.cpp - the verifiers of the GEMM-epilogue ops --------===//
//
// gpt.matmul_epilogue (bias, tanh GELU), gpt.matmul_gelu_grad (GELU's
// derivative, bias gradient) and gpt.matmul_bias_grad (the weight gradient
// with the bias gradient) are one GEMM each with cuBLASLt epilogue work
// (GPTFusedOps.td). The verifiers hold them to the shapes and types
// cuBLASLt's epilogues take, so the executor, the CPU backend and the CUDA
// backend meet nothing else: one GEMM, a bias (gradient) of length N, and
// the bias, its gradient and the GELU aux matrix all of D's element type
// (cuBLASLt's documented default; other types are for FP8 and integer
// GEMMs only).
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

/// cuBLASLt reads or writes the bias (gradient) as a vector of length N in
/// D's element type.
LogicalResult verifyBiasVector(Operation *op, Value bias, int64_t N,
                               StringRef what, Value result) {
  auto t = cast<RankedTensorType>(bias.getType());
  Type element = cast<RankedTensorType>(result.getType()).getElementType();
  if (t.getRank() != 1 || t.getDimSize(0) != N || t.getElementType() != element)
    return op->emitOpError() << what << " must be [" << N
                             << "] of the result's element type " << element;
  return success();
}

/// The GELU aux matrix: D's shape and element type.
LogicalResult verifyPre(Operation *op, Value pre, Value result) {
  auto p = cast<RankedTensorType>(pre.getType());
  auto r = cast<RankedTensorType>(result.getType());
  if (p.getShape() != r.getShape())
    return op->emitOpError("the pre-activation must have the result's shape");
  if (p.getElementType() != r.getElementType())
    return op->emitOpError() << "the pre-activation is " << p.getElementType()
                             << ", the result " << r.getElementType()
                             << "; cuBLASLt keeps the GELU input in D's type";
  return success();
}

} // namespace

LogicalResult MatmulEpilogueOp::verify() {
  int64_t N;
  if (failed(verifyOneGemm(*this, getA(), getB(), getTransposeA(),
                           getTransposeB(), getResult(), N)) ||
      failed(verifyBiasVector(*this, getBias(), N, "bias", getResult())))
    return failure();
  if (Value pre = getPre()) {
    if (!getGelu())
      return emitOpError("the pre-activation result needs 'gelu'");
    return verifyPre(*this, pre, getResult());
  }
  return success();
}

LogicalResult MatmulGeluGradOp::verify() {
  int64_t N;
  if (failed(verifyOneGemm(*this, getA(), getB(), getTransposeA(),
                           getTransposeB(), getResult(), N)))
    return failure();
  if (failed(verifyPre(*this, getPre(), getResult())))
    return failure();
  if (Value db = getBiasGrad())
    return verifyBiasVector(*this, db, N, "the bias gradient", getResult());
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
  return verifyBiasVector(*this, getBiasGrad(), N, "the bias gradient",
                          getResult());
}
