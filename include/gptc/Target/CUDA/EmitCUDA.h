//===- EmitCUDA.h - CUDA C++ for a Program's launches -----------*- C++ -*-===//
//
// Every launch except the GEMMs (cuBLASLt) becomes one self-contained CUDA
// C++ kernel: the templates of lib/Target/CUDA/kernels/*.cuh (embedded at
// build time) instantiated by a generated `extern "C" __global__` wrapper
// whose shapes and attributes are constants. Launches with identical
// sources share one DeviceKernel. No MLIR: this works on rt::Program.
//
// The kernel ABI is Program.h's: the device pointers of the launch's inputs
// then its outputs, nothing else (the GEMM-epilogue fallback kernels, which
// no launch names, also take sizes: rt::GemmFallback). Kernels that reduce across blocks keep
// their partial sums in module-scope __device__ scratch (named in their
// source), so launches of one kernel must not run concurrently — the
// runtime runs a function's launches in order on one stream.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TARGET_CUDA_EMITCUDA_H
#define GPTC_TARGET_CUDA_EMITCUDA_H

#include "gptc/Runtime/Program.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace gptc::cuda {

/// A launch the emitter cannot generate a kernel for; one line naming the
/// launch and its source location.
struct EmitError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The bf16 tensor-core forward attention algorithms, by their
/// --attention-forward labels (attentionAlgorithmLabels, in this order:
/// the later ones last, so that the others keep their kernels' numbers).
/// The wgmma ones are warpgroup MMA where NVRTC compiles for sm_90a and D
/// is 32 or 64, else their mma.sync counterparts (the source picks by the
/// target: the runtime may compile it for another). Which is fastest only
/// a GPU says: sm_90a's default times them all at load (AttentionVariants).
enum class AttentionForward {
  /// mma.sync, 4 warps, 64 queries a block at 4 blocks an SM
  /// (attentionForwardMma); the default but on sm_90a.
  Mma,
  /// 8 warps, 128 queries a block where T is a multiple of 128: each key
  /// tile copied once for 128 queries (attentionForwardMma<..., 8>). On an
  /// H100 159.8 µs a launch against mma's 163.1.
  Mma128,
  /// 4 warps of 32 query rows (two row tiles a warp), 128 queries a block
  /// where T is a multiple of 128 (attentionForwardMma<..., 4, 2>): each k
  /// and v fragment serves both row tiles. As fast as mma on an H100.
  Mma2,
  /// Warpgroup MMA with the k and v tiles 128-byte swizzled
  /// (attentionForwardTensorCores): 116.5 µs a launch on an H200 at
  /// GPT-2's sizes against mma's 143.2 (docs/benchmarks.md, twenty-seventh
  /// session).
  Wgmma,
  /// Wgmma with a key tile's softmax under the last tile's output product
  /// (FlashAttention-3's overlap within a warpgroup;
  /// attentionForwardWgmmaOverlap), with a third V buffer.
  WgmmaOverlap,
  /// Mma with the next key tile's scores issued before this tile's
  /// softmax (attentionForwardMmaPipelined), at 3 blocks an SM.
  MmaPipe,
  /// Two warpgroups, 128 queries a block, sharing each key tile, where T
  /// is a multiple of 128 (mma128 where the target has no wgmma).
  Wgmma128,
  /// The keys 128 at a time, two 64-key tiles a step under one softmax
  /// (attentionForwardWgmmaKeys128), at 3 blocks an SM, where S is a
  /// multiple of 128.
  WgmmaK128,
  /// The scores' wgmma reads q from shared memory, no fragments held, so
  /// that the kernel fits 5 blocks an SM (attentionForwardWgmma's
  /// kSharedQuery).
  WgmmaSs,
};

