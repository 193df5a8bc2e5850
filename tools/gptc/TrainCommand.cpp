//===- TrainCommand.cpp - gptc train: train a model -----------------------===//
//
// Two ways to run the step (--runtime):
//   executor  the CPU executor interprets the fused IR op by op (the
//             reference; CPU only, the default there)
//   program   the kernel-level Program that `gptc compile` puts into a
//             training program, run in-process on --device's backend: the
//             GPU's kernels (cuda), or each launch on the executor's kernels
//             over the same memory plan (cpu, for CI)
// --device defaults to cuda when a CUDA device answers, else cpu. The output
// is the same either way.
//
//===----------------------------------------------------------------------===//

#include "Command.h"

#include "gptc/Conversion/LowerToKernels.h"
#include "gptc/Executor/Bindings.h"
#include "gptc/Formats/Error.h"
#include "gptc/Pipeline/Pipeline.h"
#include "gptc/Runtime/CudaBackend.h"
#include "gptc/Target/CUDA/CompileKernels.h"
#include "gptc/Target/CUDA/EmitCUDA.h"
#include "gptc/Train/ExecutorEngine.h"
#include "gptc/Train/ProgramEngine.h"
#include "gptc/Train/RunFlags.h"

#include <csignal>
#include <filesystem>

using namespace mlir;
using namespace gptc::train;
using llvm::cl::cat;
using llvm::cl::desc;
using llvm::cl::init;

