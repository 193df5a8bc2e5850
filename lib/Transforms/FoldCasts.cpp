//===- FoldCasts.cpp - casts into the layout ops next to them -------------===//
//
// Part of gpt-fuse-elementwise, before the chains are fused: a gpt.cast
// that gpt-mixed-precision put next to a layout op (gpt.transpose, slice,
// pad, concat, split) becomes that op's conversion, so the pair is one
// kernel that reads one type and writes the other. Under bf16 attention's
// head split and merge are such pairs in both directions:
//
//   %t = gpt.transpose %q [0, 2, 1, 3] : f32 -> f32     %t = gpt.transpose %q
//   %c = gpt.cast %t : f32 -> bf16                  =>       : f32 -> bf16
//
//   %w = gpt.cast %out : bf16 -> f32                     %t = gpt.transpose
//   %t = gpt.transpose %w [0, 2, 1, 3] : f32 -> f32 =>       %out : bf16 -> f32
//
// Reshapes between the two are views and are seen through (retyped).
// The loss: a gpt.cross_entropy_with_grad of widened bf16 logits whose
// gradient is narrowed back reads and writes bf16 (foldCastsIntoLoss): it
// computes in float32 and rounds the gradient once on store either way;
// a plain gpt.cross_entropy of widened logits (the evaluation forward's)
// reads them narrow, widening each element as it loads it.
// After the layernorms took their prologues, the cast of a
// gpt.fused_layernorm's result for the next GEMM becomes the type the
// layernorm writes (foldCastsIntoLayerNorms): it rounds once on store,
// and a gpt.layernorm_grad or gpt.fused_layernorm_grad whose dy is a
// widened GEMM result reads the narrow one (it widens each element as it
// loads it). A gpt.fused_layernorm_grad value narrowed for the next GEMM
// becomes one more value of the op, the same scalar rounded on store
// (foldCastsIntoLayerNormGradValues); so does the narrowing of a plain
// gpt.layernorm_grad's dx that float32 readers need too (ln_f's), the op
// becoming a gpt.fused_layernorm_grad whose body yields dx.
// The narrowing cast of a gpt.fused_elementwise result becomes that
// result's type where nothing else reads it (gpt-recompute's GELU copy,
// narrowed for the weight-gradient GEMM), or one more result of the group
// where float32 readers need it too (AdamW's new weight and its bf16
// copy, gpt-weight-copies) (foldCastsIntoGroups): the body yields float32
// and the kernel rounds on store, as the cast did.
// Two casts in a row are one, or none (foldCastPairs: attention's bf16
// output widened by autodiff's bookkeeping and narrowed for the next GEMM).
// Exact: moving data does not change a value, so "move, then round" is
// "round, then move". Two conversions in a row become one only if the
// first is exact (a widening) or the second is none: bf16 -> f32 -> bf16
// is bf16 -> bf16, but f32 -> bf16 -> f32 is not f32 -> f32 and stays.
//
//===----------------------------------------------------------------------===//

#include "gptc/Transforms/Passes.h"

#include "gptc/Dialect/GPT/GPTOps.h"

#include "TensorOf.h"

using namespace mlir;
using namespace gptc::gpt;

