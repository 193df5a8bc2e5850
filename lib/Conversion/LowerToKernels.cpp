//===- LowerToKernels.cpp - the fused step as a kernel-level Program ------===//
//
// One pass over each function: arguments and results become bound buffers
// (shared across functions by role and binding), each op one launch (or a
// view, or a constant), then results that no launch wrote are copied, the
// grad_norm launches move to the front, and in-place writes are checked.
// The rules are in gptc/Conversion/LowerToKernels.h.
//
//===----------------------------------------------------------------------===//

#include "gptc/Conversion/LowerToKernels.h"

#include "gptc/Dialect/GPT/GPTOps.h"
#include "gptc/Executor/FusedKernels.h"
#include "gptc/Executor/Precision.h"
#include "gptc/Train/Init.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <set>

using namespace mlir;

namespace gptc {

namespace {

/// The ops of the fused stage that are launches (gpt.reshape is a view,
/// gpt.constant data).
const char *const kKernels[] = {
    "attention_bias_grad",
    "attention_row_dot",
    "cast",
    "concat",
    "cross_entropy",
    "cross_entropy_with_grad",
    "embedding",
    "embedding_grad",
    "flash_attention",
    "flash_attention_grad",
    "flash_attention_qkv",
    "flash_attention_qkv_grad",
    "fused_elementwise",
    "fused_layernorm",
    "fused_layernorm_grad",
    "iota",
    "layernorm",
    "layernorm_grad",
    "matmul",
    "matmul_epilogue",
    "matmul_gelu_grad",
    "matmul_bias_grad",
    "multi_tensor_elementwise",
    "multi_tensor_reduce",
    "pad",
    "reduce_sum",
    "slice",
    "split",
    "transpose",
};

/// "file:line:col" of the first file location inside `loc`, or "".
std::string locString(Location loc) {
  if (auto file = dyn_cast<FileLineColLoc>(loc))
    return file.getFilename().str() + ":" + std::to_string(file.getLine()) +
           ":" + std::to_string(file.getColumn());
  if (auto name = dyn_cast<NameLoc>(loc))
    return locString(name.getChildLoc());
  if (auto call = dyn_cast<CallSiteLoc>(loc)) {
    std::string s = locString(call.getCallee());
    return s.empty() ? locString(call.getCaller()) : s;
  }
  if (auto fused = dyn_cast<FusedLoc>(loc))
    for (Location l : fused.getLocations())
      if (std::string s = locString(l); !s.empty())
        return s;
  if (auto opaque = dyn_cast<OpaqueLoc>(loc))
    return locString(opaque.getFallbackLocation());
  return "";
}

std::string number(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

/// The binding attributes, in the order they are looked for.
const std::pair<llvm::StringLiteral, rt::Role> kBindings[] = {
    {gpt::kParamAttr, rt::Role::Param},   {gpt::kGradAttr, rt::Role::Grad},
    {gpt::kAdamMAttr, rt::Role::AdamM},   {gpt::kAdamVAttr, rt::Role::AdamV},
    {gpt::kInputAttr, rt::Role::Input},   {gpt::kHyperAttr, rt::Role::Hyper},
    {gpt::kOutputAttr, rt::Role::Output},
    {gpt::kParamCopyAttr, rt::Role::ParamCopy}};

std::optional<std::pair<rt::Role, std::string>> bindingOf(DictionaryAttr d) {
  if (!d)
    return std::nullopt;
  for (const auto &[name, role] : kBindings)
    if (auto s = d.getAs<StringAttr>(name))
      return std::make_pair(role, s.str());
  return std::nullopt;
}

std::string describeBinding(rt::Role role, const std::string &binding) {
  return std::string(rt::roleName(role)) + " '" + binding + "'";
}

/// What the checks need to know about a launch beyond the Launch.
struct LaunchInfo {
  Operation *op = nullptr; ///< null for a copy of a result
  /// Per input: it is the function's argument (or a view of it), i.e. the
  /// value the buffer held before this function wrote anything.
  std::vector<bool> readsArgument;
};

} // namespace

bool isPrefixSlice(gpt::SliceOp slice) {
  auto in = cast<RankedTensorType>(slice.getX().getType());
  auto out = cast<RankedTensorType>(slice.getType());
  if (in.getElementType() != out.getElementType() ||
      in.getRank() != out.getRank())
    return false;
  ArrayRef<int64_t> a = in.getShape(), b = out.getShape();
  size_t first = 0; // the first dimension the slice shortens
  while (first < a.size() && a[first] == b[first])
    ++first;
  if (first == a.size())
    return true; // the whole tensor
  for (size_t d = 0; d < a.size(); ++d)
    if ((d < first && b[d] != 1) || (d > first && a[d] != b[d]))
      return false;
  return true;
}

namespace {

/// The value `v` is a view of (a reshape's or a prefix slice's operand), or
/// null. `views` holds the slices lowered as views.
Value viewSource(Value v, const llvm::DenseSet<Value> &views) {
  if (auto reshape = v.getDefiningOp<gpt::ReshapeOp>())
    return reshape.getX();
  if (auto slice = v.getDefiningOp<gpt::SliceOp>(); slice && views.count(v))
    return slice.getX();
  return nullptr;
}

/// The value whose storage `v` is (through views) is a block argument.
bool isArgumentStorage(Value v, const llvm::DenseSet<Value> &views) {
  while (Value source = viewSource(v, views))
    v = source;
  return isa<BlockArgument>(v);
}

class Lowering {
public:
  rt::Program program;

