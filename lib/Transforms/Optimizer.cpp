//===- Optimizer.cpp - gpt-optimizer: AdamW as IR -------------------------===//
//
// The update is ordinary gpt ops over all parameters at once, so that
// gpt-fuse-elementwise can later turn it into a single multi-tensor kernel.
// It follows torch.optim.AdamW and torch.nn.utils.clip_grad_norm_ step by
// step, so a PyTorch run with the same hyper-parameters is a reference.
//
//===----------------------------------------------------------------------===//

#include "gptc/Transforms/Passes.h"

#include "gptc/Dialect/GPT/GPTOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

#include <cmath>

namespace gptc {
#define GEN_PASS_DEF_GPTOPTIMIZER
#include "gptc/Transforms/Passes.h.inc"
} // namespace gptc

using namespace mlir;
using namespace gptc::gpt;

namespace gptc {
namespace {

constexpr llvm::StringLiteral kUpdateName = "adamw_update";

struct Param {
  std::string name;
  RankedTensorType type;
  Location loc; ///< where the model declares it (its argument's location)
};

/// Builds ops at one location with scalar constants and broadcasting.
struct UpdateBuilder {
  OpBuilder &b;
  Location loc;

  RankedTensorType scalarType() const {
    return RankedTensorType::get({}, b.getF32Type());
  }
  Value constant(double v) {
    return b.create<ConstantOp>(
        loc, scalarType(),
        DenseElementsAttr::get(scalarType(), b.getF32FloatAttr(float(v))));
  }
  template <typename OpTy> Value binary(Value x, Value y) {
    auto tx = cast<RankedTensorType>(x.getType());
    auto ty = cast<RankedTensorType>(y.getType());
    Type type = tx.getRank() >= ty.getRank() ? tx : ty;
    return b.create<OpTy>(loc, type, x, y);
  }
  Value add(Value x, Value y) { return binary<AddOp>(x, y); }
  Value sub(Value x, Value y) { return binary<SubOp>(x, y); }
  Value mul(Value x, Value y) { return binary<MulOp>(x, y); }
  Value div(Value x, Value y) { return binary<DivOp>(x, y); }
  Value sqrt(Value x) { return b.create<SqrtOp>(loc, x.getType(), x); }
  Value exp(Value x) { return b.create<ExpOp>(loc, x.getType(), x); }
  Value sumAll(Value x) { return b.create<ReduceSumOp>(loc, scalarType(), x); }
};

struct GPTOptimizerPass : impl::GPTOptimizerBase<GPTOptimizerPass> {
  using GPTOptimizerBase::GPTOptimizerBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (module.lookupSymbol(kUpdateName))
      return; // already there: the pass is idempotent
    func::FuncOp gradFn;
    for (auto func : module.getOps<func::FuncOp>())
      for (unsigned i = 0; i < func.getNumResults(); ++i)
        if (func.getResultAttr(i, kGradAttr))
          gradFn = func;
    if (!gradFn) {
      module.emitError("gpt-optimizer: no gradient function (a function "
                       "with gpt.grad results); run gpt-autodiff first");
      return signalPassFailure();
    }
    if (beta1 < 0 || beta1 >= 1 || beta2 < 0 || beta2 >= 1 || eps <= 0 ||
        weightDecay < 0 || clip < 0) {
      module.emitError("gpt-optimizer: need 0 <= beta < 1, eps > 0, "
                       "weight-decay >= 0 and clip >= 0");
      return signalPassFailure();
    }
    // Each parameter's update carries the parameter's location, so that a
    // kernel of the update points at the model source like the others.
    llvm::StringMap<Location> declared;
    for (BlockArgument arg : gradFn.getArguments())
      if (auto name = gradFn.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                          kParamAttr))
        declared.try_emplace(name.getValue(), arg.getLoc());
    std::vector<Param> params;
    for (unsigned i = 0; i < gradFn.getNumResults(); ++i)
      if (auto name = gradFn.getResultAttrOfType<StringAttr>(i, kGradAttr)) {
        auto it = declared.find(name.getValue());
        params.push_back({name.str(),
                          cast<RankedTensorType>(gradFn.getResultTypes()[i]),
                          it != declared.end() ? it->second : gradFn.getLoc()});
      }
    buildUpdate(module, gradFn.getLoc(), params);
  }