namespace {

void retype(Value v, Type element) {
  v.setType(cast<RankedTensorType>(v.getType()).clone(element));
}

/// Converting `from` -> `mid` -> `to` is converting `from` -> `to`.
bool composes(Type from, Type mid, Type to) {
  return gptc::isExactConversion(from, mid) || mid == to;
}

bool isLayout(Operation *op) {
  return isa<TransposeOp, SliceOp, PadOp, ConcatOp, SplitOp>(op);
}

/// Follows `v` up through single-use reshapes; returns the value at the
/// top and collects the reshapes' results on the way.
Value aboveReshapes(Value v, SmallVectorImpl<Value> &reshaped) {
  while (auto r = v.getDefiningOp<ReshapeOp>()) {
    if (!r.getResult().hasOneUse())
      break;
    reshaped.push_back(r.getResult());
    v = r.getX();
  }
  return v;
}

/// cast(reshape*(layout(x))): the layout op writes the cast's type.
bool foldIntoProducer(CastOp c) {
  SmallVector<Value> reshaped;
  Value top = aboveReshapes(c.getX(), reshaped);
  Operation *layout = top.getDefiningOp();
  if (!layout || !isLayout(layout) || isa<SplitOp>(layout) ||
      !top.hasOneUse())
    return false;
  Type from = elementOf(layout->getOperand(0)), mid = elementOf(top),
       to = elementOf(c.getResult());
  if (!isa<FloatType>(from) || !composes(from, mid, to))
    return false;
  retype(top, to);
  for (Value r : reshaped)
    retype(r, to);
  c.getResult().replaceAllUsesWith(c.getX());
  c->erase();
  return true;
}

/// layout(reshape*(cast(x))): the layout op reads the cast's input.
bool foldIntoConsumer(Operation *layout) {
  if (layout->getNumOperands() != 1) // concat's inputs must share a type
    return false;
  SmallVector<Value> reshaped;
  Value top = aboveReshapes(layout->getOperand(0), reshaped);
  auto c = top.getDefiningOp<CastOp>();
  if (!c || !c.getResult().hasOneUse())
    return false;
  Type from = elementOf(c.getX()), mid = elementOf(c.getResult());
  for (Value r : layout->getResults())
    if (!composes(from, mid, elementOf(r)))
      return false;
  for (Value r : reshaped)
    retype(r, from);
  c.getResult().replaceAllUsesWith(c.getX());
  c->erase();
  return true;
}

} // namespace

bool gptc::isExactConversion(Type from, Type to) {
  return from == to || (to.isF32() && (from.isBF16() || from.isF16()));
}

Value gptc::widenedFrom(Value v) {
  auto c = v.getDefiningOp<CastOp>();
  if (!c || !elementOf(v).isF32())
    return {};
  Type from = elementOf(c.getX());
  return from.isBF16() || from.isF16() ? c.getX() : Value();
}

namespace {

/// `ln` as a gpt.fused_layernorm of its input alone (the body yields its
/// one element), so that the narrowing cast after it can be folded too.
FusedLayerNormOp asFusedLayerNorm(LayerNormOp ln) {
  OpBuilder b(ln);
  auto fused = b.create<FusedLayerNormOp>(
      ln.getLoc(), TypeRange{ln.getType()},
      ValueRange{ln.getX(), ln.getGamma(), ln.getBeta()}, ln->getAttrs());
  Block *body = b.createBlock(&fused.getBody());
  Value x = body->addArgument(elementOf(ln.getX()), ln.getLoc());
  b.create<YieldOp>(ln.getLoc(), x);
  ln.getResult().replaceAllUsesWith(fused.getResult());
  ln.erase();
  return fused;
}

} // namespace

void gptc::foldCastsIntoLayerNorms(func::FuncOp func, bool plainLayerNorms) {
  SmallVector<CastOp> casts;
  func.walk([&](CastOp c) { casts.push_back(c); });
  for (CastOp c : casts) {
    // A layernorm with no prologue (gpt-recompute's copy of one, which
    // reads the residual sum the forward wrote) takes the cast likewise.
    if (auto plain = c.getX().getDefiningOp<LayerNormOp>();
        plainLayerNorms && plain && plain.getResult().hasOneUse() &&
        elementOf(plain.getX()).isF32())
      asFusedLayerNorm(plain);
    auto ln = c.getX().getDefiningOp<FusedLayerNormOp>();
    // Only the normalised result: the body's values are yielded as their
    // own types already, and x must stay float32 for the backward.
    if (!ln || c.getX() != ln.getResult() || !ln.getResult().hasOneUse())
      continue;
    retype(ln.getResult(), elementOf(c.getResult()));
    c.getResult().replaceAllUsesWith(ln.getResult());
    c->erase();
  }
}

