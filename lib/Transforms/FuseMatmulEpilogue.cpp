//===- FuseMatmulEpilogue.cpp - gpt-fuse-matmul-epilogue ------------------===//
//
// A projection's bias add, and the tanh GELU after it, become the epilogue
// of the GEMM that feeds them (cuBLASLt's BIAS, GELU_BIAS, GELU_AUX_BIAS),
// and their gradients epilogues of the backward's GEMMs:
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
// besides the GELU reads it (the backward's gelu_grad does); fp32 shown.
// Under autocast the cast gpt-mixed-precision put after the GEMM is seen
// through and the epilogue rounds once, after the bias (and GELU), to the
// operands' bf16 (or f16), as torch.autocast's linear does: the product is
// no longer rounded before the bias (GPTFusedOps.td; docs/pipeline.md says
// why).
//
// cuBLASLt reads the bias, and writes the aux matrix and a bias gradient, in
// D's type, so the epilogue writes the narrow type throughout: D, the aux
// %z (rounded, as autocast saves GELU's bf16 input) and a bias cast to it
// (as autocast's linear casts its bias). Readers that narrowed %h again
// (autocast's cast before the next GEMM) take it as it is; float32 readers
// of %h (an output projection's residual add) or %z get a widening cast,
// which gpt-fuse-elementwise folds into the group that reads it. The backward then reads the narrow aux, writes
// its D narrow (its readers narrowed it anyway) and its bias gradient too,
// widened for the float32 master gradient. A weight-gradient GEMM whose
// bias gradient it computes writes float32 instead: the widening cast after
// it is absorbed, so weight and bias gradient share D's type. So does every
// other weight-gradient GEMM (x^T dy, 2-D) that is only widened.
//
// The backward's counterparts (cuBLASLt's DGELU_BGRAD and BGRADA):
//
//   %dh  = gpt.matmul %dy, %w2 {transpose_b}   (+ widening cast)
//   %dp  = gpt.gelu_grad %z, %dh                  ->  %dp, %db1 =
//   %db1 = gpt.reduce_sum %dp -> [N]                  gpt.matmul_gelu_grad
//                                                     %dy, %w2, %z
//   %db  = gpt.reduce_sum %g -> [N]
//   %gl  = gpt.cast %g (bf16), reshaped [M, N]    ->  %dw, %db =
//   %dw  = gpt.matmul %x, %gl {transpose_a}           gpt.matmul_bias_grad
//                                                     %x, %gl
//
// Under bf16 the bias gradient then sums the bf16 copy of %g the GEMM
// reads, not the float32 %g (GPTFusedOps.td).
//
// It declines, with a remark, where the pattern is not exact: an addend that
// is not a float32 [N] bias along the last dimension, a product used by
// something else than its bias add, an erf GELU, a batched weight, a
// batched left operand read transposed (several GEMMs), a product sliced
// back from a padded N (gpt-pad-dims) before the bias.
//
//===----------------------------------------------------------------------===//

#include "gptc/Dialect/GPT/GPTOps.h"

#include "TensorOf.h"
#include "gptc/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace gptc::gpt;

