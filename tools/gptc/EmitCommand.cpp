//===- EmitCommand.cpp - gptc emit: the IR of a model after a stage -------===//

#include "Command.h"
#include "LaunchStats.h"

#include "gptc/Conversion/LowerToKernels.h"
#include "gptc/Executor/Bindings.h"
#include "gptc/Pipeline/MemoryReport.h"
#include "gptc/Pipeline/Pipeline.h"
#include "gptc/Target/CUDA/EmitCUDA.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/ToolOutputFile.h"

#include <map>

using namespace mlir;

namespace gptc::cli {

namespace {
// Stages in pipeline order; each later issue appends its own.
const char *const kStages[] = {"graph",     "padded",   "attention",
                                "precision", "autodiff", "optimizer",
                                "recompute", "fused",    "kernels",
                                "cuda"};

void printStats(const models::GPT2Config &c, int64_t B, int64_t T,
                func::FuncOp func, llvm::raw_ostream &os) {
  os << "model: " << c.name << " (n_layer=" << c.nLayer
     << " n_head=" << c.nHead << " n_embd=" << c.nEmbd
     << " block_size=" << c.blockSize << " vocab_size=" << c.vocabSize
     << "), batch " << B << " x seq " << T << "\n";
  std::vector<exec::ArgumentInfo> args = exec::describeArguments(func);
  int64_t tensors = 0;
  for (const exec::ArgumentInfo &a : args)
    tensors += a.kind == exec::ArgumentInfo::Kind::Param;
  os << "parameters: " << withThousands(exec::parameterCount(args)) << " in "
     << tensors << " tensors\n";
  std::map<std::string, int64_t> counts;
  int64_t total = 0;
  func.walk([&](Operation *op) {
    // Top-level ops only: a fused op's body is part of its kernel.
    if (op->getParentOp() == func && op->getDialect() &&
        op->getDialect()->getNamespace() == "gpt") {
      ++counts[op->getName().getStringRef().str()];
      ++total;
    }
  });
  os << "ops: " << total << "\n";
  for (const auto &[name, n] : counts)
    os << "  " << name << ": " << n << "\n";
}
} // namespace

int runEmit(int argc, char **argv) {
  ModelOptions model;
  llvm::cl::opt<std::string> stage(
      "stage", llvm::cl::desc("Print the IR after this stage: graph, padded, "
                              "attention, precision, autodiff, optimizer, "
                              "recompute, fused, kernels, cuda"),
      llvm::cl::init("graph"), llvm::cl::cat(gptcCategory));
  llvm::cl::opt<bool> stats(
      "stats", llvm::cl::desc("Print parameter and op counts, not the IR"),
      llvm::cl::cat(gptcCategory));
  llvm::cl::opt<std::string> output("o", llvm::cl::desc("Output file"),
                                    llvm::cl::value_desc("filename"),
                                    llvm::cl::init("-"),
                                    llvm::cl::cat(gptcCategory));
  parseCommandLine(argc, argv,
                   "gptc emit: print a model's IR after a pipeline stage\n",
                   /*withMLIROptions=*/true);

  if (!llvm::is_contained(kStages, stage.getValue()))
    fail("unknown stage '" + stage +
         "' (stages: graph, padded, attention, precision, autodiff, "
         "optimizer, recompute, fused, kernels, cuda)");
  models::GPT2Config config = model.config();
  int64_t B = model.batch, T = model.seqLength();

  std::unique_ptr<MLIRContext> ctx = makeContext();
  // After the MLIR stages: the kernel-level Program, as text.
  if (stage == "kernels" || stage == "cuda") {
    if (stats)
      fail("--stats is not available at --stage=" + stage);
    FailureOr<rt::Program> program = compileKernelProgram(
        *ctx, config, B, T, model.compileOptions(), model.padMultiple);
    if (failed(program))
      return 1;
    std::string error;
    std::unique_ptr<llvm::ToolOutputFile> out = openOutputFile(output, &error);
    if (!out)
      fail(error);
    if (stage == "kernels") {
      out->os() << rt::printProgram(*program);
    } else {
      // The CUDA C++ of every kernel (the same for every sm_80+ arch).
      try {
        cuda::emitCUDA(*program, "sm_90a");
      } catch (const std::exception &e) {
        fail(e.what());
      }
      for (const rt::DeviceKernel &k : program->kernels) {
        out->os() << "//===--- kernel " << k.name << " ---===//\n";
        for (const std::string &f : k.fuses)
          out->os() << "// launch: " << f << "\n";
        out->os() << k.source << "\n";
      }
    }
    out->keep();
    return 0;
  }
  OwningOpRef<ModuleOp> module = models::buildGPT2(*ctx, config, B, T);
  PassManager pm(ctx.get());
  buildPipeline(pm, stage, model.compileOptions(), model.padMultiple);
  if (failed(applyPassManagerCLOptions(pm)))
    fail("bad pass-manager options");
  applyDefaultTimingPassManagerCLOptions(pm);
  if (failed(verify(*module)) || failed(pm.run(*module)))
    return 1;

  std::string error;
  std::unique_ptr<llvm::ToolOutputFile> out = openOutputFile(output, &error);
  if (!out)
    fail(error);
  auto func = *module->getOps<func::FuncOp>().begin();
  if (stats) {
    printStats(config, B, T, func, out->os());
    // At the fused stage, beside the same step before gpt-fuse-elementwise.
    std::vector<LaunchStats> before;
    if (stage == "fused") {
      OwningOpRef<ModuleOp> unfused = models::buildGPT2(*ctx, config, B, T);
      PassManager unfusedPm(ctx.get());
      buildPipeline(unfusedPm, "recompute", model.compileOptions(),
                    model.padMultiple);
      if (failed(unfusedPm.run(*unfused)))
        return 1;
      before = countLaunches(*unfused);
    }
    printLaunchStats(before, countLaunches(*module), out->os());
  } else
    module->print(out->os());
  out->keep();
  return 0;
}

} // namespace gptc::cli