/// The bf16 tensor-core backward attention algorithms, by their
/// --attention-backward labels (in this order); the wgmma ones as above.
enum class AttentionBackward {
  /// A dq block a query tile and a dk/dv block a key tile, the dq blocks
  /// recomputing the probabilities: seven products a tile pair, no
  /// atomics, deterministic (attentionBackwardSplit). The default but on
  /// sm_90a.
  Split,
  /// FlashAttention-2's: one block a key tile, dq summed in float32 with
  /// atomics (five products a tile pair; dq's sums then depend on the
  /// blocks' order), for D of 16, 32 or 64 (attentionBackwardAtomic).
  Atomic,
  /// Atomic with 128 keys a block of 8 warps, where S is a multiple of 128
  /// and D 32 or 64: each query tile copied, and its dq added to, once for
  /// 128 keys.
  Atomic128,
  /// Atomic with every product a warpgroup MMA
  /// (attentionBackwardTensorCores).
  Wgmma,
  /// Wgmma with the first half of a query tile's dv and dk products in
  /// flight through the second half's Sᵀ and dPᵀ (FlashAttention-3's
  /// overlap), at 2 blocks an SM: at 3, ptxas has not the registers and
  /// serializes every wgmma.
  WgmmaOverlap,
  /// Split with every product a warpgroup MMA
  /// (attentionBackwardSplitTensorCores): deterministic.
  WgmmaSplit,
  /// WgmmaSplit reading the rows each block keeps (q and dout, k and v)
  /// from shared memory rather than from fragments held in registers, at 4
  /// blocks an SM rather than 3.
  WgmmaSplitSs,
  /// WgmmaSplit whose dk/dv blocks also store each tile pair's dSᵀ in
  /// module scratch (bf16: B·H·T²/2 · 2 bytes, causal) and whose dq blocks
  /// sum dS·k from those, one product a tile pair rather than three
  /// (attentionBackwardStoredDsTensorCores): deterministic.
  WgmmaDs,
  /// Wgmma with each tile's dq share put in shared memory and added to the
  /// float32 sums by bulk reductions (the TMA unit's cp.reduce.async.bulk)
  /// rather than by the threads' 16-byte atomics; not deterministic.
  WgmmaBulk,
  /// WgmmaBulk with the shares added in one order every run
  /// (deterministic: each block's adds to a query tile's sums wait for the
  /// block before it, in two copies of the sums that the last block adds
  /// in order), the query tiles walked from the last down.
  WgmmaOrdered,
};

/// Which of a direction's algorithms the emitter gives each bf16
/// tensor-core attention launch.
enum class AttentionVariants {
  /// The one EmitOptions names.
  None,
  /// --attention-forward=auto, --attention-backward=auto: the default
  /// algorithm (mma, split) as the launch's own kernel and every other one
  /// the target has as rt::Launch::variants, which the runtime times at
  /// load. Algorithms that give a launch the same source (mma128 where T is
  /// not a multiple of 128, any of them for float32 attention) are one.
  All,
  /// --attention-backward=deterministic, sm_90a's default: All among the
  /// algorithms that give the same bits run to run
  /// (attentionAlgorithmIsDeterministicCandidate).
  Deterministic,
};