  LogicalResult lowerFunction(func::FuncOp func, const char *name);

private:
  /// dtype and shape of a value's type; an error through `emit` otherwise.
  LogicalResult describe(Type type, rt::Buffer &b,
                         llvm::function_ref<InFlightDiagnostic()> emit);
  int add(rt::Buffer b) {
    program.buffers.push_back(std::move(b));
    return int(program.buffers.size() - 1);
  }
  int rootOf(int id) const {
    while (program.buffers[id].viewOf >= 0)
      id = program.buffers[id].viewOf;
    return id;
  }
  FailureOr<int> boundBuffer(rt::Role role, const std::string &binding,
                             Type type,
                             llvm::function_ref<InFlightDiagnostic()> emit);
  LogicalResult attributes(Operation *op, rt::Launch &l);
  LogicalResult orderNorm(func::FuncOp func, rt::Function &out,
                          std::vector<LaunchInfo> &info, int gradNorm);
  LogicalResult checkInPlace(func::FuncOp func, const rt::Function &out,
                             const std::vector<LaunchInfo> &info);
  void writeLossGradientsInPlace(const rt::Function &out);

public:
  /// grads_accumulate: grads with its gradients added to the Grad buffers,
  /// those a GEMM or the embedding gradient writes by that launch itself if
  /// accumulateInPlace.
  void addAccumulatingGrads(const rt::Function &grads, bool accumulateInPlace);
  /// grads' tied table gradient in place: see the definition.
  void writeTableGradientInPlace(rt::Function &grads);

private:
  std::set<int> summedInPlace(const rt::Function &grads) const;
  void eraseBuffers(const std::set<int> &dead);
  std::map<std::pair<rt::Role, std::string>, int> bound;
};

LogicalResult
Lowering::describe(Type type, rt::Buffer &b,
                   llvm::function_ref<InFlightDiagnostic()> emit) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return emit() << "a value of type " << type
                  << " has no buffer (static tensors only)";
  Type elem = tensor.getElementType();
  if (elem.isF32())
    b.dtype = rt::DType::F32;
  else if (elem.isBF16())
    b.dtype = rt::DType::BF16;
  else if (elem.isF16())
    b.dtype = rt::DType::F16;
  else if (elem.isInteger(32))
    b.dtype = rt::DType::I32;
  else
    return emit() << "element type " << elem
                  << " has no kernel dtype (f32, bf16, f16, i32)";
  b.shape.assign(tensor.getShape().begin(), tensor.getShape().end());
  return success();
}

FailureOr<int>
Lowering::boundBuffer(rt::Role role, const std::string &binding, Type type,
                      llvm::function_ref<InFlightDiagnostic()> emit) {
  rt::Buffer b;
  if (failed(describe(type, b, emit)))
    return failure();
  auto [it, inserted] = bound.try_emplace({role, binding}, -1);
  if (!inserted) {
    const rt::Buffer &old = program.buffers[it->second];
    // The update writes a padded copy by its leading rows: a view.
    if (role == rt::Role::ParamCopy && old.dtype == b.dtype &&
        old.shape != b.shape && exec::isLeadingRows(b.shape, old.shape)) {
      b.role = role;
      b.name = b.binding = binding;
      b.viewOf = it->second;
      return add(std::move(b));
    }
    if (old.dtype != b.dtype || old.shape != b.shape)
      return emit() << describeBinding(role, binding) << " is " << type
                    << " here but " << rt::dtypeName(old.dtype)
                    << " of another shape in another function";
    return it->second;
  }
  b.role = role;
  b.name = b.binding = binding;
  return it->second = add(std::move(b));
}

LogicalResult Lowering::attributes(Operation *op, rt::Launch &l) {
  for (NamedAttribute a : op->getAttrDictionary()) {
    std::string name = a.getName().str();
    Attribute v = a.getValue();
    // Structure of the operand list, not a property of the kernel.
    if (name == "operandSegmentSizes" || name == "resultSegmentSizes")
      continue;
    if (auto b = dyn_cast<BoolAttr>(v))
      l.ints[name] = b.getValue();
    else if (auto i = dyn_cast<IntegerAttr>(v))
      l.ints[name] = i.getValue().getSExtValue();
    else if (isa<UnitAttr>(v))
      l.ints[name] = 1;
    else if (auto f = dyn_cast<FloatAttr>(v))
      l.floats[name] = f.getValueAsDouble();
    else if (auto arr = dyn_cast<DenseI64ArrayAttr>(v))
      l.lists[name].assign(arr.asArrayRef().begin(), arr.asArrayRef().end());
    else if (auto arr = dyn_cast<DenseI32ArrayAttr>(v))
      l.lists[name].assign(arr.asArrayRef().begin(), arr.asArrayRef().end());
    else if (auto arr = dyn_cast<DenseF32ArrayAttr>(v))
      l.floatLists[name].assign(arr.asArrayRef().begin(),
                                arr.asArrayRef().end());
    else if (auto arr = dyn_cast<DenseF64ArrayAttr>(v))
      l.floatLists[name].assign(arr.asArrayRef().begin(),
                                arr.asArrayRef().end());
    else if (auto arr = dyn_cast<ArrayAttr>(v)) {
      std::vector<int64_t> list;
      for (Attribute e : arr) {
        auto i = dyn_cast<IntegerAttr>(e);
        if (!i)
          return op->emitError() << "attribute '" << name << "' of '"
                                 << op->getName()
                                 << "' is an array of non-integers, which "
                                    "a launch cannot carry";
        list.push_back(i.getValue().getSExtValue());
      }
      l.lists[name] = std::move(list);
    } else
      return op->emitError() << "attribute '" << name << "' of '"
                             << op->getName() << "' (" << v
                             << ") has no launch form (integers, floats "
                                "and their arrays only)";
  }
  // Defaulted attributes are absent from the IR when they have their
  // default; the kernels should not need to know the defaults.
  if (auto ln = dyn_cast<gpt::LayerNormOp>(op))
    l.floats["epsilon"] = ln.getEpsilon().convertToDouble();
  if (auto ln = dyn_cast<gpt::LayerNormGradOp>(op))
    l.floats["epsilon"] = ln.getEpsilon().convertToDouble();
  if (auto ln = dyn_cast<gpt::FusedLayerNormOp>(op))
    l.floats["epsilon"] = ln.getEpsilon().convertToDouble();
  if (auto ln = dyn_cast<gpt::FusedLayerNormGradOp>(op))
    l.floats["epsilon"] = ln.getEpsilon().convertToDouble();
  if (auto pad = dyn_cast<gpt::PadOp>(op))
    l.ints["value"] = pad.getValue();
  return success();
}

LogicalResult Lowering::lowerFunction(func::FuncOp func, const char *name) {
  rt::Function out;
  out.name = name;
  AsmState asmState(func);
  auto ssaName = [&](Value v) {
    std::string s;
    llvm::raw_string_ostream os(s);
    v.printAsOperand(os, asmState);
    return os.str();
  };
  DenseMap<Value, int> buf;
  llvm::DenseSet<Value> views; // the slices lowered as views
  if (!func.getBody().hasOneBlock())
    return func.emitError() << "@" << func.getSymName()
                            << " has more than one block; a step function "
                               "is straight-line code";
  Block &body = func.front();

  for (BlockArgument arg : body.getArguments()) {
    unsigned i = arg.getArgNumber();
    auto emit = [&] { return func.emitError(); };
    auto binding = bindingOf(func.getArgAttrDict(i));
    if (!binding)
      return func.emitError() << "argument #" << i << " of @"
                              << func.getSymName()
                              << " has no binding (gpt.param, gpt.grad, "
                                 "gpt.adam_m, gpt.adam_v, gpt.input, "
                                 "gpt.hyper or gpt.param_copy)";
    FailureOr<int> id =
        boundBuffer(binding->first, binding->second, arg.getType(), emit);
    if (failed(id))
      return failure();
    buf[arg] = *id;
    out.arguments.push_back(*id);
  }

  // Results: a value its function computes is written into its bound
  // buffer directly; anything else is copied there at the end.
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  struct Copy {
    Value value;
    int target;
    unsigned index;
  };
  std::vector<Copy> copies;
  int gradNorm = -1;
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    auto emit = [&] { return ret.emitError(); };
    auto binding = bindingOf(func.getResultAttrDict(i));
    if (!binding)
      return ret.emitError() << "result #" << i << " of @"
                             << func.getSymName()
                             << " has no binding (gpt.param, gpt.grad, "
                                "gpt.adam_m, gpt.adam_v, gpt.output or "
                                "gpt.param_copy)";
    Value v = ret.getOperand(i);
    FailureOr<int> id =
        boundBuffer(binding->first, binding->second, v.getType(), emit);
    if (failed(id))
      return failure();
    out.results.push_back(*id);
    if (binding->first == rt::Role::Output && binding->second == "grad_norm")
      gradNorm = *id;
    auto known = buf.find(v);
    if (known != buf.end() && known->second == *id)
      continue; // an argument returned as itself: nothing to write
    Operation *def = v.getDefiningOp();
    if (def && !isa<gpt::ReshapeOp, gpt::ConstantOp>(def) &&
        known == buf.end())
      buf[v] = *id;
    else
      copies.push_back({v, *id, i});
  }

