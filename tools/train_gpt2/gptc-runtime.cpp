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
#include "gptc/Train/RunFlags.h"

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
  RunFlags run;
  run.data = flags.text("data", "");
  run.valData = flags.text("val-data", "");
  run.steps = flags.integer("steps", run.steps);
  run.gradAccum = flags.integer("grad-accum", run.gradAccum);
  run.lr = flags.real("lr", run.lr);
  run.minLr = flags.real("min-lr", run.minLr);
  run.warmup = flags.integer("warmup", run.warmup);
  run.schedule = flags.text("lr-schedule", run.schedule);
  run.seed = flags.unsignedInteger("seed", run.seed);
  run.shuffle = flags.boolean("shuffle");
  run.initFrom = flags.text("init-from", "");
  run.ckptDir = flags.text("ckpt-dir", "");
  run.ckptEvery = flags.integer("ckpt-every", run.ckptEvery);
  run.resume = flags.boolean("resume");
  run.logDir = flags.text("log-dir", "");
  run.valEvery = flags.integer("val-every", run.valEvery);
  run.valBatches = flags.integer("val-batches", run.valBatches);
  run.maxSkips = flags.integer("max-skips", run.maxSkips);
  run.lossScale = flags.real("loss-scale", run.lossScale);
  run.lossScaleWindow =
      flags.integer("loss-scale-window", run.lossScaleWindow);
  run.ckptEveryGiven = flags.has("ckpt-every");
  run.valEveryGiven = flags.has("val-every");
  run.valBatchesGiven = flags.has("val-batches");
  // The checks and messages of gptc train.
  if (std::string bad = checkRunFlags(run); !bad.empty())
    fail(bad);

  const models::GPT2Config &config = compiled.model;
  TrainOptions opts =
      trainOptions(run, compiled.batch, compiled.seq, compiled.optimizer);

  // Data and the run folder first, then the device: nothing is created
  // before everything that can be checked has been.
  RunInputs in = openRunInputs(run, opts, config.vocabSize);
  std::unique_ptr<rt::Backend> backend = makeBackend(device);
  int64_t params = 0;
  for (const ParamSpec &p : program.params)
    params += exec::numElements(p.shape);
  setMfu(opts, *backend, config, params);
  makeRunDir(in);
  RunLog log(in.runDir.empty() ? "" : in.runDir + "/log.txt");

  Trainer trainer(makeProgramEngine(program, *backend), config, opts, log);
  startTrainer(trainer, run, in);
  log.line(describe(compiled, params));
  log.line(programMemoryLine(program,
                             rt::asCudaBackend(backend.get()) != nullptr) +
           " | device " + backend->name());
  return trainLogged(trainer, log, run, in) ? 0 : 1;
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
