//===- FuseMatmulEpilogue.cpp - gpt-fuse-matmul-epilogue ------------------===//
//
// A projection's bias add, and the tanh GELU after it, become the epilogue
// of the GEMM that feeds them (cuBLASLt's BIAS, GELU_BIAS, GELU_AUX_BIAS):
//
//   %yl = gpt.matmul %x, %w : bf16, bf16 -> bf16     (fp32: no casts)
//   %y  = gpt.cast %yl : bf16 -> f32
//   %z  = gpt.add %y, %bias : f32, [N] f32
//   %h  = gpt.gelu %z {approximate = "tanh"}
//
// becomes
//
//   %h, %z = gpt.matmul_epilogue %x, %w, %bias {gelu} : bf16, bf16, [N] f32
//                                                      -> f32, f32
//
// where %z, the pre-activation (the aux output), is only kept if something
// besides the GELU reads it (the backward's gelu_grad does). The cast that
// gpt-mixed-precision put after the GEMM disappears: the epilogue rounds
// once, to the float32 of the add, so the product is no longer rounded to
// bf16 before the bias (GPTFusedOps.td; docs/pipeline.md says why).
//
// It declines, with a remark, where the pattern is not exact: an addend that
// is not a float32 [N] bias along the last dimension, a product used by
// something else than its bias add, an erf GELU, a batched weight, a
// batched left operand read transposed (several GEMMs), a product sliced
// back from a padded N (gpt-pad-dims) before the bias.
//
//===----------------------------------------------------------------------===//

#include "gptc/Dialect/GPT/GPTOps.h"
#include "gptc/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace gptc::gpt;