  std::vector<LaunchInfo> info; // beside out.launches
  for (Operation &op : body.without_terminator()) {
    StringRef full = op.getName().getStringRef();
    // Views share their operand's storage from its first byte. A slice
    // whose result is bound (a function result) is copied by its launch.
    auto slice = dyn_cast<gpt::SliceOp>(op);
    if (slice && (!isPrefixSlice(slice) || buf.count(slice.getResult())))
      slice = nullptr;
    if (isa<gpt::ReshapeOp>(op) || slice) {
      Value result = op.getResult(0), source = op.getOperand(0);
      rt::Buffer b;
      if (failed(describe(result.getType(), b,
                          [&] { return op.emitError(); })))
        return failure();
      b.name = ssaName(result);
      b.viewOf = rootOf(buf.lookup(source));
      buf[result] = add(std::move(b));
      if (slice)
        views.insert(result);
      continue;
    }
    if (auto constant = dyn_cast<gpt::ConstantOp>(op)) {
      rt::Buffer b;
      if (failed(describe(constant.getType(), b,
                          [&] { return op.emitError(); })))
        return failure();
      auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
      if (!dense)
        return op.emitError("a constant that is not dense elements has no "
                            "buffer form");
      int64_t size = rt::dtypeBytes(b.dtype);
      auto append = [&](uint64_t bits) {
        for (int64_t k = 0; k < size; ++k)
          b.init.push_back(uint8_t(bits >> (8 * k)));
      };
      if (b.dtype == rt::DType::I32)
        for (const APInt &v : dense.getValues<APInt>())
          append(v.getZExtValue());
      else
        for (const APFloat &v : dense.getValues<APFloat>())
          append(v.bitcastToAPInt().getZExtValue());
      b.role = rt::Role::Constant;
      b.name = ssaName(constant.getResult());
      buf[constant.getResult()] = add(std::move(b));
      continue;
    }
    if (!full.starts_with("gpt.") ||
        !llvm::is_contained(kKernels, full.drop_front(4)))
      return op.emitError() << "'" << full
                            << "' has no kernel; lower the step from "
                               "--stage=fused";
    rt::Launch l;
    l.kernel = full.drop_front(4).str();
    l.loc = locString(op.getLoc());
    for (Value v : op.getOperands()) {
      auto it = buf.find(v);
      if (it == buf.end())
        return op.emitError("an operand is not a value of this function");
      l.inputs.push_back(it->second);
    }
    for (Value v : op.getResults()) {
      if (auto it = buf.find(v); it != buf.end()) {
        l.outputs.push_back(it->second);
        continue;
      }
      rt::Buffer b;
      if (failed(describe(v.getType(), b, [&] { return op.emitError(); })))
        return failure();
      b.name = ssaName(v);
      int id = add(std::move(b));
      buf[v] = id;
      l.outputs.push_back(id);
    }
    if (failed(attributes(&op, l)))
      return failure();
    if (isa<gpt::FusedElementwiseOp, gpt::MultiTensorElementwiseOp,
            gpt::MultiTensorReduceOp, gpt::FusedLayerNormOp,
            gpt::FusedLayerNormGradOp>(op)) {
      try {
        l.body = exec::compileBody(op.getRegion(0).front());
      } catch (const exec::KernelError &e) {
        return op.emitError() << e.what();
      }
    }
    LaunchInfo li{&op, {}};
    for (Value v : op.getOperands())
      li.readsArgument.push_back(isArgumentStorage(v, views));
    out.launches.push_back(std::move(l));
    info.push_back(std::move(li));
  }

