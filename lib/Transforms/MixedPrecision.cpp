//===- MixedPrecision.cpp - gpt-mixed-precision ---------------------------===//
//
// Autocast as a compiler pass. Under bf16 and fp16 every gpt.matmul and
// attention op (gpt.flash_attention, gpt.flash_attention_qkv) of a forward
// function takes low-precision copies of its float32 operands (gpt.cast)
// and produces its result in the low type, which one more cast widens back
// to float32 for the ops that follow:
//
//   %y = gpt.matmul %x, %w : f32, f32 -> f32
//
// becomes
//
//   %xl = gpt.cast %x : f32 -> bf16    (the activation the backward keeps)
//   %wl = gpt.cast %w : f32 -> bf16    (the bf16 copy of the master weight)
//   %yl = gpt.matmul %xl, %wl : bf16, bf16 -> bf16   (float32 accumulation)
//   %y  = gpt.cast %yl : bf16 -> f32
//
// Everything else (layernorm, softmax inside attention, GELU, residual adds,
// the loss, the optimizer) stays float32, and the parameters stay float32:
// gpt-autodiff carries each gradient back through the casts' VJPs, so the
// master weights get float32 gradients. Running before gpt-autodiff is what
// makes the backward GEMMs low-precision too (their operands are the casts).
//
//===----------------------------------------------------------------------===//

#include "gptc/Dialect/GPT/GPTOps.h"
#include "gptc/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"

using namespace mlir;
using namespace gptc::gpt;

namespace gptc {
#define GEN_PASS_DEF_GPTMIXEDPRECISION
#include "gptc/Transforms/Passes.h.inc"

namespace {

RankedTensorType withElement(Value v, Type elem) {
  return cast<RankedTensorType>(v.getType()).clone(elem);
}

/// Low-precision copies of float32 values, one per value per function.
class Caster {
public:
  Caster(Type low) : low_(low) {}

  Value narrow(OpBuilder &b, Value v) {
    if (!cast<RankedTensorType>(v.getType()).getElementType().isF32())
      return v;
    Value &copy = copies_[v];
    if (!copy) {
      OpBuilder::InsertionGuard guard(b);
      if (Operation *def = v.getDefiningOp())
        b.setInsertionPointAfter(def);
      else
        b.setInsertionPointToStart(v.getParentBlock());
      copy = b.create<CastOp>(v.getLoc(), withElement(v, low_), v);
    }
    return copy;
  }

  Type low() const { return low_; }

private:
  Type low_;
  DenseMap<Value, Value> copies_;
};

bool allF32(ValueRange values) {
  return llvm::all_of(values, [](Value v) {
    return cast<RankedTensorType>(v.getType()).getElementType().isF32();
  });
}

void castMatmul(MatmulOp op, Caster &caster) {
  OpBuilder b(op);
  Value a = caster.narrow(b, op.getA()), w = caster.narrow(b, op.getB());
  auto low = b.create<MatmulOp>(op.getLoc(),
                                withElement(op.getResult(), caster.low()), a,
                                w, op.getTransposeA(), op.getTransposeB());
  low->setAttrs(op->getAttrs());
  auto wide =
      b.create<CastOp>(op.getLoc(), op.getResult().getType(), low.getResult());
  op.getResult().replaceAllUsesWith(wide.getResult());
  op.erase();
}

// The logsumexp stays float32: it is a statistic, not an activation.
void castAttention(FlashAttentionOp op, Caster &caster) {
  OpBuilder b(op);
  Value q = caster.narrow(b, op.getQ()), k = caster.narrow(b, op.getK()),
        v = caster.narrow(b, op.getV());
  auto low = b.create<FlashAttentionOp>(
      op.getLoc(), withElement(op.getOut(), caster.low()),
      op.getLse().getType(), q, k, v, op.getScaleAttr(), op.getCausalAttr());
  auto wide =
      b.create<CastOp>(op.getLoc(), op.getOut().getType(), low.getOut());
  op.getOut().replaceAllUsesWith(wide.getResult());
  op.getLse().replaceAllUsesWith(low.getLse());
  op.erase();
}

// Packed attention: one cast on the [B, T, 3C] input (which
// gpt-fuse-elementwise folds into the c_attn GEMM's epilogue), the output
// in the low type, lse float32 as above.
void castPackedAttention(FlashAttentionQKVOp op, Caster &caster) {
  OpBuilder b(op);
  auto low = b.create<FlashAttentionQKVOp>(
      op.getLoc(), withElement(op.getOut(), caster.low()),
      op.getLse().getType(), caster.narrow(b, op.getQkv()),
      op.getNumHeadsAttr(), op.getScaleAttr(), op.getCausalAttr());
  auto wide =
      b.create<CastOp>(op.getLoc(), op.getOut().getType(), low.getOut());
  op.getOut().replaceAllUsesWith(wide.getResult());
  op.getLse().replaceAllUsesWith(low.getLse());
  op.erase();
}

bool hasLoss(func::FuncOp func) {
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (auto out = func.getResultAttrOfType<StringAttr>(i, kOutputAttr))
      if (out.getValue() == "loss")
        return true;
  return false;
}

struct GPTMixedPrecisionPass
    : impl::GPTMixedPrecisionBase<GPTMixedPrecisionPass> {
  using GPTMixedPrecisionBase::GPTMixedPrecisionBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    if (!llvm::is_contained({"fp32", "tf32", "bf16", "fp16"}, policy)) {
      module.emitError() << "gpt-mixed-precision: unknown policy '" << policy
                         << "' (expected fp32, tf32, bf16 or fp16)";
      return signalPassFailure();
    }
    if (policy == "fp32")
      return;
    // tf32 changes no types: the GEMMs read float32 and may round their
    // inputs to TF32 internally, a runtime setting recorded here.
    module->setAttr(kPrecisionAttr, StringAttr::get(ctx, policy));
    if (policy == "tf32")
      return;

    Type low = policy == "bf16" ? Type(BFloat16Type::get(ctx))
                                : Type(Float16Type::get(ctx));
    for (auto func : module.getOps<func::FuncOp>()) {
      if (!hasLoss(func) || func.isExternal())
        continue;
      Caster caster(low);
      SmallVector<Operation *> targets;
      func.walk([&](Operation *op) {
        if (isa<MatmulOp, FlashAttentionOp, FlashAttentionQKVOp>(op) &&
            allF32(op->getOperands()))
          targets.push_back(op);
      });
      for (Operation *op : targets) {
        if (auto m = dyn_cast<MatmulOp>(op))
          castMatmul(m, caster);
        else if (auto packed = dyn_cast<FlashAttentionQKVOp>(op))
          castPackedAttention(packed, caster);
        else
          castAttention(cast<FlashAttentionOp>(op), caster);
      }
      if (policy == "fp16")
        func->setAttr(kLossScalingAttr, UnitAttr::get(ctx));
    }
  }
};

} // namespace
} // namespace gptc
