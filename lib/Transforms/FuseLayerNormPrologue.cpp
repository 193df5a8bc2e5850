//===- FuseLayerNormPrologue.cpp - elementwise prologues of layernorm -----===//
//
// Part of gpt-fuse-elementwise, after the chains are fused: a gpt.layernorm
// whose input is a gpt.fused_elementwise absorbs that op's body as its
// prologue, making one gpt.fused_layernorm. In GPT-2 that is each block's
// residual add (x + attention or MLP output, the projection's bias already
// in the GEMM's epilogue or in the same body) and the layernorm after it:
// one row pass that computes the sum, writes it (the next residual add and
// the backward's layernorm_grad read it) and normalises it, instead of
// writing the sum and reading it back.
//
// Legal when every other user of the fused op's results runs after the
// layernorm, where the fused op goes (the same rule that lets a producer
// join an elementwise group); otherwise the pair stays, with a remark. A
// result that only the layernorm read is no longer written at all.
//
//===----------------------------------------------------------------------===//

#include "gptc/Transforms/Passes.h"

#include "gptc/Dialect/GPT/GPTOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

using namespace mlir;
using namespace gptc::gpt;

namespace {

/// Folds `f` into `ln` if legal; a remark at `ln` says why not otherwise.
void fuseInto(LayerNormOp ln, FusedElementwiseOp f) {
  Value x = ln.getX();
  auto decline = [&](const Twine &why) {
    ln.emitRemark() << "did not fuse the 'gpt.fused_elementwise' that "
                       "computes its input into 'gpt.layernorm' as a "
                       "prologue: "
                    << why;
  };
  if (!cast<RankedTensorType>(x.getType()).getElementType().isF32())
    return decline("the input is not float32");
  for (Value p : {ln.getGamma(), ln.getBeta()})
    if (p.getDefiningOp() == f.getOperation())
      return decline("the fused op also computes gamma or beta");
  // Every other user must run after the layernorm, where the fused op goes.
  for (Value r : f.getResults())
    for (OpOperand &use : r.getUses()) {
      Operation *user = use.getOwner();
      if (user == ln.getOperation() && use.get() == x)
        continue;
      if (user->getBlock() != ln->getBlock() || !ln->isBeforeInBlock(user))
        return decline(Twine("its value is also used by '") +
                       user->getName().getStringRef() +
                       "' before the layernorm runs, and fusing would "
                       "compute it twice");
    }

  // The fused op's results that others read become the values; the one the
  // layernorm reads is the body's first yielded value.
  unsigned xIndex = cast<OpResult>(x).getResultNumber();
  SmallVector<unsigned> kept;
  SmallVector<Type> types{ln.getType()};
  for (OpResult r : f->getResults())
    if (llvm::any_of(r.getUsers(),
                     [&](Operation *u) { return u != ln.getOperation(); })) {
      kept.push_back(r.getResultNumber());
      types.push_back(r.getType());
    }
  SmallVector<Value> operands(f.getInputs());
  operands.append({ln.getGamma(), ln.getBeta()});
  OpBuilder b(ln);
  // The layernorm's location first: the kernel is named after its line.
  auto fused = b.create<FusedLayerNormOp>(
      b.getFusedLoc({ln.getLoc(), f.getLoc()}), types, operands,
      ln->getAttrs());
  IRMapping map;
  f.getBody().cloneInto(&fused.getBody(), map);
  auto yield = cast<YieldOp>(fused.getBody().front().getTerminator());
  SmallVector<Value> yielded{yield.getValues()[xIndex]};
  for (unsigned k : kept)
    yielded.push_back(yield.getValues()[k]);
  b.setInsertionPoint(yield);
  b.create<YieldOp>(yield.getLoc(), yielded);
  yield.erase();

  ln.getResult().replaceAllUsesWith(fused.getResult());
  for (auto [k, v] : llvm::zip(kept, fused.getValues()))
    f.getResult(k).replaceAllUsesWith(v);
  ln.erase();
  f.erase();
}

/// Folds `f`, the only user of `grad`'s dx, into `grad` as its epilogue, if
/// legal; a remark at `grad` says why not otherwise.
void fuseEpilogue(LayerNormGradOp grad, FusedElementwiseOp f) {
  Value dx = grad.getDx();
  if (f.getResult(0).getType() != dx.getType())
    return; // dx is broadcast into a larger iteration space: not a row op
  // The fused op goes where f is: dgamma and dbeta must not be read before.
  for (Value r : {grad.getDgamma(), grad.getDbeta()})
    for (Operation *user : r.getUsers())
      if (user->getBlock() != f->getBlock() || !f->isBeforeInBlock(user)) {
        grad.emitRemark() << "did not fuse its dx into the "
                             "'gpt.fused_elementwise' that reads it as an "
                             "epilogue: dgamma or dbeta is used by '"
                          << user->getName() << "' before that op runs";
        return;
      }
  Block &old = f.getBody().front();
  unsigned dxArg = 0;
  SmallVector<Value> inputs;
  for (auto [j, v] : llvm::enumerate(f.getInputs())) {
    if (v == dx)
      dxArg = unsigned(j);
    else
      inputs.push_back(v);
  }
  SmallVector<Value> operands{grad.getX(), grad.getGamma(), grad.getDy()};
  operands.append(inputs);
  SmallVector<Type> types{grad.getDgamma().getType(),
                          grad.getDbeta().getType()};
  llvm::append_range(types, f.getResultTypes());
  OpBuilder b(f);
  auto fused = b.create<FusedLayerNormGradOp>(
      b.getFusedLoc({grad.getLoc(), f.getLoc()}), types, operands,
      grad->getAttrs());
  Block *body = b.createBlock(&fused.getBody());
  IRMapping map;
  map.map(old.getArgument(dxArg), body->addArgument(b.getF32Type(), f.getLoc()));
  for (BlockArgument arg : old.getArguments())
    if (arg.getArgNumber() != dxArg)
      map.map(arg, body->addArgument(arg.getType(), arg.getLoc()));
  for (Operation &op : old)
    b.clone(op, map);
  grad.getDgamma().replaceAllUsesWith(fused.getDgamma());
  grad.getDbeta().replaceAllUsesWith(fused.getDbeta());
  f->replaceAllUsesWith(fused.getValues());
  f.erase();
  grad.erase();
}

} // namespace

