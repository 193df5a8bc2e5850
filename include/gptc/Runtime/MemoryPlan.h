//===- MemoryPlan.h - what a planned Program allocates ----------*- C++ -*-===//
//
// The arena planMemory laid out, by role: what the runtime allocates for
// one training step, as `gptc compile --memory-report` prints it below the
// anatomy of the step (gptc/Pipeline/MemoryReport.h). Bound buffers count
// as the plan reserves them (each rounded up to 256 bytes), so the rows add
// up to the arena; temps are the region above them, with the most temp
// bytes alive at once beside it (what a perfect packing would need).
// No MLIR here.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_RUNTIME_MEMORYPLAN_H
#define GPTC_RUNTIME_MEMORYPLAN_H

#include "gptc/Runtime/Program.h"

#include <map>
#include <string>
#include <vector>

namespace gptc::rt {

struct MemoryPlanSummary {
  int64_t arena = 0;
  std::map<Role, int64_t> bound; ///< reserved bytes per role (no Temp)
  int64_t temps = 0;     ///< the temps' region: arena minus bound buffers
  int64_t tempsLive = 0; ///< most temp bytes alive at once, any function
  /// Where tempsLive is reached first: the function, its launch (index,
  /// of how many), the launch's op and source location, how many temps
  /// are alive there, and the largest of them.
  struct LiveTemp {
    std::string type; ///< "bf16[16x1024x50304]"
    int64_t bytes = 0;
    std::string writer; ///< its first writer's op and location
  };
  std::string peakFunction;
  int peakLaunch = -1, peakLaunches = 0, peakTemps = 0;
  std::string peakOp;
  std::vector<LiveTemp> peakLargest; ///< at most kPeakLargest, largest first
};
inline constexpr size_t kPeakLargest = 5;

/// Reads the summary off a planned Program (planMemory ran).
MemoryPlanSummary summarizePlan(const Program &p);

/// One line per role that has buffers, then the temps (with where they
/// peak and the largest alive there) and the arena total; columns cut
/// short here:
///
///     planned arena (what the runtime allocates):
///       params (fp32)           109,799,424 bytes  104.7 MiB
///       ...
///       temps (planned, peak)    66,818,816 bytes  63.7 MiB  (alive at
///                                                  once 60,000,000)
///         at grads launch 37 of 250 (cross_entropy_with_grad at
///         m.cpp:9:5): 412 temps, the largest:
///           bf16[16x1024x50304]  1,648,361,472 bytes  from matmul at ...
///           ...
///       arena total             179,836,928 bytes  171.5 MiB
std::string printMemoryPlan(const MemoryPlanSummary &s);

} // namespace gptc::rt

#endif // GPTC_RUNTIME_MEMORYPLAN_H
