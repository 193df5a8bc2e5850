//===- LaunchStats.h - launches and bytes moved by a training step -*- C++ -*-===//
//
// What `gptc emit --stats` counts: every op that will be a kernel launch
// (a GEMM, attention, a reduction, a fused group, a copy such as transpose
// or concat) and an estimate of the bytes it moves, its operands read once
// and its results written once. Not launches: constants, iota, reshapes
// and prefix slices (views: metadata only), and the return.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TOOLS_LAUNCHSTATS_H
#define GPTC_TOOLS_LAUNCHSTATS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace gptc::cli {

struct LaunchStats {
  std::string function;
  int64_t launches = 0;
  int64_t bytes = 0;
  bool trainingStep = false; ///< the gradient function or the update
};

/// One entry per function of `module`, in order.
std::vector<LaunchStats> countLaunches(mlir::ModuleOp module);

/// A table of `after`, beside `before` when it is not empty (same
/// functions), and the total of the training step (gradient function and
/// update; of everything when there is no training step yet).
void printLaunchStats(const std::vector<LaunchStats> &before,
                      const std::vector<LaunchStats> &after,
                      llvm::raw_ostream &os);

} // namespace gptc::cli

#endif // GPTC_TOOLS_LAUNCHSTATS_H