namespace gptc {
#define GEN_PASS_DEF_GPTFUSEMATMULEPILOGUE
#include "gptc/Transforms/Passes.h.inc"

namespace {

constexpr const char *kDeclined = "did not fuse into the matmul epilogue: ";

/// The single user of `v`, if it has exactly one.
Operation *onlyUser(Value v) {
  return v.hasOneUse() ? *v.getUsers().begin() : nullptr;
}

/// The 16-bit float type every user of the float32 `v` casts it to, if all
/// of them are such casts to one type (autocast narrowing a GEMM's result
/// for the next GEMM); null otherwise.
Type narrowedTo(Value v) {
  Type to;
  if (!elementOf(v).isF32() || v.use_empty())
    return {};
  for (Operation *user : v.getUsers()) {
    auto c = dyn_cast<CastOp>(user);
    if (!c)
      return {};
    Type t = elementOf(c.getResult());
    if (!(t.isBF16() || t.isF16()) || (to && t != to))
      return {};
    to = t;
  }
  return to;
}

/// Replaces every (narrowing) cast of `v` with `narrow`, which holds the
/// same values already in the cast's type.
void replaceCasts(Value v, Value narrow) {
  for (Operation *user : llvm::make_early_inc_range(v.getUsers())) {
    user->getResult(0).replaceAllUsesWith(narrow);
    user->erase();
  }
}

/// A gpt.cast of `v` to `element`, made after `v` is defined.
Value castAfterDef(OpBuilder &b, Value v, Type element) {
  OpBuilder::InsertionGuard guard(b);
  if (Operation *def = v.getDefiningOp())
    b.setInsertionPointAfter(def);
  else
    b.setInsertionPointToStart(cast<BlockArgument>(v).getOwner());
  return b.create<CastOp>(v.getLoc(), tensorOf(v).clone(element), v);
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
  // The first GELU in the block is the forward's: a later one is
  // gpt-recompute's copy for the backward, which reads the aux quietly.
  SmallVector<Operation *> users(add.getResult().getUsers());
  llvm::sort(users, [](Operation *a, Operation *b) {
    return a->isBeforeInBlock(b);
  });
  GeluOp gelu;
  for (Operation *user : users)
    if (auto g = dyn_cast<GeluOp>(user)) {
      if (gelu && gptc::isRecomputed(g))
        continue;
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
  Value out = gelu ? gelu.getResult() : add.getResult();
  // Only to the operands' own type: cuBLASLt pairs 16-bit operands with a
  // 16-bit or float32 D, float32 operands with a float32 D.
  Type narrow = narrowedTo(out);
  if (narrow != elementOf(mm.getA()))
    narrow = {};
  // Under autocast (a widened 16-bit product) the epilogue writes the
  // operands' type even where float32 reads the value (an output
  // projection's residual add), as torch.autocast's linear does; those
  // readers get a widening cast, which the elementwise fusion folds into
  // them: half the bytes written and read.
  bool widenAfter = false;
  if (!narrow && widen) {
    narrow = elementOf(mm.getA());
    widenAfter = true;
  }

  OpBuilder b(add);
  SmallVector<Location> locs = {mm.getLoc(), add.getLoc()};
  if (gelu)
    locs.push_back(gelu.getLoc());
  auto outType = tensorOf(out);
  if (narrow) {
    outType = outType.clone(narrow);
    bias = castAfterDef(b, bias, narrow);
  }
  SmallVector<Type> types = {outType};
  if (keepPre)
    types.push_back(outType);
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

  if (widenAfter)
    out.replaceAllUsesWith(castAfterDef(b, ep.getResult(), b.getF32Type()));
  else if (narrow)
    replaceCasts(out, ep.getResult());
  else
    out.replaceAllUsesWith(ep.getResult());
  if (gelu)
    gelu->erase();
  if (keepPre)
    add.getResult().replaceAllUsesWith(
        narrow ? castAfterDef(b, ep.getPre(), b.getF32Type()) : ep.getPre());
  add->erase();
  if (widen)
    widen->erase();
  mm->erase();
}

//===----------------------------------------------------------------------===//
// The backward: GELU's derivative and the bias gradients
//===----------------------------------------------------------------------===//

/// True if every user of `v` comes after `point` in its block (so a value
/// made at `point` can replace `v`).
bool usersFollow(Value v, Operation *point) {
  for (Operation *user : v.getUsers())
    if (user->getBlock() != point->getBlock() ||
        !point->isBeforeInBlock(user))
      return false;
  return true;
}

/// The gpt.reduce_sum of `x` down to its last dimension, if there is one.
ReduceSumOp biasSumOf(Value x) {
  int64_t N = tensorOf(x).getShape().back();
  for (Operation *user : x.getUsers())
    if (auto rs = dyn_cast<ReduceSumOp>(user)) {
      auto t = tensorOf(rs.getResult());
      if (t.getRank() == 1 && t.getDimSize(0) == N &&
          t.getElementType().isF32())
        return rs;
    }
  return {};
}

/// dh = dy W^T; dpre = gelu_grad(pre, dh); [db = reduce_sum(dpre)] becomes
/// one gpt.matmul_gelu_grad (cuBLASLt's DGELU_BGRAD, or DGELU).
void fuseGeluGrad(GeluGradOp gg) {
  if (gg.getApproximate() != "tanh")
    return; // the erf form's backward: the forward said why already
  Value dh = gg.getDy();
  auto widen = dh.getDefiningOp<CastOp>();
  if (widen)
    dh = widen.getX();
  auto mm = dh.getDefiningOp<MatmulOp>();
  if (!mm)
    return;
  if (!mm.getResult().hasOneUse() ||
      (widen && !widen.getResult().hasOneUse())) {
    gg->emitRemark(kDeclined)
        << "the product is also used elsewhere, and the epilogue writes "
           "only its product with GELU's derivative";
    return;
  }
  if (tensorOf(mm.getB()).getRank() != 2 ||
      (mm.getTransposeA() && tensorOf(mm.getA()).getRank() > 2)) {
    gg->emitRemark(kDeclined)
        << "the product is several GEMMs (a batched right operand, or a "
           "batched transposed left one)";
    return;
  }
  Value pre = gg.getX();
  if (!elementOf(pre).isF32() || !elementOf(gg.getResult()).isF32())
    return; // not the float32 gradient that mixed precision makes
  // A narrow aux from the forward (widened for gelu_grad): D and the bias
  // gradient are then of its type, as cuBLASLt keeps them.
  // (Only where the GEMM's operands are of that type too: cuBLASLt pairs
  // float32 operands with a float32 D; otherwise the widened aux is read.)
  CastOp preWiden = pre.getDefiningOp<CastOp>();
  if (preWiden && elementOf(preWiden.getX()).getIntOrFloatBitWidth() < 32 &&
      elementOf(preWiden.getX()) == elementOf(mm.getA()))
    pre = preWiden.getX();
  else
    preWiden = {};
  Type element = elementOf(pre);
  // The fused op stands where the GEMM is; the pre-activation (from the
  // forward) must already exist there.
  if (Operation *def = pre.getDefiningOp();
      def && (def->getBlock() != mm->getBlock() || !def->isBeforeInBlock(mm))) {
    gg->emitRemark(kDeclined)
        << "the pre-activation is computed after the GEMM that feeds the "
           "derivative";
    return;
  }
  ReduceSumOp rs = biasSumOf(gg.getResult());
  if (preWiden) {
    // Every reader but the bias sum must narrow the derivative to the aux's
    // type anyway; a float32 one would lose bits.
    for (Operation *user : gg.getResult().getUsers()) {
      auto c = dyn_cast<CastOp>(user);
      if ((!rs || user != rs.getOperation()) &&
          (!c || elementOf(c.getResult()) != element)) {
        gg->emitRemark(kDeclined)
            << "the derivative is also read as float32, and cuBLASLt "
               "writes it in the "
            << element << " of the saved pre-activation";
        return;
      }
    }
  }

  OpBuilder b(mm);
  SmallVector<Location> locs = {mm.getLoc(), gg.getLoc()};
  SmallVector<Type> types = {tensorOf(gg.getResult()).clone(element)};
  if (rs) {
    locs.push_back(rs.getLoc());
    types.push_back(tensorOf(rs.getResult()).clone(element));
  }
  SmallVector<NamedAttribute> attrs;
  if (mm.getTransposeA())
    attrs.push_back(b.getNamedAttr("transpose_a", b.getUnitAttr()));
  if (mm.getTransposeB())
    attrs.push_back(b.getNamedAttr("transpose_b", b.getUnitAttr()));
  auto fused = b.create<MatmulGeluGradOp>(
      b.getFusedLoc(locs), types, ValueRange{mm.getA(), mm.getB(), pre},
      attrs);
  if (rs) {
    rs.getResult().replaceAllUsesWith(
        preWiden ? castAfterDef(b, fused.getBiasGrad(), b.getF32Type())
                 : fused.getBiasGrad());
    rs->erase();
  }
  if (preWiden)
    replaceCasts(gg.getResult(), fused.getResult());
  else
    gg.getResult().replaceAllUsesWith(fused.getResult());
  gg->erase();
  if (preWiden && preWiden.getResult().use_empty())
    preWiden->erase();
  if (widen)
    widen->erase();
  mm->erase();
}

/// db = reduce_sum(dy); dW = x^T dy (dy through its cast and reshape)
/// becomes one gpt.matmul_bias_grad (cuBLASLt's BGRADA after the swap).
void fuseBiasGrad(ReduceSumOp rs, bool geluBiasGrads) {
  Value dy = rs.getX();
  // (Left to the matmul_gelu_grad that writes dy: fuseGeluGrad.)
  if (auto gg = dy.getDefiningOp<GeluGradOp>();
      geluBiasGrads && gg && gg.getApproximate() == "tanh")
    return;
  auto dyType = tensorOf(dy);
  auto sumType = tensorOf(rs.getResult());
  if (sumType.getRank() != 1 || dyType.getRank() < 2 ||
      sumType.getDimSize(0) != dyType.getShape().back() ||
      !dyType.getElementType().isF32())
    return; // not a bias gradient
  // The weight-gradient GEMM reads dy as its right operand, through the
  // cast gpt-mixed-precision put before it and the reshape to [M, N].
  MatmulOp weightGrad;
  SmallVector<Value> copies = {dy};
  for (size_t i = 0; i < copies.size() && !weightGrad; ++i)
    for (Operation *user : copies[i].getUsers()) {
      if (isa<CastOp, ReshapeOp>(user) &&
          tensorOf(user->getResult(0)).getShape().back() ==
              dyType.getShape().back()) {
        copies.push_back(user->getResult(0));
      } else if (auto mm = dyn_cast<MatmulOp>(user);
                 mm && mm.getB() == copies[i] && !mm.getTransposeB() &&
                 tensorOf(mm.getA()).getRank() == 2 &&
                 tensorOf(mm.getB()).getRank() == 2) {
        weightGrad = mm;
        break;
      }
    }
  if (!weightGrad)
    return;
  if (!usersFollow(rs.getResult(), weightGrad)) {
    rs->emitRemark(kDeclined)
        << "the bias gradient is read before the weight-gradient GEMM that "
           "would compute it";
    return;
  }
  // cuBLASLt writes the bias gradient in D's type: a low-precision weight
  // gradient that is widened for its master weight is written as float32
  // directly (rounded once, not to bf16 first).
  Value weightGradient = weightGrad.getResult();
  CastOp widen;
  if (elementOf(weightGradient) != elementOf(rs.getResult())) {
    widen = dyn_cast_or_null<CastOp>(onlyUser(weightGradient));
    if (!widen || elementOf(widen.getResult()) != elementOf(rs.getResult())) {
      rs->emitRemark(kDeclined)
          << "the weight gradient is " << elementOf(weightGradient)
          << " and cuBLASLt writes the bias gradient in its type, not "
          << elementOf(rs.getResult());
      return;
    }
    weightGradient = widen.getResult();
  }
  OpBuilder b(weightGrad);
  SmallVector<NamedAttribute> attrs;
  if (weightGrad.getTransposeA())
    attrs.push_back(b.getNamedAttr("transpose_a", b.getUnitAttr()));
  auto fused = b.create<MatmulBiasGradOp>(
      b.getFusedLoc({weightGrad.getLoc(), rs.getLoc()}),
      TypeRange{weightGradient.getType(), rs.getResult().getType()},
      ValueRange{weightGrad.getA(), weightGrad.getB()}, attrs);
  weightGradient.replaceAllUsesWith(fused.getResult());
  rs.getResult().replaceAllUsesWith(fused.getBiasGrad());
  if (widen)
    widen->erase();
  weightGrad->erase();
  rs->erase();
}

/// x^T dy over the flattened batch (a 2-D GEMM reading its left operand
/// transposed: a weight gradient) whose low-precision result is only
/// widened for the master weight writes float32 directly, as
/// gpt.matmul_bias_grad does: rounded once, and one cast kernel fewer.
void widenWeightGradient(MatmulOp mm) {
  if (!mm.getTransposeA() || mm.getTransposeB() ||
      tensorOf(mm.getA()).getRank() != 2 ||
      tensorOf(mm.getB()).getRank() != 2 || elementOf(mm.getResult()).isF32())
    return;
  auto widen = dyn_cast_or_null<CastOp>(onlyUser(mm.getResult()));
  if (!widen || !elementOf(widen.getResult()).isF32())
    return;
  mm.getResult().setType(widen.getResult().getType());
  widen.getResult().replaceAllUsesWith(mm.getResult());
  widen->erase();
}

struct GPTFuseMatmulEpiloguePass
    : impl::GPTFuseMatmulEpilogueBase<GPTFuseMatmulEpiloguePass> {
  using GPTFuseMatmulEpilogueBase::GPTFuseMatmulEpilogueBase;
  void runOnOperation() override {
    const bool geluSums = geluBiasGrads;
    getOperation().walk([&](func::FuncOp func) {
      // The forward first: its aux pre-activation is what the backward's
      // gelu_grad reads; then the bias gradients into their weight-gradient
      // GEMMs, c_fc's included; then GELU's derivative, which takes a bias
      // gradient's sum only where no weight-gradient GEMM reads it (c_fc's
      // bias gradient in DGELU_BGRAD cost a column-sum pass over the
      // derivative after cuBLASLt's DGELU, where BGRADA costs its GEMM a
      // few per cent: docs/pipeline.md), or where gelu-bias-grads says so.
      SmallVector<MatmulOp> matmuls;
      func.walk([&](MatmulOp mm) { matmuls.push_back(mm); });
      for (MatmulOp mm : matmuls)
        fuseOne(mm);
      SmallVector<ReduceSumOp> sums;
      func.walk([&](ReduceSumOp rs) { sums.push_back(rs); });
      for (ReduceSumOp rs : sums)
        fuseBiasGrad(rs, geluSums);
      SmallVector<GeluGradOp> geluGrads;
      func.walk([&](GeluGradOp gg) { geluGrads.push_back(gg); });
      for (GeluGradOp gg : geluGrads)
        fuseGeluGrad(gg);
      // The weight gradients left without a bias: float32 as well.
      matmuls.clear();
      func.walk([&](MatmulOp mm) { matmuls.push_back(mm); });
      for (MatmulOp mm : matmuls)
        widenWeightGradient(mm);
    });
  }
};

} // namespace
} // namespace gptc