namespace gptc {
#define GEN_PASS_DEF_GPTFUSEMATMULEPILOGUE
#include "gptc/Transforms/Passes.h.inc"

namespace {

constexpr const char *kDeclined = "did not fuse into the matmul epilogue: ";

RankedTensorType tensorOf(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// The single user of `v`, if it has exactly one.
Operation *onlyUser(Value v) {
  return v.hasOneUse() ? *v.getUsers().begin() : nullptr;
}

/// Fuses what follows `mm`, or says why not (a remark where the chain looks
/// like a projection's bias add; silence where it is not one at all).
void fuseOne(MatmulOp mm) {
  // See through the widening cast gpt-mixed-precision put after the GEMM.
  Value product = mm.getResult();
  CastOp widen;
  if (auto c = dyn_cast_or_null<CastOp>(onlyUser(product))) {
    if (!tensorOf(c.getResult()).getElementType().isF32())
      return;
    widen = c;
    product = c.getResult();
  } else if (!tensorOf(product).getElementType().isF32()) {
    return; // a low-precision product that is not widened: not autocast's
  }
  // gpt-pad-dims slices a padded N back before the bias: the epilogue
  // would need a padded bias and a slice after it. Say so; keep it.
  if (auto slice = dyn_cast_or_null<SliceOp>(onlyUser(product)))
    for (Operation *user : slice.getResult().getUsers())
      if (auto a = dyn_cast<AddOp>(user)) {
        Value other =
            a.getLhs() == slice.getResult() ? a.getRhs() : a.getLhs();
        if (tensorOf(other).getRank() == 1)
          a->emitRemark(kDeclined)
              << "the product is sliced back from dimensions gpt-pad-dims "
                 "padded before its bias add (the epilogue would need the "
                 "bias padded too)";
      }
  // The bias add: product + bias or bias + product.
  AddOp add;
  Value bias;
  for (Operation *user : product.getUsers())
    if (auto a = dyn_cast<AddOp>(user)) {
      add = a;
      bias = a.getLhs() == product ? a.getRhs() : a.getLhs();
      break;
    }
  if (!add)
    return;
  int64_t N = tensorOf(product).getShape().back();
  auto biasType = tensorOf(bias);
  if (biasType.getRank() != 1 || biasType.getDimSize(0) != N ||
      !biasType.getElementType().isF32() ||
      add.getResult().getType() != product.getType()) {
    // A full-shape addend (a residual, a gradient sum) is simply no bias;
    // a broadcast one that is not [N] deserves a word.
    if (biasType.getNumElements() >= tensorOf(product).getNumElements())
      return;
    add->emitRemark(kDeclined)
        << "the addend " << bias.getType() << " is not a float32 [" << N
        << "] bias broadcast along the last dimension";
    return;
  }
  if (!product.hasOneUse() || (widen && !mm.getResult().hasOneUse())) {
    add->emitRemark(kDeclined)
        << "the product before its bias add is also used elsewhere, and the "
           "epilogue writes only the biased value";
    return;
  }
  if (tensorOf(mm.getB()).getRank() != 2) {
    add->emitRemark(kDeclined)
        << "the right operand is batched (rank "
        << tensorOf(mm.getB()).getRank()
        << "); the epilogue's bias belongs to a 2-D weight";
    return;
  }

  if (mm.getTransposeA() && tensorOf(mm.getA()).getRank() > 2) {
    add->emitRemark(kDeclined)
        << "the left operand is batched and transposed, one GEMM per batch "
           "(the epilogue belongs to one GEMM)";
    return;
  }

  // The GELU, if the biased value feeds a tanh one. Every other reader of
  // the pre-activation gets the aux output, which is exactly that value.
  GeluOp gelu;
  for (Operation *user : add.getResult().getUsers())
    if (auto g = dyn_cast<GeluOp>(user)) {
      if (g.getApproximate() != "tanh") {
        g->emitRemark(kDeclined)
            << "the GELU is the erf form (approximate = \""
            << g.getApproximate()
            << "\"); the epilogue's, as cuBLASLt's, is the tanh form; only "
               "the bias is fused";
        continue;
      }
      if (gelu) {
        g->emitRemark(kDeclined)
            << "a second GELU of the same pre-activation stays unfused";
        continue;
      }
      gelu = g;
    }
  bool keepPre = gelu && !add.getResult().hasOneUse();

  OpBuilder b(add);
  SmallVector<Location> locs = {mm.getLoc(), add.getLoc()};
  if (gelu)
    locs.push_back(gelu.getLoc());
  SmallVector<Type> types = {add.getResult().getType()};
  if (keepPre)
    types.push_back(add.getResult().getType());
  SmallVector<NamedAttribute> attrs;
  if (mm.getTransposeA())
    attrs.push_back(b.getNamedAttr("transpose_a", b.getUnitAttr()));
  if (mm.getTransposeB())
    attrs.push_back(b.getNamedAttr("transpose_b", b.getUnitAttr()));
  if (gelu)
    attrs.push_back(b.getNamedAttr("gelu", b.getUnitAttr()));
  auto ep = b.create<MatmulEpilogueOp>(
      b.getFusedLoc(locs), types,
      ValueRange{mm.getA(), mm.getB(), bias}, attrs);

  if (gelu) {
    gelu.getResult().replaceAllUsesWith(ep.getResult());
    gelu->erase();
    if (keepPre)
      add.getResult().replaceAllUsesWith(ep.getPre());
  } else {
    add.getResult().replaceAllUsesWith(ep.getResult());
  }
  add->erase();
  if (widen)
    widen->erase();
  mm->erase();
}

struct GPTFuseMatmulEpiloguePass
    : impl::GPTFuseMatmulEpilogueBase<GPTFuseMatmulEpiloguePass> {
  void runOnOperation() override {
    getOperation().walk([](func::FuncOp func) {
      SmallVector<MatmulOp> matmuls;
      func.walk([&](MatmulOp mm) { matmuls.push_back(mm); });
      for (MatmulOp mm : matmuls)
        fuseOne(mm);
    });
  }
};

} // namespace
} // namespace gptc
