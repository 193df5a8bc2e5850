//===- gptc-runtime.cpp - the training program ----------------------------===//
//
// What `gptc compile -o train` writes is this executable with a Program
// appended (gptc/Runtime/Bundle.h). It trains as `gptc train` does, with the
// same flags and the same output, but on the Program's kernels: on the GPU
// (--device=cuda, the default) or on the CPU backend (--device=cpu, the
// executor's kernels over the same memory plan). What the compiler fixed
// (model, batch, seq, precision, AdamW's betas, eps, weight decay and clip)
// is printed in the first line and cannot be changed by a flag.
//
// It links no MLIR or LLVM, so the file can be copied to a GPU machine that
// has the CUDA driver and nothing else.
//
//===----------------------------------------------------------------------===//

#include "Flags.h"

#include "gptc/Executor/Arguments.h"
#include "gptc/Formats/Error.h"
#include "gptc/Runtime/Bundle.h"
#include "gptc/Runtime/CudaBackend.h"
#include "gptc/Runtime/KernelCheck.h"
#include "gptc/Train/ProgramEngine.h"
#include "gptc/Train/Trainer.h"

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>

using namespace gptc;
using namespace gptc::train;
using gptc::runtime::Flags;
using gptc::runtime::UsageError;

namespace {

std::string programName = "gptc-runtime";

[[noreturn]] void fail(const std::string &message, int status = 1) {
  std::fflush(stdout);
  std::fprintf(stderr, "%s: error: %s\n", programName.c_str(), message.c_str());
  std::exit(status);
}

using K = Flags::Kind;
const std::vector<Flags::Spec> kFlags = {
    {"data", K::Value, "Training tokens: an llm.c shard or a nanoGPT .bin"},
    {"val-data", K::Value, "Validation tokens (forward only)"},
    {"device", K::Value, "Where to run: cuda (default) or cpu"},
    {"steps", K::Value, "Optimizer steps (default 50)"},
    {"grad-accum", K::Value,
     "Micro-batches per step, gradients averaged (default 1)"},
    {"lr", K::Value, "Peak learning rate (default 6e-4)"},
    {"min-lr", K::Value, "Learning rate at the end of the cosine (6e-5)"},
    {"warmup", K::Value, "Linear warm-up steps (default 0)"},
    {"lr-schedule", K::Value, "After the warm-up: cosine or constant"},
    {"seed", K::Value, "Seed of the initialisation and of --shuffle (1337)"},
    {"shuffle", K::Bool, "Visit the batches of each epoch in a seeded order"},
    {"init-from", K::Value,
     "Start from these weights: safetensors (HF names) or llm.c .bin"},
    {"ckpt-dir", K::Value, "Run folder: checkpoints step_<N>/ and log.txt"},
    {"ckpt-every", K::Value, "Checkpoint every N steps (and after the last)"},
    {"resume", K::Bool, "Continue from the newest checkpoint in --ckpt-dir"},
    {"log-dir", K::Value, "Folder for log.txt when there is no --ckpt-dir"},
    {"val-every", K::Value,
     "Validate every N steps (always before the first and after the last)"},
    {"val-batches", K::Value, "Batches of --val-data per validation (10)"},
    {"max-skips", K::Value,
     "Stop after this many non-finite steps in a row (10; 0: never)"},
    {"loss-scale", K::Value, "fp16: the initial dynamic loss scale (65536)"},
    {"loss-scale-window", K::Value,
     "fp16: finite steps in a row that double the loss scale (2000)"},
    {"check-kernels", K::Bool,
     "Run every launch on --device and on the CPU backend, compare, exit"},
    {"check-dump", K::Value,
     "With --check-kernels: write failing launches' outputs into this folder"},
    {"print-program", K::Bool, "Print the kernel schedule and exit"},
    {"help", K::Bool, "This list"},
    // Fixed when the program was compiled: recognised, to say so.
    {"model", K::Value, ""},
    {"n-layer", K::Value, ""},
    {"n-head", K::Value, ""},
    {"n-embd", K::Value, ""},
    {"block-size", K::Value, ""},
    {"vocab-size", K::Value, ""},
    {"batch", K::Value, ""},
    {"seq", K::Value, ""},
    {"precision", K::Value, ""},
    {"recompute", K::Value, ""},
    {"pad-multiple", K::Value, ""},
    {"weight-decay", K::Value, ""},
    {"clip", K::Value, ""},
};

/// The value a compile-time flag was fixed to, for the error that says so.
std::string compiledValue(const std::string &flag, const CompiledSettings &c) {
  auto num = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", x);
    return std::string(buf);
  };
  if (flag == "model")
    return c.model.name;
  if (flag == "n-layer")
    return std::to_string(c.model.nLayer);
  if (flag == "n-head")
    return std::to_string(c.model.nHead);
  if (flag == "n-embd")
    return std::to_string(c.model.nEmbd);
  if (flag == "block-size")
    return std::to_string(c.model.blockSize);
  if (flag == "vocab-size")
    return std::to_string(c.model.vocabSize);
  if (flag == "batch")
    return std::to_string(c.batch);
  if (flag == "seq")
    return std::to_string(c.seq);
  if (flag == "precision")
    return c.optimizer.precision;
  if (flag == "recompute")
    return c.optimizer.recomputeList();
  if (flag == "pad-multiple")
    return std::to_string(c.padMultiple);
  if (flag == "weight-decay")
    return num(c.optimizer.weightDecay);
  if (flag == "clip")
    return num(c.optimizer.clip);
  return "";
}

