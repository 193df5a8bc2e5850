//===- MemoryReport.h - the bytes a training step needs --------*- C++ -*-===//
//
// What `gptc compile --memory-report` prints and `gptc train` summarises in
// its first line: the anatomy of mixed-precision AdamW training, read off
// the compiled step (gptc/Pipeline/Pipeline.h) before elementwise fusion,
// where one op is one kernel of an unfused step.
//
//   weights      the tensors the matmuls read: under bf16/fp16 the
//                low-precision copies of parameters (gpt.cast of a
//                gpt.param argument), under fp32/tf32 the float32
//                parameters themselves; plus any padded copy of a
//                parameter that a backward op reads (gpt-pad-dims' wte)
//   master       bf16/fp16: the float32 parameters AdamW updates (0 under
//                fp32/tf32, where the weights are the masters)
//   gradients    the gradient function's gpt.grad results
//   adam m, v    the update's gpt.adam_m and gpt.adam_v arguments
//   activations  values of the gradient function computed by its forward
//                ops (those not located in fused<"vjp"> or, gpt-recompute's
//                copies, fused<"recompute">) and read by at
//                least one backward op: what the forward pass must keep for
//                the backward. Parameters, their low-precision copies
//                (counted as weights) and constants are excluded; a
//                gpt.reshape is a view and counts as the value it reshapes.
//   workspace    the most bytes alive at once, running the gradient
//                function op by op, in values that are none of the above
//                nor its results: the temporaries between unfused kernels
//                (a fused, arena-planned step needs less)
//
// Element sizes: f32 and i32 4 bytes, bf16 and f16 2.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_PIPELINE_MEMORYREPORT_H
#define GPTC_PIPELINE_MEMORYREPORT_H

#include "gptc/Pipeline/Pipeline.h"
#include "gptc/Support/Format.h"

#include "llvm/Support/raw_ostream.h"

#include <string>

namespace gptc {

struct MemoryReport {
  std::string precision; ///< the module's gpt.precision, "fp32" if none
  int64_t parameters = 0; ///< parameter elements
  int64_t weights = 0, master = 0, gradients = 0, adamM = 0, adamV = 0;
  int64_t activations = 0, workspace = 0;
  int64_t total() const {
    return weights + master + gradients + adamM + adamV + activations +
           workspace;
  }
};

/// Reads the report off the gradient function (the one with gpt.grad
/// results) and the update (gpt.adam_m arguments) of a module run through
/// the pipeline to the "optimizer" stage; fails with an error if it has none.
mlir::FailureOr<MemoryReport> computeMemoryReport(mlir::ModuleOp module);

/// The full report, one category per line with bytes, MiB and bytes per
/// parameter, then the total.
void printMemoryReport(const MemoryReport &report, llvm::raw_ostream &os);

/// One line: "memory (bf16): weights 237.4 MiB | master ... | total ... GiB".
std::string memoryReportLine(const MemoryReport &report);

} // namespace gptc

#endif // GPTC_PIPELINE_MEMORYREPORT_H