  for (const Copy &c : copies) {
    if (program.buffers[c.target].dtype == rt::DType::I32)
      return ret.emitError() << "result #" << c.index
                             << " is an i32 value that no launch of @"
                             << func.getSymName()
                             << " writes; copying it is not supported";
    rt::Launch l;
    l.kernel = "fused_elementwise";
    l.inputs = {buf.lookup(c.value)};
    l.outputs = {c.target};
    l.body.numArgs = l.body.numRegisters = 1;
    l.body.results = {0};
    l.loc = locString(ret.getLoc());
    out.launches.push_back(std::move(l));
    info.push_back({nullptr, {isArgumentStorage(c.value, views)}});
  }

  if (gradNorm >= 0) {
    if (failed(orderNorm(func, out, info, gradNorm)))
      return failure();
  } else if (out.name == "update") {
    out.normLaunches = 0; // no norm to compute before writing in place
  }
  if (failed(checkInPlace(func, out, info)))
    return failure();
  writeLossGradientsInPlace(out);
  program.functions.push_back(std::move(out));
  return success();
}

/// Moves the launches that grad_norm depends on to the front, in their
/// order; the rest keep theirs. Safe: the moved launches write only temps
/// of their own (SSA) and grad_norm, which nothing before them reads.
LogicalResult Lowering::orderNorm(func::FuncOp func, rt::Function &out,
                                  std::vector<LaunchInfo> &info,
                                  int gradNorm) {
  size_t n = out.launches.size();
  std::vector<bool> needed(n, false);
  auto lastWriterBefore = [&](int root, size_t end) -> int {
    for (size_t k = end; k-- > 0;)
      for (int o : out.launches[k].outputs)
        if (rootOf(o) == root)
          return int(k);
    return -1;
  };
  if (int w = lastWriterBefore(rootOf(gradNorm), n); w >= 0)
    needed[w] = true;
  for (size_t j = n; j-- > 0;) {
    if (!needed[j])
      continue;
    for (int in : out.launches[j].inputs)
      if (int w = lastWriterBefore(rootOf(in), j); w >= 0)
        needed[w] = true;
  }
  std::set<int> arguments(out.arguments.begin(), out.arguments.end());
  std::vector<rt::Launch> launches;
  std::vector<LaunchInfo> order;
  for (int pass = 0; pass < 2; ++pass)
    for (size_t j = 0; j < n; ++j) {
      if (needed[j] != (pass == 0))
        continue;
      if (pass == 0)
        for (int o : out.launches[j].outputs)
          if (arguments.count(rootOf(o))) {
            const rt::Buffer &b = program.buffers[rootOf(o)];
            return (info[j].op ? info[j].op->emitError() : func.emitError())
                   << "grad_norm depends on a launch that writes "
                   << describeBinding(b.role, b.binding)
                   << " in place (the step could not be skipped)";
          }
      launches.push_back(std::move(out.launches[j]));
      order.push_back(std::move(info[j]));
    }
  out.normLaunches = int(std::count(needed.begin(), needed.end(), true));
  out.launches = std::move(launches);
  info = std::move(order);
  return success();
}

/// The loss gradient over its logits: a gpt.cross_entropy_with_grad whose
/// logits (a temporary of the same dtype and size) no later launch touches
/// writes dlogits into their bytes, dlogits becoming a view of them. The
/// logits are the step's largest temporary (B·T·V: 1.5 GiB in bf16 for
/// GPT-2 at B=16), and both would otherwise be alive at once at the peak.
/// The kernels read each row whole before writing its gradient
/// (cross_entropy.cuh; the CPU backend copies its inputs).
void Lowering::writeLossGradientsInPlace(const rt::Function &out) {
  for (size_t j = 0; j < out.launches.size(); ++j) {
    const rt::Launch &l = out.launches[j];
    if (l.kernel != "cross_entropy_with_grad" || l.inputs.empty() ||
        l.outputs.size() < 2)
      continue;
    int logits = rootOf(l.inputs[0]), dlogits = l.outputs[1];
    const rt::Buffer &from = program.buffers[logits];
    const rt::Buffer &to = program.buffers[dlogits];
    if (from.role != rt::Role::Temp || to.role != rt::Role::Temp ||
        to.viewOf >= 0 || to.dtype != program.buffers[l.inputs[0]].dtype ||
        to.bytes() > from.bytes())
      continue;
    bool touchedLater = false;
    for (size_t later = j + 1; later < out.launches.size() && !touchedLater;
         ++later) {
      const rt::Launch &m = out.launches[later];
      for (int id : m.inputs)
        touchedLater |= rootOf(id) == logits;
      for (int id : m.outputs)
        touchedLater |= rootOf(id) == logits;
    }
    // Nor may the logits be read at any other element than their own.
    for (size_t i = 1; i < l.inputs.size(); ++i)
      touchedLater |= rootOf(l.inputs[i]) == logits;
    if (!touchedLater)
      program.buffers[dlogits].viewOf = logits;
  }
}

/// A launch that writes one of its function's argument buffers writes it in
/// place: only elementwise kernels reading it at the element they write,
/// and nothing after them may read the old value.
LogicalResult Lowering::checkInPlace(func::FuncOp func,
                                     const rt::Function &out,
                                     const std::vector<LaunchInfo> &info) {
  std::set<int> arguments;
  for (int a : out.arguments)
    arguments.insert(rootOf(a));
  for (size_t j = 0; j < out.launches.size(); ++j) {
    const rt::Launch &l = out.launches[j];
    Operation *op = info[j].op;
    auto emit = [&] { return op ? op->emitError() : func.emitError(); };
    for (size_t k = 0; k < l.outputs.size(); ++k) {
      int target = rootOf(l.outputs[k]);
      if (!arguments.count(target))
        continue;
      const rt::Buffer &b = program.buffers[target];
      std::string what = describeBinding(b.role, b.binding);
      bool multi = l.kernel == "multi_tensor_elementwise";
      if (!multi && l.kernel != "fused_elementwise")
        return emit() << "'gpt." << l.kernel << "' writes " << what
                      << " in place, which only elementwise kernels may";
      auto multiOp = op ? dyn_cast<gpt::MultiTensorElementwiseOp>(op)
                        : gpt::MultiTensorElementwiseOp();
      size_t numTensors = multiOp ? size_t(multiOp.getNumTensors()) : 1;
      size_t perTensorInputs = multiOp ? multiOp.getTensors().size() : 0;
      for (size_t i = 0; i < l.inputs.size(); ++i) {
        if (rootOf(l.inputs[i]) != target)
          continue;
        bool sameElement =
            program.buffers[l.inputs[i]].shape == b.shape &&
            (!multi ||
             (i < perTensorInputs && i % numTensors == k % numTensors));
        if (!sameElement)
          return emit() << "writes " << what
                        << " in place but reads it at other elements "
                           "(operand #"
                        << i << ")";
      }
      for (size_t later = j + 1; later < out.launches.size(); ++later) {
        // Reading the new value (this launch's result) is fine; reading
        // the argument is reading bytes that are gone.
        const rt::Launch &m = out.launches[later];
        bool reads = false;
        for (size_t i = 0; i < m.inputs.size(); ++i)
          reads |= rootOf(m.inputs[i]) == target &&
                   info[later].readsArgument[i];
        bool writes = llvm::any_of(
            m.outputs, [&](int id) { return rootOf(id) == target; });
        if (reads || writes)
          return emit() << "writes " << what << " in place, but a later launch "
                        << (reads ? "reads its old value" : "writes it too")
                        << " ('gpt." << m.kernel << "'"
                        << (m.loc.empty() ? "" : " at " + m.loc) << ")";
      }
    }
  }
  return success();
}

/// The Grad results of `grads` that one launch writes whole (its first
/// result, not through a view) and no launch reads, where that launch can
/// add to the sum in place: a GEMM (the weight gradients; cuBLASLt's beta
/// = 1) or the embedding gradient (wte's, whose kernel reads the old sum
/// as the element it writes).
std::set<int> Lowering::summedInPlace(const rt::Function &grads) const {
  std::map<int, int> touches; // Grad root -> launches touching it
  std::set<int> written;
  for (const rt::Launch &l : grads.launches) {
    std::set<int> roots;
    for (int id : l.inputs)
      roots.insert(rootOf(id));
    for (int id : l.outputs)
      roots.insert(rootOf(id));
    for (int root : roots)
      ++touches[root];
    if ((l.kernel == "matmul" || l.kernel == "matmul_bias_grad" ||
         l.kernel == "embedding_grad") &&
        !l.outputs.empty() &&
        program.buffers[l.outputs[0]].role == rt::Role::Grad &&
        !llvm::is_contained(l.inputs, l.outputs[0]))
      written.insert(l.outputs[0]);
  }
  std::set<int> ids;
  for (int id : written)
    if (touches[id] == 1 && program.buffers[id].dtype == rt::DType::F32)
      ids.insert(id);
  return ids;
}

void Lowering::addAccumulatingGrads(const rt::Function &grads,
                                    bool accumulateInPlace) {
  // Every gradient must be float32 (the add runs in float32); otherwise the
  // program gets no grads_accumulate and --grad-accum is refused at run time.
  std::vector<int> allGrads;
  for (int id : grads.results) {
    const rt::Buffer &g = program.buffers[id];
    if (g.role != rt::Role::Grad)
      continue;
    if (g.dtype != rt::DType::F32 || g.viewOf >= 0)
      return;
    allGrads.push_back(id);
  }
  if (allGrads.empty())
    return;
  std::set<int> inPlace;
  if (accumulateInPlace)
    inPlace = summedInPlace(grads);
  if (inPlace.size() == allGrads.size()) // (the add keeps one gradient)
    inPlace.erase(allGrads.back());
  // grads' buffer (a gradient summed by the add, a temp, a view of either)
  // -> grads_accumulate's own.
  std::map<int, int> twin;
  std::vector<int> gradIds, tempIds;
  for (int id : allGrads) {
    if (inPlace.count(id))
      continue;
    rt::Buffer t;
    t.name = program.buffers[id].binding + ".acc";
    t.dtype = rt::DType::F32;
    t.shape = program.buffers[id].shape;
    gradIds.push_back(id);
    tempIds.push_back(twin[id] = add(std::move(t)));
  }

  rt::Function acc = grads;
  acc.name = "grads_accumulate";
  // Temps are one function's own (planMemory keeps a temp two functions
  // touch for the whole run), so grads' temps get twins here too.
  auto remap = [&](int id) {
    if (auto it = twin.find(id); it != twin.end())
      return it->second;
    int root = rootOf(id);
    if (program.buffers[root].role != rt::Role::Temp && !twin.count(root))
      return id;
    if (!twin.count(root)) {
      rt::Buffer t = program.buffers[root];
      t.name += ".acc";
      twin[root] = add(std::move(t));
    }
    if (id == root)
      return twin[root];
    // A view (a reshape grads reads through): the same view of the twin.
    rt::Buffer v = program.buffers[id];
    v.name += ".acc";
    v.viewOf = twin[root];
    return twin[id] = add(std::move(v));
  };
  for (rt::Launch &l : acc.launches) {
    for (int &id : l.inputs)
      id = remap(id);
    for (int &id : l.outputs)
      id = remap(id);
    // A weight gradient's GEMM (cuBLASLt's beta = 1) or the embedding
    // gradient adds its result to the sum in place: out = sum + g, the
    // add's own float32 sum, with no temp and no pass of the add over it.
    if (!l.outputs.empty() && inPlace.count(l.outputs[0])) {
      l.inputs.push_back(l.outputs[0]);
      l.ints["accumulate"] = 1;
    }
  }

  // grad_t = grad_t + g_t, in place: the executor's sum += g to the bit.
  rt::Launch addLaunch;
  addLaunch.kernel = "multi_tensor_elementwise";
  addLaunch.ints["num_tensors"] = int64_t(gradIds.size());
  addLaunch.inputs = gradIds;
  addLaunch.inputs.insert(addLaunch.inputs.end(), tempIds.begin(),
                          tempIds.end());
  addLaunch.outputs = gradIds;
  addLaunch.body.numArgs = 2;
  addLaunch.body.numRegisters = 3;
  addLaunch.body.code.push_back({exec::Opcode::Add, 2, 0, 1});
  addLaunch.body.results = {2};
  acc.launches.push_back(std::move(addLaunch));
  acc.arguments.insert(acc.arguments.end(), allGrads.begin(), allGrads.end());
  program.functions.push_back(std::move(acc));
}

/// The tied table's gradient (GPT-2's wte) in grads, in place. Lowered as
/// it is fused, the lm_head's weight-gradient GEMM writes its [Vp, C]
/// product (Vp: the padded vocabulary) into a float32 temp that lives from
/// the top of the backward to its end, and embedding_grad reads that temp's
/// leading V rows as its addend and writes every row of the table: for
/// GPT-2, a 155 MB temp, and 309 MB of traffic for a scatter of B·T rows.
/// Here the GEMM writes its product straight into the Grad buffer, and
/// embedding_grad adds its sums to it in place (`accumulate`, the buffer as
/// its last operand), so it touches only the rows of the ids. The bits are
/// the same: addend + sum, one float32 add.
/// Where the product has rows the table lacks (a padded vocabulary:
/// GPT-2's 50304 of 50257), the Grad buffer grows to the product's rows and
/// every other reader (grads' results, the update, grads_accumulate) takes
/// the table through a view of its leading rows: written as those rows
/// alone (the forty-sixth session's form), the GEMM's n lost its multiple
/// of 64, and on an H200 it took 2.70 ms a call against 1.62 for the
/// lm_head's other GEMMs of the same FLOPs (docs/benchmarks.md,
/// forty-seventh session); padded, it is the GEMM it was, and the 47 rows
/// past the table cost 144 KB of gradient nobody reads.
/// grads_accumulate keeps the addend form, since its GEMM adding to the
/// sum so far (cuBLASLt's beta = 1) would round (old + addend) + sum, not
/// the host's old + (addend + sum).
void Lowering::writeTableGradientInPlace(rt::Function &grads) {
  std::set<int> detached;
  for (size_t j = 0; j < grads.launches.size(); ++j) {
    rt::Launch &scatter = grads.launches[j];
    if (scatter.kernel != "embedding_grad" || rt::accumulates(scatter) ||
        scatter.inputs.size() != 3 || scatter.outputs.size() != 1)
      continue;
    const int table = scatter.outputs[0], addend = scatter.inputs[2];
    const int product = rootOf(addend);
    const rt::Buffer &g = program.buffers[table];
    const rt::Buffer &t = program.buffers[product];
    if (g.role != rt::Role::Grad || g.viewOf >= 0 ||
        g.dtype != rt::DType::F32 || t.role != rt::Role::Temp ||
        t.dtype != rt::DType::F32 || t.shape.size() != 2 ||
        g.shape.size() != 2 || !exec::isLeadingRows(g.shape, t.shape) ||
        program.buffers[addend].shape != g.shape)
      continue;
    // The GEMM that writes the product, and no launch but these two that
    // touches the product (or a view of it) or the table.
    auto touched = [&](const std::vector<int> &ids) {
      return llvm::any_of(ids, [&](int id) {
        return rootOf(id) == table || rootOf(id) == product;
      });
    };
    int gemm = -1;
    bool other = touched({scatter.inputs[0], scatter.inputs[1]});
    for (size_t i = 0; i < grads.launches.size() && !other; ++i) {
      const rt::Launch &l = grads.launches[i];
      const bool reads = touched(l.inputs), writes = touched(l.outputs);
      if (i == j || (!reads && !writes))
        continue;
      if (gemm < 0 && i < j && !reads && l.outputs == std::vector{product})
        gemm = int(i);
      else
        other = true;
    }
    if (other || gemm < 0)
      continue;
    // One plain 2-D GEMM.
    rt::Launch &matmul = grads.launches[gemm];
    if (matmul.kernel != "matmul" || rt::accumulates(matmul) ||
        program.buffers[matmul.inputs[0]].shape.size() != 2 ||
        program.buffers[matmul.inputs[1]].shape.size() != 2)
      continue;
    if (g.shape != t.shape) {
      // The Grad buffer becomes the product's shape; everyone else reads and
      // writes the table as a view of its leading rows.
      rt::Buffer rows = g;
      rows.viewOf = table;
      const int view = add(std::move(rows));
      program.buffers[table].shape = program.buffers[product].shape;
      for (rt::Function &f : program.functions) {
        for (std::vector<int> *ids : {&f.arguments, &f.results})
          std::replace(ids->begin(), ids->end(), table, view);
        for (rt::Launch &l : f.launches)
          for (std::vector<int> *ids : {&l.inputs, &l.outputs})
            std::replace(ids->begin(), ids->end(), table, view);
      }
      scatter.inputs[2] = scatter.outputs[0] = view;
    } else {
      scatter.inputs[2] = table;
    }
    matmul.outputs[0] = table;
    scatter.ints["accumulate"] = 1;
    detached.insert(product);
  }
  // The products' temps and their views are nobody's now (grads_accumulate
  // has twins of its own): without a launch, planMemory would give them
  // bytes for the whole run.
  std::set<int> dead;
  for (size_t id = 0; id < program.buffers.size(); ++id)
    if (detached.count(rootOf(int(id))))
      dead.insert(int(id));
  for (const rt::Function &f : program.functions)
    for (const rt::Launch &l : f.launches)
      for (const std::vector<int> *ids : {&l.inputs, &l.outputs})
        for (int id : *ids)
          for (int at = id; at >= 0; at = program.buffers[at].viewOf)
            dead.erase(at);
  eraseBuffers(dead);
}

/// Removes buffers no function touches, renumbering the rest.
void Lowering::eraseBuffers(const std::set<int> &dead) {
  if (dead.empty())
    return;
  std::vector<int> renumbered(program.buffers.size(), -1);
  std::vector<rt::Buffer> kept;
  for (size_t id = 0; id < program.buffers.size(); ++id)
    if (!dead.count(int(id))) {
      renumbered[id] = int(kept.size());
      kept.push_back(std::move(program.buffers[id]));
    }
  for (rt::Buffer &b : kept)
    if (b.viewOf >= 0)
      b.viewOf = renumbered[b.viewOf];
  program.buffers = std::move(kept);
  auto renumber = [&](std::vector<int> &ids) {
    for (int &id : ids)
      id = renumbered[id];
  };
  for (rt::Function &f : program.functions) {
    renumber(f.arguments);
    renumber(f.results);
    for (rt::Launch &l : f.launches) {
      renumber(l.inputs);
      renumber(l.outputs);
    }
  }
  for (auto &[key, id] : bound)
    id = renumbered[id];
}

} // namespace