FusedLayerNormGradOp gptc::asFusedLayerNormGrad(LayerNormGradOp g) {
  OpBuilder b(g);
  Value dx = g.getDx();
  auto fused = b.create<FusedLayerNormGradOp>(
      g.getLoc(),
      TypeRange{g.getDgamma().getType(), g.getDbeta().getType(), dx.getType()},
      g.getX(), g.getGamma(), g.getDy(), ValueRange{}, g.getEpsilonAttr());
  Block *body =
      b.createBlock(&fused.getBody(), {}, {b.getF32Type()}, {g.getLoc()});
  b.setInsertionPointToEnd(body);
  b.create<YieldOp>(g.getLoc(), body->getArgument(0));
  g.getDgamma().replaceAllUsesWith(fused.getDgamma());
  g.getDbeta().replaceAllUsesWith(fused.getDbeta());
  dx.replaceAllUsesWith(fused.getValues()[0]);
  g->erase();
  return fused;
}

FusedLayerNormGradOp gptc::addLayerNormGradValue(FusedLayerNormGradOp g,
                                                 unsigned value, Type type,
                                                 Location loc) {
  OpBuilder b(g);
  SmallVector<Type> types(g->getResultTypes());
  types.push_back(type);
  auto wider = b.create<FusedLayerNormGradOp>(loc, types, g->getOperands(),
                                              g->getAttrs());
  wider.getBody().takeBody(g.getBody());
  auto yield = cast<YieldOp>(wider.getBody().front().getTerminator());
  yield->insertOperands(yield->getNumOperands(), yield.getValues()[value]);
  for (unsigned r = 0; r < g->getNumResults(); ++r)
    g->getResult(r).replaceAllUsesWith(wider->getResult(r));
  g->erase();
  return wider;
}

void gptc::fuseLayerNormPrologues(func::FuncOp func) {
  Block &block = func.getBody().front();
  SmallVector<LayerNormOp> norms(block.getOps<LayerNormOp>());
  for (LayerNormOp ln : norms)
    if (auto f = ln.getX().getDefiningOp<FusedElementwiseOp>();
        f && f->getBlock() == &block)
      fuseInto(ln, f);
  // The backward's mirror image: layernorm_grad's dx read only by one
  // fused op (the residual gradient's add). A dx that others read too
  // (ln_f's, which the GEMMs read) has to be written anyway: quiet.
  SmallVector<LayerNormGradOp> grads(block.getOps<LayerNormGradOp>());
  for (LayerNormGradOp grad : grads) {
    Value dx = grad.getDx();
    if (!dx.hasOneUse() ||
        !cast<RankedTensorType>(dx.getType()).getElementType().isF32())
      continue;
    if (auto f = dyn_cast<FusedElementwiseOp>(*dx.getUsers().begin());
        f && f->getBlock() == &block)
      fuseEpilogue(grad, f);
  }
}
