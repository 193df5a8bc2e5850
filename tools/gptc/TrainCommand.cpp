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
#include "gptc/Train/Trainer.h"

#include <cmath>
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

std::string describe(const char *what, const std::string &path,
                     const DataLoader &data) {
  return std::string(what) + " " + path + ": " +
         std::to_string(data.numTokens()) + " tokens, " +
         std::to_string(data.numWindows()) + " batches per epoch";
}
} // namespace

int runTrain(int argc, char **argv) {
  ModelOptions model;
  llvm::cl::opt<std::string> data(
      "data", desc("Training tokens: an llm.c shard or a nanoGPT .bin"),
      llvm::cl::Required, cat(gptcCategory));
  llvm::cl::opt<std::string> valData(
      "val-data", desc("Validation tokens (forward only)"), cat(gptcCategory));
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
  llvm::cl::opt<int64_t> steps("steps", desc("Optimizer steps"), init(50),
                               cat(gptcCategory));
  llvm::cl::opt<int64_t> gradAccum(
      "grad-accum", desc("Micro-batches per step (gradients are averaged)"),
      init(1), cat(gptcCategory));
  llvm::cl::opt<double> lr("lr", desc("Peak learning rate"), init(6e-4),
                           cat(gptcCategory));
  llvm::cl::opt<double> minLr("min-lr",
                              desc("Learning rate at the end of the cosine"),
                              init(6e-5), cat(gptcCategory));
  llvm::cl::opt<int64_t> warmup("warmup", desc("Linear warm-up steps"), init(0),
                                cat(gptcCategory));
  llvm::cl::opt<std::string> schedule(
      "lr-schedule",
      desc("After the warm-up: cosine (to --min-lr) or constant"),
      init("cosine"), cat(gptcCategory));
  llvm::cl::opt<double> weightDecay(
      "weight-decay", desc("AdamW weight decay (2-D parameters only)"),
      init(0.1), cat(gptcCategory));
  llvm::cl::opt<double> clip("clip",
                             desc("Clip the gradient's global norm to this; "
                                  "0 turns clipping off"),
                             init(1.0), cat(gptcCategory));
  llvm::cl::opt<uint64_t> seed(
      "seed", desc("Seed of the initialisation and of --shuffle"), init(1337),
      cat(gptcCategory));
  llvm::cl::opt<bool> shuffle(
      "shuffle", desc("Visit the batches of each epoch in a seeded order"),
      cat(gptcCategory));
  llvm::cl::opt<std::string> initFrom(
      "init-from",
      desc("Start from these weights: safetensors (HF names) or an llm.c "
           "model_*.bin"),
      cat(gptcCategory));
  llvm::cl::opt<std::string> ckptDir(
      "ckpt-dir", desc("Run folder: checkpoints step_<N>/ and log.txt"),
      cat(gptcCategory));
  llvm::cl::opt<int64_t> ckptEvery(
      "ckpt-every", desc("Checkpoint every N steps (and after the last)"),
      init(0), cat(gptcCategory));
  llvm::cl::opt<bool> resume(
      "resume", desc("Continue from the newest checkpoint in --ckpt-dir"),
      cat(gptcCategory));
  llvm::cl::opt<std::string> logDir(
      "log-dir", desc("Folder for log.txt when there is no --ckpt-dir"),
      cat(gptcCategory));
  llvm::cl::opt<int64_t> valEvery(
      "val-every",
      desc("Validate every N steps (always before the first and after the "
           "last)"),
      init(0), cat(gptcCategory));
  llvm::cl::opt<int64_t> valBatches(
      "val-batches", desc("Batches of --val-data per validation"), init(10),
      cat(gptcCategory));
  llvm::cl::opt<int64_t> maxSkips(
      "max-skips",
      desc("Stop after this many steps in a row with a non-finite loss or "
           "gradient norm (0: never)"),
      init(10), cat(gptcCategory));
  llvm::cl::opt<double> lossScale(
      "loss-scale",
      desc("--precision=fp16: the initial dynamic loss scale (GradScaler's "
           "init_scale)"),
      init(65536.0), cat(gptcCategory));
  llvm::cl::opt<int64_t> lossScaleWindow(
      "loss-scale-window",
      desc("--precision=fp16: finite steps in a row that double the loss "
           "scale (GradScaler's growth_interval)"),
      init(2000), cat(gptcCategory));
  parseCommandLine(argc, argv, "gptc train: train a model on token data\n",
                   /*withMLIROptions=*/true);

  if (!device.empty() && device != "cpu" && device != "cuda")
    fail("unknown device '" + device + "' (gptc train runs on: cpu, cuda)");
  if (!runtime.empty() && runtime != "executor" && runtime != "program")
    fail("unknown --runtime '" + runtime + "' (executor, program)");
  if (device == "cuda" && runtime == "executor")
    fail("--runtime=executor runs on the CPU only: use --device=cpu");
  kernelFlags.check();
  std::optional<LRSchedule::Kind> kind = parseScheduleKind(schedule);
  if (!kind)
    fail("unknown --lr-schedule '" + schedule + "' (cosine, constant)");
  auto atLeast = [](const llvm::cl::opt<int64_t> &opt, int64_t min) {
    if (opt < min)
      fail("--" + opt.ArgStr + " must be at least " + llvm::Twine(min) +
           ", got " + llvm::Twine(int64_t(opt)));
  };
  atLeast(steps, 1);
  atLeast(gradAccum, 1);
  atLeast(warmup, 0);
  atLeast(ckptEvery, 0);
  atLeast(valEvery, 0);
  atLeast(valBatches, 1);
  atLeast(maxSkips, 0);
  atLeast(lossScaleWindow, 1);
  if (!(lossScale > 0) || !std::isfinite(lossScale))
    fail("--loss-scale must be a positive number");
  if (!(lr >= 0) || !(minLr >= 0) || !(weightDecay >= 0) || !(clip >= 0))
    fail("--lr, --min-lr, --weight-decay and --clip must be non-negative");
  if (ckptEvery.getNumOccurrences() && ckptDir.empty())
    fail("--ckpt-every needs --ckpt-dir");
  if (resume && ckptDir.empty())
    fail("--resume needs --ckpt-dir");
  if (resume && !initFrom.empty())
    fail("--resume and --init-from exclude each other");
  if (valData.empty() &&
      (valEvery.getNumOccurrences() || valBatches.getNumOccurrences()))
    fail("--val-every and --val-batches need --val-data");

  TrainOptions opts;
  models::GPT2Config config = model.config();
  opts.batch = model.batch;
  opts.seq = model.seqLength();
  opts.steps = steps;
  opts.gradAccum = gradAccum;
  opts.schedule = {*kind, lr, minLr, warmup, steps};
  opts.optimizer = model.compileOptions();
  opts.optimizer.weightDecay = weightDecay;
  opts.optimizer.clip = clip;
  opts.seed = seed;
  opts.shuffle = shuffle;
  opts.data = data;
  opts.valData = valData;
  opts.ckptDir = ckptDir;
  opts.ckptEvery = ckptEvery;
  opts.valEvery = valEvery;
  opts.valBatches = valBatches;
  opts.maxSkips = maxSkips;
  opts.initLossScale = lossScale;
  opts.lossScaleWindow = lossScaleWindow;

  // A file-size limit should fail a write with EFBIG, which is reported
  // like a full disk, rather than kill the process.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    // Data and the run folder first: their errors come before compiling.
    DataLoader train(data, opts.batch, opts.seq, config.vocabSize, shuffle,
                     seed);
    std::optional<DataLoader> val;
    if (!valData.empty())
      val.emplace(valData, opts.batch, opts.seq, config.vocabSize, false, 0);
    std::string runDir = ckptDir.empty() ? logDir : ckptDir;
    std::string resumeFrom;
    if (!ckptDir.empty())
      resumeFrom = checkpointToResume(ckptDir, resume);
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
    if (!runDir.empty())
      std::filesystem::create_directories(runDir);
    RunLog log(runDir.empty() ? "" : runDir + "/log.txt");

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
    if (!resumeFrom.empty()) {
      trainer.resume(resumeFrom);
    } else if (!initFrom.empty()) {
      trainer.start(exec::loadParametersFromFile(params, initFrom), initFrom);
    } else {
      trainer.start(initParameters(trainer.parameters(), seed), "init");
    }

    log.line(describe(config, exec::parameterCount(params)));
    FailureOr<MemoryReport> memory = memoryReportFor(*ctx, model);
    if (failed(memory))
      return 1;
    log.line(memoryReportLine(*memory));
    log.line(describe("train", data, train));
    if (val)
      log.line(describe("val", valData, *val));
    if (!resumeFrom.empty())
      log.line("resuming from " + resumeFrom + " at step " +
               std::to_string(trainer.state().step));
    if (!trainer.run(train, val ? &*val : nullptr))
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
