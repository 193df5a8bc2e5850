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

/// Choices of the emitter that the Program does not make.
struct EmitOptions {
  /// The bf16 forward attention on warpgroup MMA where NVRTC compiles for
  /// sm_90a and D is 32 or 64 (attentionForwardTensorCores), else on
  /// mma.sync everywhere. Off here; gptc's CLI sets it for sm_90a unless
  /// --attention-forward says otherwise: with its k and v tiles 128-byte
  /// swizzled it took 116.5 µs a launch on an H200 at GPT-2's sizes against
  /// mma.sync's 143.2 (docs/benchmarks.md, twenty-seventh session).
  bool wgmmaAttention = false;
  /// With wgmmaAttention: a key tile's softmax runs while the last tile's
  /// output product is in flight (FlashAttention-3's overlap within a
  /// warpgroup; attentionForwardWgmmaOverlap), with a third V buffer.
  /// --attention-forward=wgmma-overlap. Off by default: slower on an H100
  /// (246.8 µs a launch, as the wgmma forward's 246.0).
  bool overlapWgmmaForward = false;
  /// The mma.sync forward attention with 8 warps a block, 128 queries,
  /// where T is a multiple of 128 (attentionForwardMma<..., 8>): each key
  /// tile copied once for 128 queries rather than 64. Off by default: on
  /// an H100 it took 159.8 µs a launch against mma's 163.1, too little to
  /// move the defaults in the session that measured it. With
  /// wgmmaAttention (and not overlapWgmmaForward): two warpgroups a block,
  /// 128 queries, sharing each key tile (--attention-forward=wgmma128).
  bool wideAttentionForward = false;
  /// The mma.sync forward attention with 4 warps of 32 query rows (two
  /// row tiles a warp), 128 queries a block, where T is a multiple of 128
  /// (attentionForwardMma<..., 4, 2>): each k and v fragment read from
  /// shared memory serves both row tiles, half the ldmatrix a product.
  /// Off by default: as fast as mma on an H100 (163.0 µs against 163.1).
  /// Wins over wideAttentionForward.
  bool rowPairAttentionForward = false;
  /// The mma.sync forward attention (4 warps, 64 queries a block) with the
  /// next key tile's scores issued before this tile's softmax
  /// (attentionForwardMmaPipelined): the tensor cores' products and the
  /// softmax overlap within a warp, at 3 blocks an SM. The same bits as
  /// the default. Off by default: untimed on a GPU so far.
  bool pipelinedAttentionForward = false;
  /// With wgmmaAttention (and neither overlapWgmmaForward nor
  /// wideAttentionForward): the keys 128 at a time, two 64-key tiles a
  /// step under one softmax (attentionForwardWgmmaKeys128), at 3 blocks an
  /// SM, where S is a multiple of 128 (--attention-forward=wgmma-k128).
  /// Off by default: untimed on a GPU so far; sm_90a's default (auto) times
  /// it at load with the others.
  bool keys128AttentionForward = false;
  /// With wgmmaAttention (and none of the three above): the scores' wgmma
  /// reads q from shared memory, no fragments held, so that the kernel
  /// fits 5 blocks an SM (attentionForwardWgmma's kSharedQuery;
  /// --attention-forward=wgmma-ss). Off by default: untimed on a GPU so
  /// far; sm_90a's default (auto) times it at load with the others.
  bool sharedQueryWgmmaForward = false;
  /// The bf16 tensor-core backward attention as FlashAttention-2 does it,
  /// for D of 16, 32 or 64: one block a key tile, dq summed in float32 with
  /// atomics (five products a tile pair, against seven; dq's sums then
  /// depend on the blocks' order). Off by default: slower on an H100
  /// (docs/benchmarks.md).
  bool atomicAttentionBackward = false;
  /// With atomicAttentionBackward: 128 keys a block of 8 warps rather than
  /// 64 of 4, where S is a multiple of 128 and D 32 or 64 (each query tile
  /// copied, and its dq added to, once for 128 keys). Off by default:
  /// slower on an H100 (docs/benchmarks.md).
  bool wideAttentionBackward = false;
  /// The bf16 backward attention on warpgroup MMA where NVRTC compiles for
  /// sm_90a and D is 32 or 64 (attentionBackwardTensorCores: every product
  /// a wgmma, dq summed with atomics as atomicAttentionBackward does), else
  /// the atomic mma.sync backward. Wins over the two above. Off by default:
  /// slower on an H100 (docs/benchmarks.md).
  bool wgmmaAttentionBackward = false;
  /// With wgmmaAttentionBackward: the first half of a query tile's dv and
  /// dk products stay in flight through the second half's Sᵀ and dPᵀ
  /// (FlashAttention-3's overlap), at 2 blocks an SM: at 3, ptxas has not
  /// the registers and serializes every wgmma. --attention-backward=
  /// wgmma-overlap. Off by default: slower on an H100 (docs/benchmarks.md).
  bool overlapWgmmaBackward = false;
  /// The split backward (a dq block a query tile, a dk/dv block a key
  /// tile: no atomics, deterministic) with every product a warpgroup MMA,
  /// where NVRTC compiles for sm_90a and D is 32 or 64
  /// (attentionBackwardSplitTensorCores), else the split mma.sync kernel.
  /// --attention-backward=wgmma-split. Off by default: slower on an H100.
  bool splitWgmmaBackward = false;
  /// With splitWgmmaBackward (D of 32 or 64): its dk/dv blocks also store
  /// each tile pair's dSᵀ in module scratch (bf16: B·H·T²/2 · 2 bytes,
  /// causal) and its dq blocks sum dS·k from those, one product a tile
  /// pair rather than three (attentionBackwardStoredDsTensorCores):
  /// deterministic. --attention-backward=wgmma-ds.
  bool storedDsWgmmaBackward = false;
  /// With splitWgmmaBackward and not storedDsWgmmaBackward (D of 32 or
  /// 64): wgmma reads the rows each block keeps (q and dout, k and v) from
  /// shared memory rather than from fragments held in registers, at 4
  /// blocks an SM rather than 3. --attention-backward=wgmma-split-ss.
  bool sharedRowsWgmmaBackward = false;
  /// With wgmmaAttentionBackward and not overlapWgmmaBackward (D of 32 or
  /// 64): each tile's dq share goes to shared memory and is added to the
  /// float32 sums by bulk reductions (the TMA unit's cp.reduce.async.bulk)
  /// rather than by the threads' 16-byte atomics. --attention-backward=
  /// wgmma-bulk; not deterministic.
  bool bulkWgmmaBackward = false;
  /// With bulkWgmmaBackward: the shares added in one order every run
  /// (deterministic: each block's adds to a query tile's sums wait for the
  /// block before it, in two copies of the sums that the last block adds
  /// in order), the query tiles walked from the last down.
  /// --attention-backward=wgmma-ordered.
  bool orderedWgmmaBackward = false;
  /// --attention-forward=auto, --attention-backward=auto: each tensor-core
  /// attention launch of that direction gets the default algorithm (mma,
  /// split) as its own kernel and every other one the target has (mma128,
  /// mma2, wgmma and wgmma-overlap on sm_90a, mma-pipe, wgmma128 on
  /// sm_90a; atomic, atomic128, and wgmma, wgmma-overlap, wgmma-split,
  /// wgmma-split-ss, wgmma-ds, wgmma-bulk and wgmma-ordered on sm_90a) as
  /// rt::Launch::variants, which the
  /// runtime times at load. Algorithms that give a launch the same source
  /// (mma128 where T is not a multiple of 128, any of them for float32
  /// attention) are one. The flags above then do not apply to that direction.
  bool forwardVariants = false;
  bool backwardVariants = false;
  /// With backwardVariants: only the backward algorithms that give the
  /// same bits run to run (split and wgmma-split: no float atomics;
  /// attentionAlgorithmIsDeterministicCandidate) --
  /// --attention-backward=deterministic, sm_90a's default.
  bool deterministicVariants = false;
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
  /// The layernorm gradients (fused or not) stage each warp's next row of
  /// x and dy in shared memory with cp.async while the warp finishes this
  /// one (kernels/layernorm.cuh, kStaged), with that much more dynamic
  /// shared memory. emitCUDA gives every such launch this form as a
  /// variant labelled kStagedLabel where it fits 2 blocks an SM
  /// (kLayernormGradStagedSharedBytes) and rows come in chunks of 4; set
  /// here, it is the own kernel there (elsewhere the unstaged one).
  bool layernormStaged = false;
};