  void buildUpdate(ModuleOp module, Location loc,
                   const std::vector<Param> &params) {
    OpBuilder b(module.getContext());
    b.setInsertionPointToEnd(module.getBody());
    size_t n = params.size();
    auto scalar = RankedTensorType::get({}, b.getF32Type());

    // Arguments: params, gradient sums, m, v, then lr, step, grad_scale.
    SmallVector<Type> argTypes;
    SmallVector<DictionaryAttr> argAttrs;
    auto tag = [&](StringRef attr, StringRef value) {
      return b.getDictionaryAttr(
          b.getNamedAttr(attr, b.getStringAttr(value)));
    };
    for (StringRef role : {kParamAttr, kGradAttr, kAdamMAttr, kAdamVAttr})
      for (const Param &p : params) {
        argTypes.push_back(p.type);
        argAttrs.push_back(tag(role, p.name));
      }
    for (StringRef hyper : {"lr", "step", "grad_scale"}) {
      argTypes.push_back(scalar);
      argAttrs.push_back(tag(kHyperAttr, hyper));
    }
    auto func = b.create<func::FuncOp>(loc, kUpdateName,
                                       b.getFunctionType(argTypes, {}));
    func.setAllArgAttrs(argAttrs);
    b.setInsertionPointToStart(func.addEntryBlock());
    auto arg = [&](size_t group, size_t i) {
      return func.getArgument(group * n + i);
    };
    for (size_t group = 0; group < 4; ++group)
      for (size_t i = 0; i < n; ++i)
        arg(group, i).setLoc(params[i].loc);
    // Per parameter: "AdamW" at the parameter's declaration.
    auto at = [&](size_t i) {
      return UpdateBuilder{
          b, NameLoc::get(b.getStringAttr("AdamW"), params[i].loc)};
    };
    Value lr = func.getArgument(4 * n), step = func.getArgument(4 * n + 1);
    Value gradScale = func.getArgument(4 * n + 2);
    UpdateBuilder u{b, loc};

    // Mean gradient over the micro-batches, its global norm, clipping.
    SmallVector<Value> g;
    Value sumSq;
    for (size_t i = 0; i < n; ++i) {
      UpdateBuilder ui = at(i);
      g.push_back(ui.mul(arg(1, i), gradScale));
      Value sq = ui.sumAll(ui.mul(g[i], g[i]));
      sumSq = sumSq ? ui.add(sumSq, sq) : sq;
    }
    Value norm = u.sqrt(sumSq);
    if (clip > 0) {
      Value coef = u.div(u.constant(clip), u.add(norm, u.constant(1e-6)));
      coef = b.create<MinOp>(loc, scalar, coef, u.constant(1.0));
      for (size_t i = 0; i < n; ++i)
        g[i] = at(i).mul(g[i], coef);
    }

    // Bias corrections 1 - beta^t, with t a run-time value.
    Value bc1 = u.sub(u.constant(1.0),
                      u.exp(u.mul(step, u.constant(std::log(beta1)))));
    Value bc2 = u.sub(u.constant(1.0),
                      u.exp(u.mul(step, u.constant(std::log(beta2)))));
    Value stepSize = u.div(lr, bc1);
    Value bc2Sqrt = u.sqrt(bc2);

    SmallVector<Value> newP, newM, newV;
    for (size_t i = 0; i < n; ++i) {
      UpdateBuilder u = at(i);
      Value p = arg(0, i), m = arg(2, i), v = arg(3, i);
      // p · (1 − lr·wd) for every parameter, wd = 0 off the matrices: the
      // same scalar code for all, so gpt-fuse-elementwise makes one
      // multi-tensor kernel with wd as a per-tensor constant. wd is a splat
      // of p's shape to keep the decay inside p's elementwise chain (a
      // rank-0 decay would be a separate value per wd). 1 − lr·0 is exactly
      // 1, so biases and gains are updated exactly as without the factor.
      if (weightDecay > 0) {
        double wd = params[i].type.getRank() == 2 ? double(weightDecay) : 0.0;
        auto type = RankedTensorType::get(params[i].type.getShape(),
                                          b.getF32Type());
        Value wdSplat = b.create<ConstantOp>(
            u.loc, type, DenseElementsAttr::get(type, b.getF32FloatAttr(wd)));
        p = u.mul(p, u.sub(u.constant(1.0), u.mul(lr, wdSplat)));
      }
      Value m1 = u.add(u.mul(m, u.constant(beta1)),
                       u.mul(g[i], u.constant(1.0 - beta1)));
      Value v1 = u.add(u.mul(v, u.constant(beta2)),
                       u.mul(u.mul(g[i], g[i]), u.constant(1.0 - beta2)));
      Value denom = u.add(u.div(u.sqrt(v1), bc2Sqrt), u.constant(eps));
      newP.push_back(u.sub(p, u.mul(u.div(m1, denom), stepSize)));
      newM.push_back(m1);
      newV.push_back(v1);
    }

    SmallVector<Value> results;
    SmallVector<DictionaryAttr> resultAttrs;
    for (auto [role, values] : {std::pair{kParamAttr, &newP},
                                std::pair{kAdamMAttr, &newM},
                                std::pair{kAdamVAttr, &newV}})
      for (size_t i = 0; i < n; ++i) {
        results.push_back((*values)[i]);
        resultAttrs.push_back(tag(role, params[i].name));
      }
    results.push_back(norm);
    resultAttrs.push_back(tag(kOutputAttr, "grad_norm"));
    b.create<func::ReturnOp>(loc, results);
    SmallVector<Type> resultTypes;
    for (Value r : results)
      resultTypes.push_back(r.getType());
    func.setFunctionType(b.getFunctionType(argTypes, resultTypes));
    func.setAllResultAttrs(resultAttrs);
  }
};
} // namespace
} // namespace gptc
