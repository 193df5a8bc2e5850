//===- Executor.cpp - the CPU reference interpreter -----------------------===//

#include "gptc/Executor/Executor.h"

#include "gptc/Dialect/GPT/GPTOps.h"
#include "gptc/Executor/FusedKernels.h"
#include "gptc/Executor/FusedLayerNorm.h"
#include "gptc/Executor/Kernels.h"
#include "gptc/Executor/Precision.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <chrono>
#include <cstdlib>
#include <climits>
#include <malloc.h>

using namespace mlir;

namespace gptc::exec {

namespace {

std::vector<int64_t> shapeOf(Value v) {
  auto shape = cast<RankedTensorType>(v.getType()).getShape();
  return {shape.begin(), shape.end()};
}

HostTensor constantTensor(gpt::ConstantOp op) {
  auto attr = cast<DenseElementsAttr>(op.getValue());
  std::vector<int64_t> shape = shapeOf(op.getResult());
  if (attr.getElementType().isInteger(32)) {
    HostTensor t = HostTensor::ids(shape);
    auto values = attr.getValues<APInt>();
    std::transform(values.begin(), values.end(), t.i32.begin(),
                   [](const APInt &v) { return int32_t(v.getSExtValue()); });
    return t;
  }
  HostTensor t = HostTensor::floats(shape);
  auto values = attr.getValues<APFloat>();
  std::transform(values.begin(), values.end(), t.f32.begin(),
                 [](const APFloat &v) { return float(v.convertToDouble()); });
  return t;
}

/// gpt-pad-dims' attributes of cross_entropy and its gradient.
template <typename OpTy> int64_t numClasses(OpTy op) {
  std::optional<uint64_t> n = op.getNumClasses();
  return n ? int64_t(*n) : -1;
}
template <typename OpTy> std::optional<int32_t> ignoreIndex(OpTy op) {
  if (IntegerAttr attr = op.getIgnoreIndexAttr())
    return int32_t(attr.getInt());
  return std::nullopt;
}

/// Evaluates one op; `in` holds its operands' values in order.
std::vector<HostTensor> evaluate(Operation *op,
                                 const std::vector<const HostTensor *> &in) {
  auto one = [](HostTensor t) { return std::vector<HostTensor>{std::move(t)}; };
  using R = std::vector<HostTensor>;
  return llvm::TypeSwitch<Operation *, R>(op)
      .Case([&](gpt::ConstantOp c) { return one(constantTensor(c)); })
      .Case([&](gpt::IotaOp c) { return one(iota(shapeOf(c.getResult())[0])); })
      // The rounding to the result's type happens on write (runFunction).
      .Case([&](gpt::CastOp) { return one(*in[0]); })
      .Case([&](gpt::EmbeddingOp) { return one(embedding(*in[0], *in[1])); })
      .Case([&](gpt::FusedElementwiseOp f) { return fusedElementwise(f, in); })
      .Case([&](gpt::FusedLayerNormGradOp f) {
        std::vector<const HostTensor *> inputs(in.begin() + 3, in.end());
        std::vector<std::vector<int64_t>> shapes;
        for (Value v : f.getValues())
          shapes.push_back(shapeOf(v));
        return fusedLayernormGrad(compileBody(f.getBody().front()), *in[0],
                                  *in[1], *in[2], inputs, shapes,
                                  f.getEpsilon().convertToFloat());
      })
      .Case([&](gpt::FusedLayerNormOp f) {
        std::vector<const HostTensor *> inputs(in.begin(), in.end() - 2);
        return fusedLayernorm(compileBody(f.getBody().front()), inputs,
                              *in[in.size() - 2], *in.back(),
                              shapeOf(f.getResult()),
                              f.getEpsilon().convertToFloat());
      })
      .Case([&](gpt::MultiTensorElementwiseOp f) {
        return multiTensorElementwise(f, in);
      })
      .Case([&](gpt::MultiTensorReduceOp r) {
        return one(multiTensorReduce(r, in));
      })
      .Case([&](gpt::MatmulOp m) {
        return one(matmul(*in[0], *in[1], m.getTransposeA(),
                          m.getTransposeB()));
      })
      .Case([&](gpt::MatmulEpilogueOp m) {
        return matmulEpilogue(*in[0], *in[1], *in[2], m.getTransposeA(),
                              m.getTransposeB(), m.getGelu(),
                              bool(m.getPre()));
      })
      .Case([&](gpt::MatmulGeluGradOp m) {
        return matmulGeluGrad(*in[0], *in[1], *in[2], m.getTransposeA(),
                              m.getTransposeB(), bool(m.getBiasGrad()));
      })
      .Case([&](gpt::MatmulBiasGradOp m) {
        return matmulBiasGrad(*in[0], *in[1], m.getTransposeA());
      })
      .Case([&](gpt::LayerNormOp l) {
        return one(layernorm(*in[0], *in[1], *in[2],
                             l.getEpsilon().convertToFloat()));
      })
      .Case([&](gpt::SoftmaxOp) { return one(softmax(*in[0])); })
      .Case([&](gpt::CausalMaskOp c) {
        return one(causalMask(*in[0], c.getFill().convertToFloat()));
      })
      .Case([&](gpt::GeluOp g) {
        return one(gelu(*in[0], g.getApproximate() == "tanh"));
      })
      .Case([&](gpt::FlashAttentionOp a) {
        return flashAttention(*in[0], *in[1], *in[2],
                              a.getScale().convertToFloat(), a.getCausal());
      })
      .Case([&](gpt::FlashAttentionQKVOp a) {
        return flashAttentionQKV(*in[0], a.getNumHeads(),
                                 a.getScale().convertToFloat(), a.getCausal());
      })
      .Case([&](gpt::ReshapeOp r) {
        return one(reshape(*in[0], shapeOf(r.getResult())));
      })
      .Case([&](gpt::TransposeOp t) {
        ArrayRef<int64_t> perm = t.getPermutation();
        return one(transpose(*in[0], {perm.begin(), perm.end()}));
      })
      .Case([&](gpt::SplitOp s) {
        std::vector<int64_t> sizes;
        for (Value r : s.getResults())
          sizes.push_back(shapeOf(r)[s.getAxis()]);
        return split(*in[0], s.getAxis(), sizes);
      })
      .Case([&](gpt::CrossEntropyOp c) {
        return one(crossEntropy(*in[0], *in[1], numClasses(c),
                                ignoreIndex(c)));
      })
      .Case([&](gpt::PadOp p) {
        return one(pad(*in[0], shapeOf(p.getResult()), p.getValue()));
      })
      .Case([&](gpt::SliceOp s) {
        return one(slice(*in[0], shapeOf(s.getResult())));
      })
      .Case([&](gpt::AddOp o) {
        return one(binary(BinaryKind::Add, *in[0], *in[1], shapeOf(o)));
      })
      .Case([&](gpt::SubOp o) {
        return one(binary(BinaryKind::Sub, *in[0], *in[1], shapeOf(o)));
      })
      .Case([&](gpt::MulOp o) {
        return one(binary(BinaryKind::Mul, *in[0], *in[1], shapeOf(o)));
      })
      .Case([&](gpt::DivOp o) {
        return one(binary(BinaryKind::Div, *in[0], *in[1], shapeOf(o)));
      })
      .Case([&](gpt::MaxOp o) {
        return one(binary(BinaryKind::Max, *in[0], *in[1], shapeOf(o)));
      })
      .Case([&](gpt::MinOp o) {
        return one(binary(BinaryKind::Min, *in[0], *in[1], shapeOf(o)));
      })
      .Case([&](gpt::ReduceSumOp o) {
        if (std::optional<ArrayRef<int64_t>> corner = o.getCorner())
          return one(reduceSum(
              slice(*in[0], std::vector<int64_t>(corner->begin(),
                                                 corner->end())),
              shapeOf(o)));
        return one(reduceSum(*in[0], shapeOf(o)));
      })
      .Case([&](gpt::ConcatOp c) { return one(concat(in, c.getAxis())); })
      .Case([&](gpt::AttentionBiasGradOp) {
        return one(attentionBiasGrad(*in[0], *in[1]));
      })
      .Case([&](gpt::EmbeddingGradOp o) {
        return one(embeddingGrad(*in[0], *in[1], shapeOf(o),
                                 in.size() > 2 ? in[2] : nullptr));
      })
      .Case([&](gpt::LayerNormGradOp l) {
        return layernormGrad(*in[0], *in[1], *in[2],
                             l.getEpsilon().convertToFloat());
      })
      .Case(
          [&](gpt::SoftmaxGradOp) { return one(softmaxGrad(*in[0], *in[1])); })
      .Case([&](gpt::GeluGradOp g) {
        return one(geluGrad(*in[0], *in[1], g.getApproximate() == "tanh"));
      })
      .Case([&](gpt::CrossEntropyGradOp c) {
        return one(crossEntropyGrad(*in[0], *in[1], *in[2], numClasses(c),
                                    ignoreIndex(c)));
      })
      // One pass over the logits on a GPU; two kernels here, same values.
      .Case([&](gpt::CrossEntropyWithGradOp c) {
        return R{crossEntropy(*in[0], *in[1], numClasses(c), ignoreIndex(c)),
                 crossEntropyGrad(*in[0], *in[1], *in[2], numClasses(c),
                                  ignoreIndex(c))};
      })
      .Case([&](gpt::FlashAttentionGradOp a) {
        return flashAttentionGrad(*in[0], *in[1], *in[2], *in[3], *in[4],
                                  *in[5], a.getScale().convertToFloat(),
                                  a.getCausal(), {},
                                  in.size() > 6 ? in[6] : nullptr);
      })
      .Case([&](gpt::FlashAttentionQKVGradOp a) {
        return flashAttentionQKVGrad(*in[0], *in[1], *in[2], *in[3],
                                     a.getNumHeads(),
                                     a.getScale().convertToFloat(),
                                     a.getCausal(), {},
                                     in.size() > 4 ? in[4] : nullptr);
      })
      .Case([&](gpt::AttentionRowDotOp a) {
        return one(attentionRowDot(*in[0], *in[1], a.getNumHeads().value_or(0)));
      })
      .Case([&](gpt::NegOp) { return one(unary(UnaryKind::Neg, *in[0])); })
      .Case([&](gpt::ExpOp) { return one(unary(UnaryKind::Exp, *in[0])); })
      .Case([&](gpt::LogOp) { return one(unary(UnaryKind::Log, *in[0])); })
      .Case([&](gpt::TanhOp) { return one(unary(UnaryKind::Tanh, *in[0])); })
      .Case([&](gpt::SqrtOp) { return one(unary(UnaryKind::Sqrt, *in[0])); })
      .Case([&](gpt::RsqrtOp) { return one(unary(UnaryKind::Rsqrt, *in[0])); })
      .Default([](Operation *op) -> R {
        throw KernelError("the CPU executor cannot run '" +
                          op->getName().getStringRef().str() + "'");
      });
}

bool matchesType(const HostTensor &t, Type type) {
  auto tensor = cast<RankedTensorType>(type);
  bool isId = tensor.getElementType().isInteger(32);
  if (isId != (t.kind == ElementKind::I32))
    return false;
  return llvm::equal(t.shape, tensor.getShape());
}

/// Every op allocates its results and frees its dead operands, the same
/// sizes step after step. glibc would mmap each large buffer and unmap it on
/// free, so every op faulted its pages in afresh (a third of a gpt2-tiny
/// step); kept on the heap, freed buffers are reused as they are.
void keepFreedMemory() {
  static const bool once = [] {
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
    return true;
  }();
  (void)once;
}

} // namespace

FailureOr<std::vector<HostTensor>>
runFunction(func::FuncOp func, const std::vector<HostTensor> &args) {
  keepFreedMemory();
  if (args.size() != func.getNumArguments())
    return func.emitError() << "expected " << func.getNumArguments()
                            << " arguments, got " << args.size();
  DenseMap<Value, HostTensor> values;
  for (auto [i, arg] : llvm::enumerate(func.getArguments())) {
    if (!matchesType(args[i], arg.getType()))
      return func.emitError() << "argument #" << i << " has shape "
                              << shapeString(args[i].shape)
                              << ", expected " << arg.getType();
    values[arg] = args[i];
    roundTo(values[arg], storageOf(arg.getType()));
  }

  // Free each value after its last use: a gpt2 step keeps only what it must.
  DenseMap<Value, Operation *> lastUse;
  for (Operation &op : func.getBody().front())
    for (Value v : op.getOperands())
      lastUse[v] = &op;

  // GPTC_EXECUTOR_PROFILE=1 prints the time spent in each kind of op.
  static const bool profile = std::getenv("GPTC_EXECUTOR_PROFILE");
  llvm::StringMap<double> seconds;
  for (Operation &op : func.getBody().front()) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      std::vector<HostTensor> results;
      for (Value v : ret.getOperands())
        results.push_back(values.lookup(v));
      if (profile)
        for (const auto &entry : seconds)
          llvm::errs() << "executor profile: " << func.getSymName() << " "
                       << entry.getKey() << " " << entry.getValue() << " s\n";
      return results;
    }
    auto start = std::chrono::steady_clock::now();
    std::vector<const HostTensor *> in;
    for (Value v : op.getOperands())
      in.push_back(&values.find(v)->second);
    std::vector<HostTensor> out;
    try {
      out = evaluate(&op, in);
    } catch (const KernelError &e) {
      return op.emitError() << e.what();
    }
    for (auto [result, tensor] : llvm::zip(op.getResults(), out)) {
      roundTo(tensor, storageOf(result.getType()));
      values[result] = std::move(tensor);
    }
    for (Value v : op.getOperands())
      if (lastUse.lookup(v) == &op && !llvm::is_contained(op.getResults(), v))
        values.erase(v);
    if (profile)
      seconds[op.getName().getStringRef()] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                        start)
              .count();
  }
  return func.emitError("function has no return");
}

StorageKind storageOf(Type type) {
  Type elem = cast<RankedTensorType>(type).getElementType();
  if (elem.isBF16())
    return StorageKind::BF16;
  if (elem.isF16())
    return StorageKind::F16;
  return StorageKind::F32;
}

} // namespace gptc::exec
