//===- CompileCommand.cpp - gptc compile: the training program ------------===//
//
// Until the CUDA backend exists this prints the memory report (with
// --memory-report) and otherwise says that code generation is missing.
//
//===----------------------------------------------------------------------===//

#include "Command.h"

#include "gptc/Pipeline/MemoryReport.h"

#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"

using namespace mlir;

namespace gptc::cli {

FailureOr<MemoryReport> memoryReportFor(MLIRContext &ctx,
                                        const ModelOptions &model) {
  OwningOpRef<ModuleOp> module = models::buildGPT2(
      ctx, model.config(), model.batch, model.seqLength());
  PassManager pm(&ctx);
  buildPipeline(pm, "optimizer", model.compileOptions(), model.padMultiple);
  if (failed(verify(*module)) || failed(pm.run(*module)))
    return failure();
  return computeMemoryReport(*module);
}

int runCompile(int argc, char **argv) {
  ModelOptions model;
  llvm::cl::opt<bool> memoryReport(
      "memory-report",
      llvm::cl::desc("Print the memory a training step needs (weights, "
                     "master weights, gradients, AdamW moments, activations, "
                     "workspace) and exit"),
      llvm::cl::cat(gptcCategory));
  llvm::cl::opt<std::string> gpuArch(
      "gpu-arch", llvm::cl::desc("Target GPU architecture (sm_80, sm_90a)"),
      llvm::cl::init("sm_90a"), llvm::cl::cat(gptcCategory));
  llvm::cl::opt<std::string> output("o", llvm::cl::desc("Output program"),
                                    llvm::cl::value_desc("filename"),
                                    llvm::cl::cat(gptcCategory));
  parseCommandLine(argc, argv,
                   "gptc compile: compile a model into a training program\n",
                   /*withMLIROptions=*/true);
  (void)model.config(); // flag errors before the missing backend
  if (!memoryReport)
    fail("code generation is not available yet (no CUDA backend): gptc "
         "compile can only print --memory-report");
  std::unique_ptr<MLIRContext> ctx = makeContext();
  FailureOr<MemoryReport> report = memoryReportFor(*ctx, model);
  if (failed(report))
    return 1;
  printMemoryReport(*report, llvm::outs());
  return 0;
}

} // namespace gptc::cli