StepFunctions findStepFunctions(ModuleOp module) {
  StepFunctions fns;
  for (auto func : module.getOps<func::FuncOp>()) {
    if (func.isExternal())
      continue;
    bool adam = false, grad = false, output = false;
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      adam |= bool(func.getArgAttr(i, gpt::kAdamMAttr));
    for (unsigned i = 0; i < func.getNumResults(); ++i) {
      grad |= bool(func.getResultAttr(i, gpt::kGradAttr));
      output |= bool(func.getResultAttr(i, gpt::kOutputAttr));
    }
    if (adam && !fns.update)
      fns.update = func;
    else if (grad && !fns.grads)
      fns.grads = func;
    else if (output && !fns.forward)
      fns.forward = func;
  }
  return fns;
}

FailureOr<rt::Program> lowerFunctionsToKernels(const StepFunctions &fns,
                                               bool accumulateInPlace) {
  Lowering lowering;
  std::pair<func::FuncOp, const char *> order[] = {
      {fns.forward, "forward"}, {fns.grads, "grads"}, {fns.update, "update"}};
  for (auto [func, name] : order) {
    if (!func)
      continue;
    if (lowering.program.meta.count("precision") == 0)
      if (auto module = func->getParentOfType<ModuleOp>()) {
        auto policy = module->getAttrOfType<StringAttr>(gpt::kPrecisionAttr);
        lowering.program.meta["precision"] =
            policy ? policy.getValue().str() : "fp32";
      }
    if (failed(lowering.lowerFunction(func, name)))
      return failure();
  }
  if (fns.grads)
    if (const rt::Function *grads = lowering.program.function("grads")) {
      lowering.addAccumulatingGrads(rt::Function(*grads), accumulateInPlace);
      // (After it: the accumulating twin keeps the addend form.)
      for (rt::Function &f : lowering.program.functions)
        if (f.name == "grads")
          lowering.writeTableGradientInPlace(f);
    }
  sortEmbeddingIds(lowering.program);
  return std::move(lowering.program);
}