namespace {
/// `g` again, with one more result of `type` that yields what result
/// `result` yields; `g`'s results are replaced and `g` erased.
FusedElementwiseOp withResultAgain(FusedElementwiseOp g, unsigned result,
                                   Type type) {
  SmallVector<Type> types(g.getResultTypes());
  types.push_back(type);
  OpBuilder b(g);
  auto grown =
      b.create<FusedElementwiseOp>(g.getLoc(), types, g.getInputs());
  grown->setAttrs(g->getAttrs());
  grown.getBody().takeBody(g.getBody());
  auto yield = cast<YieldOp>(grown.getBody().front().getTerminator());
  yield->insertOperands(yield->getNumOperands(), yield->getOperand(result));
  for (unsigned r = 0; r < g.getNumResults(); ++r)
    g.getResult(r).replaceAllUsesWith(grown.getResult(r));
  g->erase();
  return grown;
}
} // namespace

void gptc::foldCastsIntoGroups(func::FuncOp func) {
  SmallVector<CastOp> casts;
  func.walk([&](CastOp c) { casts.push_back(c); });
  for (CastOp c : casts) {
    auto group = c.getX().getDefiningOp<FusedElementwiseOp>();
    Type to = elementOf(c.getResult());
    if (!group || !elementOf(c.getX()).isF32() ||
        !(to.isBF16() || to.isF16()))
      continue;
    if (c.getX().hasOneUse()) {
      retype(c.getX(), to); // the body still yields float32: rounded on store
      c.getResult().replaceAllUsesWith(c.getX());
      c->erase();
      continue;
    }
    // Float32 readers too (AdamW's new weight and its bf16 copy): the group
    // stores the value twice, the second time rounded, and nothing reads
    // the float32 one again to narrow it.
    unsigned result = cast<OpResult>(c.getX()).getResultNumber();
    FusedElementwiseOp grown =
        withResultAgain(group, result, c.getResult().getType());
    c.getResult().replaceAllUsesWith(grown.getResults().back());
    c->erase();
  }
}

void gptc::foldCastsIntoLayerNormGrads(func::FuncOp func) {
  SmallVector<std::pair<Operation *, OpOperand *>> grads;
  func.walk([&](Operation *op) {
    if (auto g = dyn_cast<LayerNormGradOp>(op))
      grads.push_back({op, &g.getDyMutable()});
    else if (auto g = dyn_cast<FusedLayerNormGradOp>(op))
      grads.push_back({op, &g.getDyMutable()});
  });
  for (auto [op, dy] : grads) {
    // Only a widening: the op computes in float32 from the same values.
    Value narrow = widenedFrom(dy->get());
    if (!narrow)
      continue;
    Operation *widen = dy->get().getDefiningOp();
    dy->set(narrow);
    if (widen->use_empty())
      widen->erase();
  }
}

/// A gpt.layernorm_grad whose dx is narrowed for a GEMM and also read as
/// float32 (ln_f's: the lm head's backward GEMMs read it as bf16, the last
/// block's residual gradient as float32) as a gpt.fused_layernorm_grad
/// with no epilogue inputs that yields dx: the narrowing then folds into
/// it like any other value's. A dx that only casts read is left alone
/// (GPT-2 has none; it would want the op without its float32 value).
static void layerNormGradsAsFused(func::FuncOp func) {
  SmallVector<LayerNormGradOp> grads;
  func.walk([&](LayerNormGradOp g) { grads.push_back(g); });
  for (LayerNormGradOp g : grads) {
    Value dx = g.getDx();
    bool narrowed = false, read = false;
    for (Operation *user : dx.getUsers()) {
      auto c = dyn_cast<CastOp>(user);
      bool narrowing = c && !gptc::isExactConversion(elementOf(dx),
                                                     elementOf(c.getResult()));
      narrowed |= narrowing;
      read |= !narrowing;
    }
    if (!narrowed || !read)
      continue;
    gptc::asFusedLayerNormGrad(g);
  }
}

