//===- CompileCommand.cpp - gptc compile: the training program ------------===//
//
// --memory-report prints the memory a step needs. --kernel-report and
// --dump-kernels lower the step to kernels, emit the CUDA C++ and compile
// every kernel with NVRTC for --gpu-arch (no GPU needed). -o OUT writes the
// training program: a copy of gptc-runtime (built beside gptc) with that
// Program appended (gptc/Runtime/Bundle.h).
//
//===----------------------------------------------------------------------===//

#include "Command.h"

#include "gptc/Conversion/LowerToKernels.h"
#include "gptc/Formats/Error.h"
#include "gptc/Pipeline/MemoryReport.h"
#include "gptc/Runtime/Bundle.h"
#include "gptc/Runtime/MemoryPlan.h"
#include "gptc/Runtime/NVRTC.h"
#include "gptc/Target/CUDA/CompileKernels.h"

#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"

#include <filesystem>
#include <sstream>

using namespace mlir;

namespace gptc::cli {

namespace {
/// gptc-runtime in gptc's own folder, where the build puts both.
std::string runtimeBesideGptc() {
  std::error_code ec;
  std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe", ec);
  std::filesystem::path runtime = self.parent_path() / "gptc-runtime";
  if (ec || !std::filesystem::is_regular_file(runtime))
    fail("cannot find gptc-runtime beside gptc (" + runtime.string() +
         "): build the gptc-runtime target");
  return runtime.string();
}
} // namespace

FailureOr<MemoryReport> memoryReportFor(MLIRContext &ctx,
                                        const ModelOptions &model) {
  OwningOpRef<ModuleOp> module = models::buildGPT2(
      ctx, model.config(), model.batch, model.seqLength());
  PassManager pm(&ctx);
  buildPipeline(pm, "recompute", model.compileOptions(), model.padMultiple);
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
  llvm::cl::opt<std::string> dumpKernels(
      "dump-kernels",
      llvm::cl::desc("Write every generated CUDA kernel (.cu), its NVRTC log "
                     "and cubin, the NVRTC options and manifest.json (kernel "
                     "-> launches) into this directory"),
      llvm::cl::value_desc("dir"), llvm::cl::cat(gptcCategory));
  llvm::cl::opt<bool> kernelReport(
      "kernel-report",
      llvm::cl::desc("NVRTC-compile every kernel for --gpu-arch and print "
                     "its registers, shared memory and spills"),
      llvm::cl::cat(gptcCategory));
  KernelOptions kernels;
  llvm::cl::opt<double> weightDecay(
      "weight-decay",
      llvm::cl::desc("AdamW weight decay (2-D parameters only)"),
      llvm::cl::init(0.1), llvm::cl::cat(gptcCategory));
  llvm::cl::opt<double> clip(
      "clip",
      llvm::cl::desc("Clip the gradient's global norm to this; 0 turns "
                     "clipping off"),
      llvm::cl::init(1.0), llvm::cl::cat(gptcCategory));
  parseCommandLine(argc, argv,
                   "gptc compile: compile a model into a training program\n",
                   /*withMLIROptions=*/true);
  (void)model.config(); // flag errors before the missing backend
  if (std::string problem = rt::nvrtcArchProblem(gpuArch); !problem.empty())
    fail(problem);
  const cuda::EmitOptions emit = kernels.emitOptions(gpuArch, /*archFromFlag=*/true);
  if (!(weightDecay >= 0) || !(clip >= 0))
    fail("--weight-decay and --clip must be non-negative");
  if (!memoryReport &&
      (kernelReport || !dumpKernels.empty() || !output.empty())) {
    // Before the long part: a missing runtime fails at once.
    std::string runtime = output.empty() ? "" : runtimeBesideGptc();
    OptimizerOptions optimizer = model.compileOptions();
    optimizer.weightDecay = weightDecay;
    optimizer.clip = clip;
    std::unique_ptr<MLIRContext> ctx = makeContext();
    FailureOr<rt::Program> program =
        compileKernelProgram(*ctx, model.config(), model.batch,
                             model.seqLength(), optimizer, model.padMultiple);
    if (failed(program))
      return 1;
    std::ostringstream report;
    cuda::CompileKernelsOptions opts;
    opts.dumpDir = dumpKernels;
    opts.report = kernelReport ? &report : nullptr;
    opts.emit = emit;
    try {
      cuda::compileKernels(*program, gpuArch, opts);
    } catch (const std::exception &e) {
      fail(e.what());
    }
    if (!output.empty()) {
      try {
        rt::writeBundle(runtime, *program, output);
      } catch (const FormatError &e) {
        fail(e.what());
      }
    }
    llvm::outs() << report.str();
    return 0;
  }
  if (!memoryReport)
    fail("nothing to do: give -o OUT (the training program), "
         "--memory-report, --kernel-report or --dump-kernels");
  std::unique_ptr<MLIRContext> ctx = makeContext();
  FailureOr<MemoryReport> report = memoryReportFor(*ctx, model);
  if (failed(report))
    return 1;
  printMemoryReport(*report, llvm::outs());
  // Below the anatomy: what the runtime allocates, the kernel program's
  // planned arena (gptc/Runtime/MemoryPlan.h).
  FailureOr<rt::Program> program =
      compileKernelProgram(*ctx, model.config(), model.batch,
                           model.seqLength(), model.compileOptions(),
                           model.padMultiple);
  if (failed(program))
    return 1;
  llvm::outs() << rt::printMemoryPlan(rt::summarizePlan(*program));
  return 0;
}

} // namespace gptc::cli
