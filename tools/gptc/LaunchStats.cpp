//===- LaunchStats.cpp - launches and bytes moved by a training step ------===//

#include "LaunchStats.h"

#include "gptc/Conversion/LowerToKernels.h"
#include "gptc/Dialect/GPT/GPTOps.h"

#include "llvm/Support/Format.h"

using namespace mlir;

namespace gptc::cli {

namespace {
bool isLaunch(Operation &op) {
  // A prefix slice is a view too, unless it is returned (LowerToKernels.h).
  if (auto slice = dyn_cast<gpt::SliceOp>(op))
    return !isPrefixSlice(slice) ||
           llvm::any_of(slice->getUsers(),
                        [](Operation *u) { return isa<func::ReturnOp>(u); });
  return !isa<gpt::ConstantOp, gpt::IotaOp, gpt::ReshapeOp, func::ReturnOp>(
      op);
}

int64_t bytesOf(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return 0;
  int64_t bits = tensor.getElementTypeBitWidth();
  return tensor.getNumElements() * (bits / 8);
}

std::string gigabytes(int64_t bytes) {
  std::string s;
  llvm::raw_string_ostream(s) << llvm::format("%.3f GB", bytes / 1e9);
  return s;
}
} // namespace

std::vector<LaunchStats> countLaunches(ModuleOp module) {
  std::vector<LaunchStats> out;
  for (auto func : module.getOps<func::FuncOp>()) {
    LaunchStats s{func.getSymName().str()};
    s.trainingStep = func.getSymName() == "adamw_update";
    for (unsigned i = 0; i < func.getNumResults(); ++i)
      s.trainingStep |= bool(func.getResultAttr(i, gpt::kGradAttr));
    for (Operation &op : func.getBody().front()) {
      if (!isLaunch(op))
        continue;
      ++s.launches;
      for (Type t : op.getOperandTypes())
        s.bytes += bytesOf(t);
      // A reduction of a corner reads only the corner.
      if (auto rs = dyn_cast<gpt::ReduceSumOp>(op))
        if (std::optional<ArrayRef<int64_t>> corner = rs.getCorner()) {
          int64_t elements = 1;
          for (int64_t d : *corner)
            elements *= d;
          auto x = cast<RankedTensorType>(rs.getX().getType());
          s.bytes += elements * (x.getElementTypeBitWidth() / 8) -
                     bytesOf(x);
        }
      for (Type t : op.getResultTypes())
        s.bytes += bytesOf(t);
    }
    out.push_back(std::move(s));
  }
  return out;
}

void printLaunchStats(const std::vector<LaunchStats> &before,
                      const std::vector<LaunchStats> &after,
                      llvm::raw_ostream &os) {
  os << "launches (bytes read + written):\n";
  bool hasStep = llvm::any_of(
      after, [](const LaunchStats &s) { return s.trainingStep; });
  LaunchStats totalBefore{hasStep ? "training step" : "total"};
  LaunchStats totalAfter{totalBefore.function};
  auto line = [&](const LaunchStats *b, const LaunchStats &a) {
    os << "  " << llvm::left_justify(a.function, 20);
    if (b)
      os << llvm::format("%6lld", (long long)b->launches) << " ("
         << gigabytes(b->bytes) << ") -> ";
    os << llvm::format("%6lld", (long long)a.launches) << " ("
       << gigabytes(a.bytes) << ")\n";
  };
  for (size_t i = 0; i < after.size(); ++i) {
    const LaunchStats *b = i < before.size() ? &before[i] : nullptr;
    line(b, after[i]);
    if (hasStep && !after[i].trainingStep)
      continue;
    if (b) {
      totalBefore.launches += b->launches;
      totalBefore.bytes += b->bytes;
    }
    totalAfter.launches += after[i].launches;
    totalAfter.bytes += after[i].bytes;
  }
  line(before.empty() ? nullptr : &totalBefore, totalAfter);
}

} // namespace gptc::cli