/// The bf16 attention algorithms of one direction by their flag values,
/// the default first: forward mma, mma128, mma2, wgmma, wgmma-overlap
/// (those two sm_90a), mma-pipe, wgmma128, wgmma-k128, wgmma-ss (sm_90a;
/// the later ones last, so that the others keep their kernels' numbers);
/// backward split, atomic, atomic128, wgmma, wgmma-overlap, wgmma-split,
/// wgmma-split-ss, wgmma-ds, wgmma-bulk, wgmma-ordered (the wgmma ones sm_90a).
/// --attention-forward and
/// --attention-backward take these (and auto); --attention-*=auto emits
/// them all.
const std::vector<std::string> &attentionAlgorithmLabels(bool forward);

/// Whether `label`'s algorithm is warpgroup MMA, which only sm_90a has.
bool attentionAlgorithmNeedsSm90a(const std::string &label);

/// Whether `label`'s algorithm gives the same bits run to run: every
/// forward, and the backwards without dq's float32 atomics (split,
/// wgmma-split, wgmma-split-ss, wgmma-ds) or with them in a fixed order
/// (wgmma-ordered).
bool attentionAlgorithmIsDeterministic(bool forward, const std::string &label);

/// Whether `label` is among EmitOptions::deterministicVariants' candidates
/// (--attention-backward=deterministic, sm_90a's default): the
/// deterministic algorithms but wgmma-ds, whose stored dS (module scratch:
/// 214 MB for GPT-2 124M at B=16, T=1024) a program would carry whichever
/// kernel ran, and which no GPU has yet timed faster than wgmma-split
/// (docs/benchmarks.md, twenty-ninth session), and wgmma-ordered, whose
/// waits for other blocks no GPU has run yet (a block that waited for one
/// the GPU had not started would hang the step).
bool attentionAlgorithmIsDeterministicCandidate(bool forward,
                                                const std::string &label);

/// Sets opts to emit `label`'s algorithm in that direction (clearing the
/// other algorithms' options); false for a label it does not know.
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