/// Choices of the emitter that the Program does not make.
struct EmitOptions {
  /// The bf16 attention algorithm of each direction where the variants
  /// below are None. gptc's CLI sets them from --attention-forward and
  /// --attention-backward (selectAttentionAlgorithm).
  AttentionForward attentionForward = AttentionForward::Mma;
  AttentionBackward attentionBackward = AttentionBackward::Split;
  /// Whether each direction's launches carry the other algorithms as
  /// variants timed at load; where they do, the algorithm above does not
  /// apply to that direction.
  AttentionVariants forwardVariants = AttentionVariants::None;
  AttentionVariants backwardVariants = AttentionVariants::None;
  /// The L2 bytes a group of heads of a tensor-core attention grid may
  /// share between its blocks (blockWork in attention.cuh): the groups are
  /// of the most heads that divide B·H and fit. An H100 has 50 MiB of L2,
  /// an A100 40; tests make it small to have several groups.
  int64_t attentionL2Bytes = int64_t(24) << 20;
  /// Kernels declare the blocks an SM they are written for
  /// (`__launch_bounds__(threads, blocks)`), which caps a thread's
  /// registers at 65536 / (threads · blocks). False: the threads alone,
  /// up to 255 registers. addUncappedVariants sets it for the twin of a
  /// kernel that spilled under its cap.
  bool capRegisters = true;
  /// > 0: the layernorm kernels (forward and gradient, fused or not)
  /// declare this many blocks an SM instead of their own number (none for
  /// the forwards, kLayernormGradMinBlocks for the gradients).
  /// addDenserVariants sets it for a twin.
  int layernormBlocks = 0;
  /// The bf16 loss gradient (cross_entropy_with_grad with its row in
  /// shared memory) in three passes, one job an element each: the max,
  /// the sum of exp, the gradient with 1/sum and the scale in the
  /// exponent (kernels/cross_entropy.cuh, kMaxFirst). emitCUDA gives every
  /// such launch this form as a variant labelled kMaxFirstLabel, its own
  /// kernel (the online form) labelled kOnlineLabel; set here, it is the
  /// own kernel.
  bool maxFirstCrossEntropy = false;
  /// 2 or 4, with maxFirstCrossEntropy: that form split across a cluster
  /// of this many blocks a row (sm_90), each stashing its slice of the row
  /// in 1/n of the shared memory, and the slices' (max, sum) pairs handed
  /// across the cluster's shared memory (crossEntropyWithGradCluster).
  /// emitCUDA gives every max-first launch these as variants labelled
  /// kCluster2Label and kCluster4Label on sm_90 and later.
  int crossEntropyCluster = 0;
  /// The layernorm gradients (fused or not) stage each warp's next row of
  /// x and dy in shared memory with cp.async while the warp finishes this
  /// one (kernels/layernorm.cuh, kStaged), with that much more dynamic
  /// shared memory. emitCUDA gives every such launch this form as a
  /// variant labelled kStagedLabel where it fits 2 blocks an SM
  /// (kLayernormGradStagedSharedBytes) and rows come in chunks of 4; set
  /// here, it is the own kernel there (elsewhere the unstaged one).
  bool layernormStaged = false;
};

/// The --attention-forward (forward) or --attention-backward labels of
/// AttentionForward's or AttentionBackward's values, in their order, the
/// default first. Those flags take these (and auto, and deterministic for
/// the backward).
const std::vector<std::string> &attentionAlgorithmLabels(bool forward);

/// One algorithm's label.
const char *attentionAlgorithmLabel(AttentionForward algorithm);
const char *attentionAlgorithmLabel(AttentionBackward algorithm);

/// Whether `label`'s algorithm is warpgroup MMA, which only sm_90a has.
bool attentionAlgorithmNeedsSm90a(const std::string &label);

/// Whether `label`'s algorithm gives the same bits run to run: every
/// forward, and the backwards without dq's float32 atomics (split,
/// wgmma-split, wgmma-split-ss, wgmma-ds) or with them in a fixed order
/// (wgmma-ordered).
bool attentionAlgorithmIsDeterministic(bool forward, const std::string &label);

/// Whether `label` is among AttentionVariants::Deterministic's candidates
/// (--attention-backward=deterministic, sm_90a's default): the
/// deterministic algorithms but wgmma-ds, whose stored dS (module scratch:
/// 214 MB for GPT-2 124M at B=16, T=1024) a program would carry whichever
/// kernel ran, and which no GPU has yet timed faster than wgmma-split
/// (docs/benchmarks.md, twenty-ninth session), and wgmma-ordered, whose
/// waits for other blocks no GPU has run yet (a block that waited for one
/// the GPU had not started would hang the step).
bool attentionAlgorithmIsDeterministicCandidate(bool forward,
                                                const std::string &label);