FailureOr<rt::Program> lowerToKernels(const TrainingProgram &program,
                                      const models::GPT2Config &cfg,
                                      int64_t batch, int64_t seq,
                                      const OptimizerOptions &opts,
                                      int64_t padMultiple) {
  FailureOr<rt::Program> p = lowerFunctionsToKernels(
      {program.forward, program.grads, program.update},
      opts.accumulateInPlace);
  if (failed(p))
    return failure();
  FailureOr<std::vector<train::ParamSpec>> specs =
      train::parameterSpecs(program.forward);
  if (failed(specs))
    return failure();
  p->params = std::move(*specs);
  auto &m = p->meta;
  m["model"] = cfg.name;
  m["precision"] = opts.precision;
  m["recompute"] = opts.recomputeList();
  if (!opts.fusedBiasGrads)
    m["bias_grads"] = "gemm";
  else if (opts.geluBiasGrads)
    m["bias_grads"] = "gelu";
  if (!opts.weightCopies)
    m["weight_copies"] = "false";
  if (!opts.accumulateInPlace)
    m["accumulate_in_place"] = "false";
  m["batch"] = std::to_string(batch);
  m["seq"] = std::to_string(seq);
  m["pad_multiple"] = std::to_string(padMultiple);
  m["n_layer"] = std::to_string(cfg.nLayer);
  m["n_head"] = std::to_string(cfg.nHead);
  m["n_embd"] = std::to_string(cfg.nEmbd);
  m["block_size"] = std::to_string(cfg.blockSize);
  m["vocab_size"] = std::to_string(cfg.vocabSize);
  m["beta1"] = number(opts.beta1);
  m["beta2"] = number(opts.beta2);
  m["eps"] = number(opts.eps);
  m["weight_decay"] = number(opts.weightDecay);
  m["clip"] = number(opts.clip);
  return p;
}

FailureOr<rt::Program> compileKernelProgram(MLIRContext &ctx,
                                            const models::GPT2Config &cfg,
                                            int64_t batch, int64_t seq,
                                            const OptimizerOptions &opts,
                                            int64_t padMultiple,
                                            bool keepLogits) {
  FailureOr<TrainingProgram> step =
      compileTrainingProgram(ctx, cfg, batch, seq, opts, padMultiple);
  if (failed(step))
    return failure();
  if (!keepLogits)
    dropOutputs(step->forward, {"logits"});
  FailureOr<rt::Program> p =
      lowerToKernels(*step, cfg, batch, seq, opts, padMultiple);
  if (failed(p))
    return failure();
  if (opts.overlapWeightGrads) {
    rt::planStreams(*p);
    p->meta["overlap"] = "weight-grads";
  }
  rt::planMemory(*p);
  return p;
}

} // namespace gptc