std::string describe(const CompiledSettings &c, int64_t params) {
  auto num = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", x);
    return std::string(buf);
  };
  const models::GPT2Config &m = c.model;
  return "model " + m.name + ": n_layer=" + std::to_string(m.nLayer) +
         " n_head=" + std::to_string(m.nHead) +
         " n_embd=" + std::to_string(m.nEmbd) +
         " block_size=" + std::to_string(m.blockSize) +
         " vocab_size=" + std::to_string(m.vocabSize) + ", " +
         std::to_string(params) +
         " parameters | compiled for batch=" + std::to_string(c.batch) +
         " seq=" + std::to_string(c.seq) +
         " precision=" + c.optimizer.precision +
         " recompute=" + c.optimizer.recomputeList() +
         " weight_decay=" + num(c.optimizer.weightDecay) +
         " clip=" + num(c.optimizer.clip) + " beta1=" + num(c.optimizer.beta1) +
         " beta2=" + num(c.optimizer.beta2) + " eps=" + num(c.optimizer.eps);
}

std::string describe(const char *what, const std::string &path,
                     const DataLoader &data) {
  return std::string(what) + " " + path + ": " +
         std::to_string(data.numTokens()) + " tokens, " +
         std::to_string(data.numWindows()) + " batches per epoch";
}

std::unique_ptr<rt::Backend> makeBackend(const std::string &device) {
  if (device == "cpu")
    return rt::makeCpuBackend();
  if (device == "cuda")
    return rt::makeCudaBackend();
  fail("unknown device '" + device + "' (cuda, cpu)");
}