/// Sets opts to emit `label`'s algorithm in that direction
/// (EmitOptions::attentionForward or attentionBackward); false for a label
/// it does not know.
bool selectAttentionAlgorithm(EmitOptions &opts, bool forward,
                              const std::string &label);

/// Fills p.kernels (replacing what was there) and, for every launch but
/// the GEMMs, its deviceKernel, grid, block and sharedBytes (dynamic shared
/// memory: 0 but for the atomic attention backward), and its variants
/// (EmitOptions::forwardVariants). Appends
/// the rt::GemmFallback kernels the fused GEMMs could need, which no launch
/// names. `arch` is
/// checked (rt::isSupportedArch) and recorded in no kernel: the sources are
/// the same for every sm_80+ target.
void emitCUDA(rt::Program &p, const std::string &arch,
              const EmitOptions &opts = {});

/// The label of the variant addUncappedVariants adds, and of the own
/// kernel it is the twin of where that had none.
inline constexpr const char *kUncappedLabel = "uncapped";
inline constexpr const char *kCappedLabel = "capped";

/// For every launch whose own kernel is in `spilled` (indices into
/// p.kernels: ptxas spilled it) and declares blocks an SM: the same kernel
/// without them (EmitOptions::capRegisters false) as a variant labelled
/// "uncapped", with the same grid, block and shared memory, so the same
/// arithmetic. Which is faster (a cap's spills, or the registers' lower
/// occupancy) only a GPU can say: the runtime times them at load. A launch
/// without a label gets "capped". New kernels are appended, named after
/// the own kernel ("fused_layernorm_grad_1_uncapped"), one per source;
/// returns how many. `arch` and `opts` must be what emitCUDA had.
size_t addUncappedVariants(rt::Program &p, const std::string &arch,
                           const std::vector<bool> &spilled,
                           const EmitOptions &opts = {});

/// The labels of the loss gradient's two forms (maxFirstCrossEntropy).
inline constexpr const char *kMaxFirstLabel = "maxfirst";
inline constexpr const char *kOnlineLabel = "online";
/// The labels of its cluster forms (crossEntropyCluster 2 and 4).
inline constexpr const char *kCluster2Label = "cluster2";
inline constexpr const char *kCluster4Label = "cluster4";

/// The label of the variant addDenserVariants adds.
inline constexpr const char *kDenserLabel = "denser";

/// The label of the layernorm gradients' staged form (layernormStaged).
inline constexpr const char *kStagedLabel = "staged";

/// Whether a launch of `kind` is one of the layernorm kernels (a row a
/// warp, bound by DRAM latency at their occupancy): addDenserVariants'.
bool isLayernormKernel(const std::string &kind);

/// For every layernorm launch (isLayernormKernel) whose own kernel k has
/// blocks[k] > 0: the same kernel declaring blocks[k] blocks an SM
/// (EmitOptions::layernormBlocks: a register cap) as a variant labelled
/// "denser", with the same grid, block and shared memory, so the same
/// arithmetic. The caller sets blocks[k] to one more than the registers
/// let fit where shared memory and threads would allow it: whether the
/// warps gained are worth the registers lost (spills, fewer loads in
/// flight a warp) only a GPU can say, so the runtime times them at load.
/// New kernels are appended, named after the own kernel
/// ("fused_layernorm_grad_1_denser"), one per source; returns how many.
/// `arch` and `opts` must be what emitCUDA had.
size_t addDenserVariants(rt::Program &p, const std::string &arch,
                         const std::vector<int> &blocks,
                         const EmitOptions &opts = {});

/// The source of one launch's kernel with entry point `name` (tests, dumps).
/// Sets grid/block of `launch`.
std::string emitLaunch(const rt::Program &p, rt::Launch &launch,
                       const std::string &name, const EmitOptions &opts = {});

/// The text of an embedded template ("types.cuh", "layernorm.cuh", ...).
std::string kernelTemplate(const std::string &name);

} // namespace gptc::cuda

#endif // GPTC_TARGET_CUDA_EMITCUDA_H