namespace gptc::cli {

namespace {
std::string describe(const models::GPT2Config &c, int64_t params) {
  return "model " + c.name + ": n_layer=" + std::to_string(c.nLayer) +
         " n_head=" + std::to_string(c.nHead) +
         " n_embd=" + std::to_string(c.nEmbd) +
         " block_size=" + std::to_string(c.blockSize) +
         " vocab_size=" + std::to_string(c.vocabSize) + ", " +
         std::to_string(params) + " parameters";
}
} // namespace

int runTrain(int argc, char **argv) {
  ModelOptions model;
  RunFlags run; // the flags a compiled training program takes too
  llvm::cl::opt<std::string, true> data(
      "data", desc("Training tokens: an llm.c shard or a nanoGPT .bin"),
      llvm::cl::Required, llvm::cl::location(run.data), cat(gptcCategory));
  llvm::cl::opt<std::string, true> valData(
      "val-data", desc("Validation tokens (forward only)"),
      llvm::cl::location(run.valData), cat(gptcCategory));
  llvm::cl::opt<std::string> device(
      "device",
      desc("Where to run: cuda (the default when a GPU is present) or cpu"),
      cat(gptcCategory));
  llvm::cl::opt<std::string> runtime(
      "runtime",
      desc("executor: the CPU executor runs the fused IR (cpu only; the "
           "default there); program: the kernel-level Program that gptc "
           "compile builds, on --device (cuda's default)"),
      cat(gptcCategory));
  KernelOptions kernelFlags; // --device=cuda's kernels
  llvm::cl::opt<int64_t, true> steps("steps", desc("Optimizer steps"),
                                     llvm::cl::location(run.steps),
                                     cat(gptcCategory));
  llvm::cl::opt<int64_t, true> gradAccum(
      "grad-accum", desc("Micro-batches per step (gradients are averaged)"),
      llvm::cl::location(run.gradAccum), cat(gptcCategory));
  llvm::cl::opt<double, true> lr("lr", desc("Peak learning rate"),
                                 llvm::cl::location(run.lr), cat(gptcCategory));
  llvm::cl::opt<double, true> minLr(
      "min-lr", desc("Learning rate at the end of the cosine"),
      llvm::cl::location(run.minLr), cat(gptcCategory));
  llvm::cl::opt<int64_t, true> warmup("warmup", desc("Linear warm-up steps"),
                                      llvm::cl::location(run.warmup),
                                      cat(gptcCategory));
  llvm::cl::opt<std::string, true> schedule(
      "lr-schedule",
      desc("After the warm-up: cosine (to --min-lr) or constant"),
      llvm::cl::location(run.schedule), cat(gptcCategory));
  llvm::cl::opt<double> weightDecay(
      "weight-decay", desc("AdamW weight decay (2-D parameters only)"),
      init(0.1), cat(gptcCategory));
  llvm::cl::opt<double> clip("clip",
                             desc("Clip the gradient's global norm to this; "
                                  "0 turns clipping off"),
                             init(1.0), cat(gptcCategory));
  llvm::cl::opt<uint64_t, true> seed(
      "seed", desc("Seed of the initialisation and of --shuffle"),
      llvm::cl::location(run.seed), cat(gptcCategory));
  llvm::cl::opt<bool, true> shuffle(
      "shuffle", desc("Visit the batches of each epoch in a seeded order"),
      llvm::cl::location(run.shuffle), cat(gptcCategory));
  llvm::cl::opt<std::string, true> initFrom(
      "init-from",
      desc("Start from these weights: safetensors (HF names) or an llm.c "
           "model_*.bin"),
      llvm::cl::location(run.initFrom), cat(gptcCategory));
  llvm::cl::opt<std::string, true> ckptDir(
      "ckpt-dir", desc("Run folder: checkpoints step_<N>/ and log.txt"),
      llvm::cl::location(run.ckptDir), cat(gptcCategory));
  llvm::cl::opt<int64_t, true> ckptEvery(
      "ckpt-every", desc("Checkpoint every N steps (and after the last)"),
      llvm::cl::location(run.ckptEvery), cat(gptcCategory));
  llvm::cl::opt<bool, true> resume(
      "resume", desc("Continue from the newest checkpoint in --ckpt-dir"),
      llvm::cl::location(run.resume), cat(gptcCategory));
  llvm::cl::opt<std::string, true> logDir(
      "log-dir", desc("Folder for log.txt when there is no --ckpt-dir"),
      llvm::cl::location(run.logDir), cat(gptcCategory));
  llvm::cl::opt<int64_t, true> valEvery(
      "val-every",
      desc("Validate every N steps (always before the first and after the "
           "last)"),
      llvm::cl::location(run.valEvery), cat(gptcCategory));
  llvm::cl::opt<int64_t, true> valBatches(
      "val-batches", desc("Batches of --val-data per validation"),
      llvm::cl::location(run.valBatches), cat(gptcCategory));
  llvm::cl::opt<int64_t, true> maxSkips(
      "max-skips",
      desc("Stop after this many steps in a row with a non-finite loss or "
           "gradient norm (0: never)"),
      llvm::cl::location(run.maxSkips), cat(gptcCategory));
  llvm::cl::opt<double, true> lossScale(
      "loss-scale",
      desc("--precision=fp16: the initial dynamic loss scale (GradScaler's "
           "init_scale)"),
      llvm::cl::location(run.lossScale), cat(gptcCategory));
  llvm::cl::opt<int64_t, true> lossScaleWindow(
      "loss-scale-window",
      desc("--precision=fp16: finite steps in a row that double the loss "
           "scale (GradScaler's growth_interval)"),
      llvm::cl::location(run.lossScaleWindow), cat(gptcCategory));
  parseCommandLine(argc, argv, "gptc train: train a model on token data\n",
                   /*withMLIROptions=*/true);

  if (!device.empty() && device != "cpu" && device != "cuda")
    fail("unknown device '" + device + "' (gptc train runs on: cpu, cuda)");
  if (!runtime.empty() && runtime != "executor" && runtime != "program")
    fail("unknown --runtime '" + runtime + "' (executor, program)");
  if (device == "cuda" && runtime == "executor")
    fail("--runtime=executor runs on the CPU only: use --device=cpu");
  kernelFlags.check();
  run.ckptEveryGiven = ckptEvery.getNumOccurrences() > 0;
  run.valEveryGiven = valEvery.getNumOccurrences() > 0;
  run.valBatchesGiven = valBatches.getNumOccurrences() > 0;
  if (std::string bad = checkRunFlags(run); !bad.empty())
    fail(bad);
  if (!(weightDecay >= 0) || !(clip >= 0))
    fail("--weight-decay and --clip must be non-negative");

  models::GPT2Config config = model.config();
  OptimizerOptions optimizer = model.compileOptions();
  optimizer.weightDecay = weightDecay;
  optimizer.clip = clip;
  TrainOptions opts =
      trainOptions(run, model.batch, model.seqLength(), optimizer);

  // A file-size limit should fail a write with EFBIG, which is reported
  // like a full disk, rather than kill the process.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    // Data and the run folder first: their errors come before compiling.
    RunInputs in = openRunInputs(run, opts, config.vocabSize);
    // The device next, still before anything is written: an explicit
    // --device=cuda without one is an error, the default falls back.
    std::unique_ptr<rt::Backend> backend;
    if (device.empty() ? runtime != "executor" : device == "cuda") {
      try {
        backend = rt::makeCudaBackend();
      } catch (const rt::DeviceError &e) {
        if (!device.empty())
          fail(e.what());
      }
    }
    if (!backend && runtime == "program")
      backend = rt::makeCpuBackend();
    makeRunDir(in);
    RunLog log(in.runDir.empty() ? "" : in.runDir + "/log.txt");

    std::unique_ptr<MLIRContext> ctx = makeContext();
    std::unique_ptr<Engine> engine;
    std::vector<exec::ArgumentInfo> params;
    std::optional<TrainingProgram> program; // the executor's
    std::optional<rt::Program> kernels;     // the program runtime's
    if (backend) {
      FailureOr<rt::Program> lowered =
          compileKernelProgram(*ctx, config, opts.batch, opts.seq,
                               opts.optimizer, model.padMultiple);
      if (failed(lowered))
        return 1;
      kernels = std::move(*lowered);
      if (rt::CudaBackend *cuda = rt::asCudaBackend(backend.get())) {
        cuda::CompileKernelsOptions compile;
        compile.emit = kernelFlags.emitOptions(cuda->arch(),
                                               /*archFromFlag=*/false);
        cuda::compileKernels(*kernels, cuda->arch(), compile);
      }
      engine = makeProgramEngine(*kernels, *backend);
      for (const ParamSpec &p : kernels->params)
        params.push_back({exec::ArgumentInfo::Kind::Param, p.name, p.shape});
      setMfu(opts, *backend, config, exec::parameterCount(params));
    } else {
      FailureOr<TrainingProgram> compiled =
          compileTrainingProgram(*ctx, config, opts.batch, opts.seq,
                                 opts.optimizer, model.padMultiple);
      if (failed(compiled))
        return 1;
      program = std::move(*compiled);
      FailureOr<std::unique_ptr<Engine>> made = makeExecutorEngine(*program);
      if (failed(made))
        return 1;
      engine = std::move(*made);
      params = exec::describeArguments(program->forward);
    }
    Trainer trainer(std::move(engine), config, opts, log);
    startTrainer(trainer, run, in);
    log.line(describe(config, exec::parameterCount(params)));
    FailureOr<MemoryReport> memory = memoryReportFor(*ctx, model);
    if (failed(memory))
      return 1;
    log.line(memoryReportLine(*memory));
    if (!trainLogged(trainer, log, run, in))
      return 1;
  } catch (const FormatError &e) {
    fail(e.what());
  } catch (const TrainError &e) {
    fail(e.what());
  } catch (const rt::DeviceError &e) {
    fail(e.what());
  } catch (const cuda::EmitError &e) {
    fail(e.what());
  } catch (const std::filesystem::filesystem_error &e) {
    fail(e.path1().string() + ": " + e.code().message());
  }
  return 0;
}

} // namespace gptc::cli
