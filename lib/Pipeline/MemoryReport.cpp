//===- MemoryReport.cpp - the bytes a training step needs -----------------===//

#include "gptc/Pipeline/MemoryReport.h"

#include "gptc/Dialect/GPT/GPTOps.h"
#include "gptc/Transforms/Passes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <cstdio>

using namespace mlir;

namespace gptc {

namespace {

int64_t bytesOf(Value v) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type)
    return 0;
  Type elem = type.getElementType();
  int64_t size = elem.isBF16() || elem.isF16() ? 2 : 4;
  return type.getNumElements() * size;
}

bool isParameter(func::FuncOp func, Value v) {
  auto arg = dyn_cast<BlockArgument>(v);
  return arg && arg.getOwner()->getParentOp() == func &&
         func.getArgAttr(arg.getArgNumber(), gpt::kParamAttr);
}

/// A parameter, or a parameter only padded, reshaped, transposed or cast.
bool isParameterData(func::FuncOp func, Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (!isa<gpt::ReshapeOp, gpt::TransposeOp, gpt::CastOp>(def) &&
        def->getName().getStringRef() != "gpt.pad")
      return false;
    v = def->getOperand(0);
  }
  return isParameter(func, v);
}

/// A gpt.reshape is a view: the storage is its operand's.
Value storageOf(Value v) {
  while (auto reshape = v.getDefiningOp<gpt::ReshapeOp>())
    v = reshape.getX();
  return v;
}

} // namespace

FailureOr<MemoryReport> computeMemoryReport(ModuleOp module) {
  MemoryReport r;
  func::FuncOp grads, update;
  for (auto func : module.getOps<func::FuncOp>()) {
    for (unsigned i = 0; i < func.getNumResults(); ++i)
      if (func.getResultAttr(i, gpt::kGradAttr))
        grads = func;
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      if (func.getArgAttr(i, gpt::kAdamMAttr))
        update = func;
  }
  if (!grads || !update)
    return module.emitError("memory report: the module has no gradient and "
                            "update functions (run the pipeline to the "
                            "optimizer stage)");
  auto policy = module->getAttrOfType<StringAttr>(gpt::kPrecisionAttr);
  r.precision = policy ? policy.getValue().str() : "fp32";
  bool lowPrecision = r.precision == "bf16" || r.precision == "fp16";

  Block &body = grads.front();
  for (BlockArgument arg : body.getArguments())
    if (isParameter(grads, arg)) {
      r.parameters += cast<RankedTensorType>(arg.getType()).getNumElements();
      (lowPrecision ? r.master : r.weights) += bytesOf(arg);
    }

  // Low-precision copies of parameters (possibly padded or reshaped first):
  // weights, not activations.
  DenseSet<Value> weightCopies;
  for (auto cast : grads.getOps<gpt::CastOp>())
    if (isParameterData(grads, cast.getX()) && !isBackward(cast)) {
      weightCopies.insert(cast.getResult());
      r.weights += bytesOf(cast.getResult());
    }

  auto ret = cast<func::ReturnOp>(body.getTerminator());
  for (auto [i, v] : llvm::enumerate(ret.getOperands()))
    if (grads.getResultAttr(i, gpt::kGradAttr))
      r.gradients += bytesOf(v);
  for (unsigned i = 0; i < update.getNumArguments(); ++i) {
    Value arg = update.getArgument(i);
    if (update.getArgAttr(i, gpt::kAdamMAttr))
      r.adamM += bytesOf(arg);
    if (update.getArgAttr(i, gpt::kAdamVAttr))
      r.adamV += bytesOf(arg);
  }

  // Kept activations: forward values that a backward op reads.
  DenseSet<Value> kept;
  for (Operation &op : body.without_terminator()) {
    if (!isBackward(&op))
      continue;
    for (Value v : op.getOperands()) {
      Value s = storageOf(v);
      Operation *def = s.getDefiningOp();
      if (!def || isBackward(def) || isa<gpt::ConstantOp>(def) ||
          weightCopies.contains(s))
        continue;
      // A padded parameter that a backward GEMM reads is a weight too.
      if (isParameterData(grads, s)) {
        weightCopies.insert(s);
        r.weights += bytesOf(s);
        continue;
      }
      if (kept.insert(s).second)
        r.activations += bytesOf(s);
    }
  }

  // Workspace: the peak of the other values alive at once, op by op.
  DenseSet<Value> returned(ret.getOperands().begin(), ret.getOperands().end());
  DenseMap<Value, Operation *> lastUse;
  for (Operation &op : body)
    for (Value v : op.getOperands())
      lastUse[storageOf(v)] = &op;
  int64_t live = 0;
  for (Operation &op : body.without_terminator()) {
    for (Value v : op.getResults())
      if (!isa<gpt::ReshapeOp, gpt::ConstantOp>(op) && !kept.contains(v) &&
          !weightCopies.contains(v) && !returned.contains(v) &&
          lastUse.count(v))
        live += bytesOf(v);
    r.workspace = std::max(r.workspace, live);
    for (Value v : op.getOperands()) {
      Value s = storageOf(v);
      Operation *def = s.getDefiningOp();
      if (def && lastUse.lookup(s) == &op && !isa<gpt::ConstantOp>(def) &&
          !kept.contains(s) && !weightCopies.contains(s) &&
          !returned.contains(s))
        live -= bytesOf(s);
    }
  }
  return r;
}

void printMemoryReport(const MemoryReport &r, llvm::raw_ostream &os) {
  bool low = r.precision == "bf16" || r.precision == "fp16";
  std::string lowName = r.precision == "fp16" ? "fp16" : "bf16";
  os << "memory report (" << r.precision << "): "
     << withThousands(r.parameters) << " parameters\n";
  auto row = [&](const std::string &name, int64_t bytes) {
    char perParam[32];
    std::snprintf(perParam, sizeof(perParam), "%.2f",
                  r.parameters ? double(bytes) / double(r.parameters) : 0.0);
    os << "  " << name << std::string(name.size() < 32 ? 32 - name.size() : 1,
                                      ' ')
       << withThousands(bytes) << " bytes  " << mebibytes(bytes) << "  "
       << perParam << " B/param\n";
  };
  row(low ? "weights (" + lowName + " copies)" : "weights (fp32)", r.weights);
  row("master weights (fp32)", r.master);
  row("gradients (fp32)", r.gradients);
  row("AdamW m (fp32)", r.adamM);
  row("AdamW v (fp32)", r.adamV);
  row("activations kept for backward", r.activations);
  row("workspace", r.workspace);
  row("total", r.total());
}

std::string memoryReportLine(const MemoryReport &r) {
  return "memory (" + r.precision + "): weights " + mebibytes(r.weights) +
         " | master " + mebibytes(r.master) + " | grads " + mebibytes(r.gradients) +
         " | adam m " + mebibytes(r.adamM) + " | adam v " + mebibytes(r.adamV) +
         " | activations " + mebibytes(r.activations) + " | workspace " +
         mebibytes(r.workspace) + " | total " + mebibytes(r.total());
}

} // namespace gptc