int run(const Flags &flags) {
  // Our own file, by its name, so that errors name it.
  std::error_code ec;
  std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe", ec);
  std::optional<rt::Program> bundled =
      rt::readBundledProgram(ec ? "/proc/self/exe" : self.string());
  if (!bundled)
    fail("no training program is appended to this runtime; build one with "
         "`gptc compile --model=... -o FILE`");
  const rt::Program &program = *bundled;
  if (flags.boolean("print-program")) {
    std::cout << rt::printProgram(program);
    return 0;
  }
  CompiledSettings compiled = compiledSettings(program);
  for (const std::string &name : flags.given()) {
    std::string value = compiledValue(name, compiled);
    if (!value.empty())
      fail("--" + name + " is fixed when the program is compiled (this one: " +
           value + "); compile another with gptc compile --" + name + "=...");
  }

  std::string device = flags.text("device", "cuda");
  if (flags.has("check-dump") && !flags.boolean("check-kernels"))
    fail("--check-dump needs --check-kernels");
  if (flags.boolean("check-kernels")) {
    std::unique_ptr<rt::Backend> target = makeBackend(device);
    std::unique_ptr<rt::Backend> reference = rt::makeCpuBackend();
    rt::KernelCheckOptions options;
    options.dumpDir = flags.text("check-dump", "");
    int failed =
        rt::checkKernels(program, *target, *reference, std::cout, options);
    std::cout.flush();
    if (failed)
      fail(std::to_string(failed) + " launches differ from the CPU backend");
    return 0;
  }

  if (!flags.has("data"))
    fail("--data is required");
  std::string data = flags.text("data", "");
  std::string valData = flags.text("val-data", "");
  int64_t steps = flags.integer("steps", 50);
  int64_t gradAccum = flags.integer("grad-accum", 1);
  double lr = flags.real("lr", 6e-4), minLr = flags.real("min-lr", 6e-5);
  int64_t warmup = flags.integer("warmup", 0);
  std::string schedule = flags.text("lr-schedule", "cosine");
  uint64_t seed = flags.unsignedInteger("seed", 1337);
  bool shuffle = flags.boolean("shuffle");
  std::string initFrom = flags.text("init-from", "");
  std::string ckptDir = flags.text("ckpt-dir", "");
  int64_t ckptEvery = flags.integer("ckpt-every", 0);
  bool resume = flags.boolean("resume");
  std::string logDir = flags.text("log-dir", "");
  int64_t valEvery = flags.integer("val-every", 0);
  int64_t valBatches = flags.integer("val-batches", 10);
  int64_t maxSkips = flags.integer("max-skips", 10);
  double lossScale = flags.real("loss-scale", 65536.0);
  int64_t lossScaleWindow = flags.integer("loss-scale-window", 2000);

  // The checks and messages of gptc train.
  std::optional<LRSchedule::Kind> kind = parseScheduleKind(schedule);
  if (!kind)
    fail("unknown --lr-schedule '" + schedule + "' (cosine, constant)");
  auto atLeast = [&](const char *name, int64_t value, int64_t min) {
    if (value < min)
      fail(std::string("--") + name + " must be at least " +
           std::to_string(min) + ", got " + std::to_string(value));
  };
  atLeast("steps", steps, 1);
  atLeast("grad-accum", gradAccum, 1);
  atLeast("warmup", warmup, 0);
  atLeast("ckpt-every", ckptEvery, 0);
  atLeast("val-every", valEvery, 0);
  atLeast("val-batches", valBatches, 1);
  atLeast("max-skips", maxSkips, 0);
  atLeast("loss-scale-window", lossScaleWindow, 1);
  if (!(lossScale > 0) || !std::isfinite(lossScale))
    fail("--loss-scale must be a positive number");
  if (!(lr >= 0) || !(minLr >= 0))
    fail("--lr and --min-lr must be non-negative");
  if (flags.has("ckpt-every") && ckptDir.empty())
    fail("--ckpt-every needs --ckpt-dir");
  if (resume && ckptDir.empty())
    fail("--resume needs --ckpt-dir");
  if (resume && !initFrom.empty())
    fail("--resume and --init-from exclude each other");
  if (valData.empty() && (flags.has("val-every") || flags.has("val-batches")))
    fail("--val-every and --val-batches need --val-data");

  TrainOptions opts;
  const models::GPT2Config &config = compiled.model;
  opts.batch = compiled.batch;
  opts.seq = compiled.seq;
  opts.steps = steps;
  opts.gradAccum = gradAccum;
  opts.schedule = {*kind, lr, minLr, warmup, steps};
  opts.optimizer = compiled.optimizer;
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

  // Data and the run folder first, then the device: nothing is created
  // before everything that can be checked has been.
  DataLoader train(data, opts.batch, opts.seq, config.vocabSize, shuffle, seed);
  std::optional<DataLoader> val;
  if (!valData.empty())
    val.emplace(valData, opts.batch, opts.seq, config.vocabSize, false, 0);
  std::string runDir = ckptDir.empty() ? logDir : ckptDir;
  std::string resumeFrom;
  if (!ckptDir.empty())
    resumeFrom = checkpointToResume(ckptDir, resume);
  std::unique_ptr<rt::Backend> backend = makeBackend(device);
  int64_t params = 0;
  for (const ParamSpec &p : program.params)
    params += exec::numElements(p.shape);
  setMfu(opts, *backend, config, params);
  if (!runDir.empty())
    std::filesystem::create_directories(runDir);
  RunLog log(runDir.empty() ? "" : runDir + "/log.txt");

  Trainer trainer(makeProgramEngine(program, *backend), config, opts, log);
  if (!resumeFrom.empty()) {
    trainer.resume(resumeFrom);
  } else if (!initFrom.empty()) {
    std::vector<exec::ArgumentInfo> args;
    for (const ParamSpec &p : program.params)
      args.push_back({exec::ArgumentInfo::Kind::Param, p.name, p.shape});
    trainer.start(exec::loadParametersFromFile(args, initFrom), initFrom);
  } else {
    trainer.start(initParameters(program.params, seed), "init");
  }

  log.line(describe(compiled, params));
  log.line(programMemoryLine(program,
                             rt::asCudaBackend(backend.get()) != nullptr) +
           " | device " + backend->name());
  log.line(describe("train", data, train));
  if (val)
    log.line(describe("val", valData, *val));
  if (!resumeFrom.empty())
    log.line("resuming from " + resumeFrom + " at step " +
             std::to_string(trainer.state().step));
  if (!trainer.run(train, val ? &*val : nullptr))
    return 1;
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc > 0) {
    programName = argv[0];
    size_t slash = programName.rfind('/');
    if (slash != std::string::npos)
      programName = programName.substr(slash + 1);
  }
  Flags flags(kFlags);
  try {
    flags.parse(argc, argv);
    if (flags.boolean("help")) {
      std::cout << "usage: " << programName
                << " --data=TOKENS [options]: train the program compiled "
                   "into this file\n"
                << flags.help();
      return 0;
    }
  } catch (const UsageError &e) {
    fail(e.what(), 2);
  }
  // A file-size limit should fail a write with EFBIG, which is reported
  // like a full disk, rather than kill the process.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    return run(flags);
  } catch (const UsageError &e) {
    fail(e.what(), 2);
  } catch (const FormatError &e) {
    fail(e.what());
  } catch (const TrainError &e) {
    fail(e.what());
  } catch (const rt::DeviceError &e) {
    fail(e.what());
  } catch (const std::filesystem::filesystem_error &e) {
    fail(e.path1().string() + ": " + e.code().message());
  } catch (const std::bad_alloc &) {
    fail("out of host memory");
  }
}