void gptc::foldCastsIntoLayerNormGradValues(func::FuncOp func) {
  layerNormGradsAsFused(func);
  SmallVector<FusedLayerNormGradOp> grads;
  func.walk([&](FusedLayerNormGradOp g) { grads.push_back(g); });
  for (FusedLayerNormGradOp g : grads) {
    // Per value: the casts of it to one narrow type become one more value,
    // the same yielded scalar rounded on store (the float32 value stays
    // for its other readers: the next block's residual gradient).
    for (unsigned i = 0, e = g.getValues().size(); i < e; ++i) {
      Value v = g.getValues()[i];
      SmallVector<CastOp> casts;
      Type to;
      for (Operation *user : v.getUsers())
        if (auto c = dyn_cast<CastOp>(user);
            c &&
            !gptc::isExactConversion(elementOf(v), elementOf(c.getResult())) &&
            (!to || elementOf(c.getResult()) == to)) {
          to = elementOf(c.getResult());
          casts.push_back(c);
        }
      if (casts.empty())
        continue;
      Location loc = g.getLoc();
      g = gptc::addLayerNormGradValue(
          g, i, cast<RankedTensorType>(v.getType()).clone(to), loc);
      for (CastOp c : casts) {
        c.getResult().replaceAllUsesWith(g->getResults().back());
        c->erase();
      }
    }
  }
}

void gptc::foldCastsIntoLoss(func::FuncOp func) {
  SmallVector<CrossEntropyWithGradOp> losses;
  func.walk([&](CrossEntropyWithGradOp ce) { losses.push_back(ce); });
  for (CrossEntropyWithGradOp ce : losses) {
    // The logits widened for the loss, and the gradient narrowed for the
    // lm_head's backward GEMMs: the op reads and writes the narrow type
    // (its verifier wants one type for both, so both or neither).
    Value logits = widenedFrom(ce.getLogits());
    Value dlogits = ce.getDlogits();
    if (!logits || !ce.getLogits().hasOneUse() || !dlogits.hasOneUse())
      continue;
    Operation *widen = ce.getLogits().getDefiningOp();
    auto narrow = dyn_cast<CastOp>(*dlogits.getUsers().begin());
    Type low = elementOf(logits);
    if (!narrow || elementOf(narrow.getResult()) != low)
      continue;
    ce.getLogitsMutable().assign(logits);
    retype(dlogits, low);
    narrow.getResult().replaceAllUsesWith(dlogits);
    narrow->erase();
    widen->erase();
  }
  SmallVector<CrossEntropyOp> plain;
  func.walk([&](CrossEntropyOp ce) { plain.push_back(ce); });
  for (CrossEntropyOp ce : plain) {
    Value logits = widenedFrom(ce.getLogits());
    if (!logits)
      continue;
    Operation *widen = ce.getLogits().getDefiningOp();
    ce.getLogitsMutable().assign(logits);
    if (widen->use_empty())
      widen->erase();
  }
}

void gptc::foldCastPairs(func::FuncOp func) {
  SmallVector<CastOp> casts;
  func.walk([&](CastOp c) { casts.push_back(c); });
  for (CastOp c : casts) {
    auto first = c.getX().getDefiningOp<CastOp>();
    if (!first)
      continue;
    Type from = elementOf(first.getX()), mid = elementOf(first.getResult()),
         to = elementOf(c.getResult());
    if (!composes(from, mid, to))
      continue;
    if (from == to) {
      c.getResult().replaceAllUsesWith(first.getX());
      c->erase();
    } else {
      c.getXMutable().set(first.getX());
    }
    if (first.getResult().use_empty())
      first->erase();
  }
}

void gptc::foldCastsIntoLayoutOps(func::FuncOp func) {
  // One fold can enable another (a transpose that took the cast before it
  // can then take the one after it): repeat until nothing changes.
  for (bool changed = true; changed;) {
    changed = false;
    SmallVector<Operation *> layouts;
    func.walk([&](Operation *op) {
      if (isLayout(op))
        layouts.push_back(op);
    });
    for (Operation *op : layouts)
      changed |= foldIntoConsumer(op);
    SmallVector<CastOp> casts;
    func.walk([&](CastOp c) { casts.push_back(c); });
    for (CastOp c : casts)
      changed |= foldIntoProducer(c);
  }
}
