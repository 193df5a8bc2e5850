//===- Program.h - the kernel-level training program ------------*- C++ -*-===//
//
// The fused training step after lowering: one Launch is one kernel launch on
// the GPU (a cuBLASLt GEMM or a generated kernel), every value is a Buffer at
// a planned offset in one arena. This is what `gptc emit --stage=kernels`
// prints, what `gptc compile` writes into the training program, and what the
// runtime executes. No MLIR here: the training program reads it alone.
//
// Conventions (the contract between the lowering, the CUDA emitter, the CPU
// replay and the runtime):
// - A launch performs one gpt op: `kernel` is the op's name without "gpt."
//   ("matmul", "layernorm", "fused_elementwise", ...), `inputs` are the op's
//   operands in order and `outputs` its results in order. The op's
//   attributes keep their names: integer and bool attributes in `ints` (a
//   unit attribute is 1), float attributes in `floats`, integer arrays in
//   `lists`, float arrays in `floatLists` (multi_tensor_elementwise's
//   `per_tensor`: constant k of tensor t at k * num_tensors + t, body
//   arguments after the per-tensor elements and before the scalars).
//   Shapes and dtypes are the buffers'.
// - gpt.reshape is no launch: its result is a view (`viewOf`) of its operand.
//   Nor is a gpt.slice that keeps its operand's first bytes (the padded
//   lm_head gradient cut to the vocabulary): a view may be shorter than its
//   buffer, never longer.
// - gpt.constant is no launch: its result is a Constant buffer with `init`.
// - Buffers are shared across functions by role and binding: the parameter
//   "wte.weight" is one buffer that forward, grads and update all read; the
//   gradient the grads function returns is the buffer update reads.
// - update writes parameters and moments in place: its results with role
//   Param/AdamM/AdamV are the buffers of its matching arguments.
// - Under autocast, grads reads the weights' low-precision copies
//   (ParamCopy) that update writes beside the new weights; the padded
//   lm_head copy by its leading rows (a view), its zero rows never
//   written again. Whoever sets the weights sets the copies
//   (paramCopyBytes).
// - Gradient accumulation runs on the device: micro-batch 1 runs grads;
//   micro-batch k >= 2 runs grads_accumulate, grads' launches with each
//   gradient written into a temp, then one multi_tensor_elementwise launch
//   adding the temps to the Grad buffers in place (grad = grad + g_k). The
//   Grad buffers end up with ((g1 + g2) + g3) + ... in float32, the order
//   the executor sums in.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_RUNTIME_PROGRAM_H
#define GPTC_RUNTIME_PROGRAM_H

#include "gptc/Executor/ScalarProgram.h"
#include "gptc/Train/ParamSpec.h"

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gptc::rt {

enum class DType : uint8_t { F32, BF16, F16, I32 };
/// "f32", "bf16", "f16", "i32".
const char *dtypeName(DType t);
int64_t dtypeBytes(DType t);
/// The element of type t at `at` (little-endian bytes) as a double; bf16
/// and f16 widened exactly.
double elementValue(const uint8_t *at, DType t);
/// Host bytes of type t for float values: rounded to nearest, ties to even
/// (bf16, f16), or truncated to an integer (i32).
std::vector<uint8_t> encodeFloats(const std::vector<float> &v, DType t);

struct Buffer;
/// What ParamCopy buffer `copy` holds for a parameter of these float32
/// values (row-major, `paramShape`): each rounded to the copy's dtype, and
/// zero at every index outside the parameter's shape. Throws
/// std::invalid_argument if the copy is smaller or of another rank.
std::vector<uint8_t> paramCopyBytes(const Buffer &copy, const float *param,
                                    const std::vector<int64_t> &paramShape);

/// What a buffer holds and who binds it.
enum class Role : uint8_t {
  Temp,     ///< lives inside one run of one function; planned by liveness
  Param,    ///< float32 master weights, bound by parameter name
  Grad,     ///< a parameter's gradient: grads writes it, update reads it
  AdamM,    ///< first moment, bound by parameter name
  AdamV,    ///< second moment
  Input,    ///< "tokens" / "targets": the host uploads them per micro-batch
  Hyper,    ///< f32 scalar the host sets per run: "lr", "step", "grad_scale",
            ///< "loss_scale"
  Output,   ///< "loss", "logits", "grad_norm": the host reads them back
  Constant, ///< the bytes in `init`, uploaded once
  ParamCopy, ///< a parameter's bf16 (fp16) copy, bound by parameter name:
             ///< the parameter rounded, zero-padded to the buffer's shape
             ///< (gpt-weight-copies). grads reads it; update writes it, or a
             ///< view of its leading rows; the host makes it at load
             ///< (paramCopyBytes)
};
const char *roleName(Role r);

struct Buffer {
  std::string name; ///< for dumps: the binding, or the SSA value's name
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  Role role = Role::Temp;
  std::string binding; ///< parameter, input, hyper or output name
  int viewOf = -1;     ///< a view: this buffer's storage, from its start
  int64_t offset = -1; ///< byte offset in the arena (planMemory)
  std::vector<uint8_t> init; ///< Constant: its bytes, row-major

  int64_t numel() const;
  int64_t bytes() const;
};

/// A generated CUDA kernel (the CUDA emitter fills these).
struct DeviceKernel {
  std::string name;   ///< extern "C" entry point
  std::string source; ///< self-contained CUDA C++ (templates inlined)
  std::vector<std::string> fuses; ///< "gpt.layernorm at models/gpt2.cpp:57"
  std::string arch;   ///< arch of `cubin` ("sm_90a"), "" if none
  std::vector<uint8_t> cubin; ///< empty: NVRTC compiles at run time
  /// Module-scope __device__ scratch the source declares (grid-wide
  /// partials and arrival counters; the atomic attention backward's dq
  /// sums): device memory beside the arena, allocated when the module loads.
  int64_t scratchBytes = 0;
};

/// A kernel for a launch: which one, and how it is launched.
struct LaunchVariant {
  std::string label; ///< the flag value that picks it: "split", "wgmma"
  int deviceKernel = -1; ///< into Program::kernels
  uint32_t grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  uint32_t sharedBytes = 0;
  uint32_t cluster = 1; ///< blocks a cluster, along x (sm_90)
};

struct Launch {
  std::string kernel; ///< the op: "matmul", "fused_elementwise", ...
  std::vector<int> inputs, outputs; ///< buffer ids
  std::map<std::string, int64_t> ints;
  std::map<std::string, double> floats;
  std::map<std::string, std::vector<int64_t>> lists;
  std::map<std::string, std::vector<double>> floatLists;
  /// fused_elementwise, multi_tensor_elementwise, multi_tensor_reduce
  exec::ScalarProgram body;
  std::string loc;          ///< the op's source location, "file:line:col"

  // Filled by the CUDA emitter. A generated kernel takes the device
  // pointers of `inputs` then `outputs`, in order, and nothing else: shapes
  // and attributes are constants in its source.
  int deviceKernel = -1; ///< into Program::kernels; -1: cuBLASLt (matmul)
  uint32_t grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  uint32_t sharedBytes = 0;
  /// > 1: launched in clusters of this many blocks along x (which divides
  /// grid[0]); the blocks of a cluster share their shared memory (sm_90).
  uint32_t cluster = 1;
  /// Other kernels that compute the same results from the same operands
  /// (the attention algorithms the target has, for a program compiled with
  /// --attention-forward=auto or --attention-backward=auto). The CUDA
  /// runtime times each against the launch's own kernel at load and runs
  /// the fastest (CudaBackend.h); everything else runs the launch's own.
  /// `variant` labels the launch's own kernel when there are others.
  std::string variant;
  std::vector<LaunchVariant> variants;

  // Filled by planStreams (gptc compile --overlap-weight-grads); the CPU
  // backend runs every launch in order whatever these say, and so may the
  // GPU (launches are listed in an order that is a valid schedule).
  /// 0: the main stream, in order. 1: the side stream, which starts this
  /// launch once every earlier launch of the function was issued and runs
  /// it beside the main stream's next launches.
  int stream = 0;
  /// Stream 1: the main stream waits for this launch before launch `join`
  /// of its function (the function's launch count: at its end). Until then
  /// no other launch writes what it reads or touches what it writes, and
  /// planMemory keeps its buffers' bytes for it.
  int join = -1;
};

/// The launch's own kernel as a variant (labelled `l.variant`).
LaunchVariant ownVariant(const Launch &l);
/// Makes v the launch's own kernel (grid, block, shared bytes, cluster and
/// label).
void setOwnVariant(Launch &l, const LaunchVariant &v);
/// The launch's candidates: its own kernel first, then l.variants.
std::vector<LaunchVariant> launchCandidates(const Launch &l);

/// Launches that are one cuBLASLt GEMM, with or without epilogue work:
/// "matmul", "matmul_epilogue", "matmul_gelu_grad", "matmul_bias_grad".
bool isGemm(const std::string &kernel);

/// Launches that may run on the side stream (planStreams moves them, the
/// CUDA backend runs them there): GEMMs (the weight gradients) and
/// sort_ids (an embedding gradient's ids, sorted beside the forward).
inline bool runsBeside(const std::string &kernel) {
  return isGemm(kernel) || kernel == "sort_ids";
}

/// How an error line or report names a launch's op: "matmul at
/// models/gpt2.cpp:91:25", or the op alone where it has no location.
inline std::string opAt(const Launch &l) {
  return l.kernel + (l.loc.empty() ? "" : " at " + l.loc);
}

/// The least a launch costs, for the profile's floors: the bytes of its
/// operands and results, each read or written once, and the FLOPs of its
/// products. GEMMs: 2·M·N·K. Attention: the model's, 4·T·S·D a head
/// forward (halved when causal) and 2.5 times that backward, the five
/// products of FlashAttention-2 (gptc's backward runs seven). Elementwise
/// and reduction work counts 0: those launches are bound by their bytes.
struct LaunchCost {
  int64_t bytes = 0;
  double flops = 0;
};
struct Program;
LaunchCost launchCost(const Program &p, const Launch &l);

/// Per kernel of p.kernels, the most dynamic shared memory a launch of it
/// asks for (Launch::sharedBytes), or a GemmFallback kernel's
/// (gemmFallbackSharedBytes): what the runtime opts each function in to,
/// and what a block of it uses beside its static shared memory.
std::vector<uint32_t> dynamicSharedBytes(const Program &p);

/// The kernels the runtime runs after a GEMM whose fused epilogue cuBLASLt
/// has no algorithm for on the device at hand (the GEMM then runs with the
/// DEFAULT epilogue, or DGELU without its bias gradient), or that runs
/// faster that way (DGELU_BGRAD by default, and whatever GEMM tuning
/// timed faster: GPTC_GEMM_TUNE in CudaBackend.h). The CUDA emitter
/// adds the ones a program's GEMMs could need, from
/// lib/Target/CUDA/kernels/gemm_fallback.cuh; no launch names them. Unlike
/// generated kernels they take their sizes after their pointers:
///   Bias            (T *d, const T *bias, T *pre, i64 rows, i64 cols,
///                    i64 gelu)       d = act(d + bias) in place, pre: null
///                                    or d + bias
///   GeluGrad        (T *d, const T *pre, i64 n)   d = gelu'(pre) * d
///   Gelu            (T *out, const T *pre, i64 n)  out = gelu(pre) (out
///                                    may be pre), after a GEMM whose BIAS
///                                    epilogue wrote pre: GELU_AUX_BIAS
///                                    as cuBLASLt's plain bias epilogue and
///                                    one pass
///   ColumnPartials  (T *x, const T *pre, float *partial, i64 rows,
///                    i64 cols, i64 rowsPerChunk)   grid (ceil(cols / 256),
///                                    chunks); pre non-null: x = gelu'(pre)
///                                    * x first, in place (DGELU_BGRAD's
///                                    whole epilogue in one pass)
///   ColumnSums      (const float *partial, T *out, i64 chunks, i64 cols)
///                                    grid ceil(cols / 32)
/// And some that are the whole GEMM, gptc's own (kernels/gemm_wgmma.cuh,
/// sm_90a programs alone, bf16), ways GEMM tuning times against
/// cuBLASLt's; in tiles of 128 x 128 taken in turns by two warpgroups, a
/// [m, k], m and n multiples of 128, k of 64. They read a and b through
/// tensor maps in device memory (`const TensorMap *a, *b` below: 128
/// bytes each, encoded as wgmmaOperandMaps says):
///   WgmmaBiasGelu   (const TensorMap *a, *b, const T *bias, T *out,
///                    T *pre, i64 m, i64 n, i64 k)   pre = a·b + bias,
///                                    out = gelu(pre); b [k, n]
///   WgmmaGeluGrad   (const TensorMap *a, *b, const T *pre, T *out,
///                    i64 m, i64 n, i64 k)   out = gelu'(pre) · (a·bᵀ);
///                                    b [n, k]
///   WgmmaBias       (const TensorMap *a, *b, const T *bias, T *out,
///                    i64 m, i64 n, i64 k)   out = a·b + bias; b [k, n]
///                                    (the forward's projections without
///                                    GELU: c_attn's, the c_proj's)
///   WgmmaPlain      (const TensorMap *a, *b, T *out, i64 m, i64 n, i64 k)
///                                    out = a·bᵀ; b [n, k] (a plain matmul
///                                    with transpose_b: the backward's
///                                    input gradients, the lm_head's
///                                    logits): the same blocks without an
///                                    epilogue, so that tuning's times say
///                                    what the products cost alone
///   WgmmaGeluGradBias (const TensorMap *a, *b, const T *pre, T *out,
///                    float *partials, i64 m, i64 n, i64 k)
///                                    as WgmmaGeluGrad, with its bias
///                                    gradient's partial sums for
///                                    ColumnSums: partials [m/16, n] the
///                                    column sums of out's 16-row groups
/// And one for the weight gradients, stream-K (gemm_wgmma.cuh's
/// gemmWgmmaWeightGrad; m and n multiples of 128, k of 64):
///   WgmmaWeightGrad (const TensorMap *a, *b, const float *old, float *out,
///                    float *partials, unsigned *counters, i64 m, i64 n,
///                    i64 k)          out = aᵀ·b, or old + aᵀ·b where old
///                                    is non-null (accumulating; it may be
///                                    out), float32 [m, n]; a [k, m], b [k,
///                                    n] bf16 (a matmul with transpose_a);
///                                    the depth steps of all tiles cut
///                                    into gridDim.x spans, one a block
///                                    (paired: one a pair); partials 2 ·
///                                    gridDim.x of a block's rows of a
///                                    tile of floats (weightGradSlotBytes
///                                    each), counters 4 a block's rows of
///                                    a tile (8 in the wide and paired
///                                    tiles), zero before and after
/// and each again in tiles of 128 x 256 (WgmmaWide*), where n is a
/// multiple of 256; and the GELU ones (WgmmaBiasGelu, WgmmaGeluGrad,
/// WgmmaGeluGradBias) and the weight gradient's again in the wide tiles
/// taken by clusters of two blocks that share b's (WgmmaPaired*: m a
/// multiple of 256; launched
/// with the cluster-dimension attribute, gemmFallbackCluster). Each is
/// warp-specialized, one block an SM walking the tiles (grid at most the
/// tiles: (m / 128) · (n / 128) or (n / 256); paired, an even grid),
/// 1-D blocks of 384 threads (gemmFallbackThreads), with
/// kGemmWgmmaSharedBytes, kGemmWgmmaWideSharedBytes or
/// kGemmWgmmaPairedSharedBytes.
enum class GemmFallback {
  Bias,
  GeluGrad,
  Gelu,
  ColumnPartials,
  ColumnSums,
  WgmmaBiasGelu,
  WgmmaGeluGrad,
  WgmmaWideBiasGelu,
  WgmmaWideGeluGrad,
  WgmmaGeluGradBias,
  WgmmaWideGeluGradBias,
  WgmmaPlain,
  WgmmaWidePlain,
  WgmmaBias,
  WgmmaWideBias,
  WgmmaPairedBiasGelu,
  WgmmaPairedGeluGrad,
  WgmmaPairedGeluGradBias,
  WgmmaWeightGrad,
  WgmmaWideWeightGrad,
  WgmmaPairedWeightGrad
};
/// The counters a stream's weight-gradient GEMMs share (4 a 128 x 128
/// tile, 8 a 128 x 256 one: at most kWeightGradCounters / 4 tiles of 128
/// x 128 either way).
inline constexpr uint32_t kWeightGradCounters = 16384;
/// The wide blocks' kind of a wgmma GEMM (WgmmaBiasGelu:
/// WgmmaWideBiasGelu, ...).
inline GemmFallback wideWgmmaGemm(GemmFallback kind) {
  switch (kind) {
  case GemmFallback::WgmmaBiasGelu:
    return GemmFallback::WgmmaWideBiasGelu;
  case GemmFallback::WgmmaGeluGrad:
    return GemmFallback::WgmmaWideGeluGrad;
  case GemmFallback::WgmmaGeluGradBias:
    return GemmFallback::WgmmaWideGeluGradBias;
  case GemmFallback::WgmmaPlain:
    return GemmFallback::WgmmaWidePlain;
  case GemmFallback::WgmmaBias:
    return GemmFallback::WgmmaWideBias;
  case GemmFallback::WgmmaWeightGrad:
    return GemmFallback::WgmmaWideWeightGrad;
  default:
    return kind;
  }
}
/// The paired blocks' kind of a wgmma GEMM (WgmmaBiasGelu:
/// WgmmaPairedBiasGelu, ...); `kind` itself where it has none.
inline GemmFallback pairedWgmmaGemm(GemmFallback kind) {
  switch (kind) {
  case GemmFallback::WgmmaBiasGelu:
    return GemmFallback::WgmmaPairedBiasGelu;
  case GemmFallback::WgmmaGeluGrad:
    return GemmFallback::WgmmaPairedGeluGrad;
  case GemmFallback::WgmmaGeluGradBias:
    return GemmFallback::WgmmaPairedGeluGradBias;
  case GemmFallback::WgmmaWeightGrad:
    return GemmFallback::WgmmaPairedWeightGrad;
  default:
    return kind;
  }
}
/// Whether a wgmma GEMM is one of the paired blocks' (clusters of two).
inline bool isPairedWgmmaGemm(GemmFallback kind) {
  return kind == GemmFallback::WgmmaPairedBiasGelu ||
         kind == GemmFallback::WgmmaPairedGeluGrad ||
         kind == GemmFallback::WgmmaPairedGeluGradBias ||
         kind == GemmFallback::WgmmaPairedWeightGrad;
}
/// Whether a wgmma GEMM is one of the wide blocks' (128 x 256 tiles).
inline bool isWideWgmmaGemm(GemmFallback kind) {
  return kind == GemmFallback::WgmmaWideBiasGelu ||
         kind == GemmFallback::WgmmaWideGeluGrad ||
         kind == GemmFallback::WgmmaWideGeluGradBias ||
         kind == GemmFallback::WgmmaWidePlain ||
         kind == GemmFallback::WgmmaWideBias ||
         kind == GemmFallback::WgmmaWideWeightGrad;
}
/// Whether a wgmma GEMM is a weight gradient's (stream-K).
inline bool isWeightGradWgmmaGemm(GemmFallback kind) {
  return kind == GemmFallback::WgmmaWeightGrad ||
         kind == GemmFallback::WgmmaWideWeightGrad ||
         kind == GemmFallback::WgmmaPairedWeightGrad;
}
/// A weight-gradient GEMM's partial slot: a block's 128 rows of a tile of
/// floats, 128 or 256 columns.
inline uint32_t weightGradSlotBytes(GemmFallback kind) {
  return 128 * (kind == GemmFallback::WgmmaWeightGrad ? 128 : 256) * 4;
}
/// Whether a GemmFallback kernel is one of gptc's own wgmma GEMMs.
inline bool isWgmmaGemm(GemmFallback kind) {
  return kind == GemmFallback::WgmmaBiasGelu ||
         kind == GemmFallback::WgmmaGeluGrad ||
         kind == GemmFallback::WgmmaGeluGradBias ||
         kind == GemmFallback::WgmmaPlain || kind == GemmFallback::WgmmaBias ||
         kind == GemmFallback::WgmmaWeightGrad || isWideWgmmaGemm(kind) ||
         isPairedWgmmaGemm(kind);
}
/// How a wgmma GEMM reads an operand: through a tensor map (Hopper's TMA)
/// that the runtime encodes at load (cuTensorMapEncodeTiled): 2-D bf16,
/// `inner` elements a row (contiguous), `outer` rows `inner` · 2 bytes
/// apart, in boxes of 64 x `boxRows` elements (a box row is 128 bytes,
/// one row of wgmma's 128-byte swizzle, which the copies write).
struct WgmmaOperandMap {
  int64_t inner, outer;
  uint32_t boxRows;
};
/// a's map and b's for wgmma GEMM `kind` of m, n, k: a [m, k] in boxes of
/// 128 rows; b [n, k] (WgmmaGeluGrad, WgmmaGeluGradBias, WgmmaPlain and
/// their wide and paired twins: K-major) in boxes of the tile's 128 or 256
/// columns (paired: half of its 256, each block's share), or b [k, n]
/// (WgmmaBiasGelu, WgmmaBias and theirs: N-major) in boxes of 64 x 64;
/// WgmmaWeightGrad's a [k, m] (M-major) and b [k, n], both in boxes of 64 x
/// 64.
inline std::array<WgmmaOperandMap, 2>
wgmmaOperandMaps(GemmFallback kind, int64_t m, int64_t n, int64_t k) {
  if (isWeightGradWgmmaGemm(kind))
    return {WgmmaOperandMap{m, k, 64}, WgmmaOperandMap{n, k, 64}};
  const bool nMajorB = kind == GemmFallback::WgmmaBiasGelu ||
                       kind == GemmFallback::WgmmaWideBiasGelu ||
                       kind == GemmFallback::WgmmaPairedBiasGelu ||
                       kind == GemmFallback::WgmmaBias ||
                       kind == GemmFallback::WgmmaWideBias;
  const WgmmaOperandMap a{k, m, 128};
  if (nMajorB)
    return {a, WgmmaOperandMap{n, k, 64}};
  return {a, WgmmaOperandMap{k, n, isWideWgmmaGemm(kind) ? 256u : 128u}};
}
/// "gemm_fallback_bias_bf16", "gemm_fallback_column_sums_f32", ...,
/// "gemm_wgmma_bias_gelu_bf16", "gemm_wgmma_wide_gelu_grad_bf16".
std::string gemmFallbackKernel(GemmFallback kind, DType t);
/// How many (8-byte) arguments the GemmFallback kernel `name` takes, 0 if
/// `name` is none. Inline: the fake driver and host tests use it alone.
inline int gemmFallbackArgCount(std::string_view name) {
  for (auto [prefix, count] :
       {std::pair<std::string_view, int>{"gemm_fallback_bias_", 6},
        {"gemm_fallback_gelu_grad_", 3},
        {"gemm_fallback_gelu_", 3},
        {"gemm_fallback_column_partials_", 6},
        {"gemm_fallback_column_sums_", 4},
        {"gemm_wgmma_bias_gelu_", 8},
        {"gemm_wgmma_gelu_grad_bias_", 8},
        {"gemm_wgmma_gelu_grad_", 7},
        {"gemm_wgmma_wide_bias_gelu_", 8},
        {"gemm_wgmma_wide_gelu_grad_bias_", 8},
        {"gemm_wgmma_wide_gelu_grad_", 7},
        {"gemm_wgmma_paired_bias_gelu_", 8},
        {"gemm_wgmma_paired_gelu_grad_bias_", 8},
        {"gemm_wgmma_paired_gelu_grad_", 7},
        {"gemm_wgmma_plain_", 6},
        {"gemm_wgmma_wide_plain_", 6},
        {"gemm_wgmma_bias_", 7},
        {"gemm_wgmma_wide_bias_", 7},
        {"gemm_wgmma_weight_grad_", 9},
        {"gemm_wgmma_wide_weight_grad_", 9},
        {"gemm_wgmma_paired_weight_grad_", 9}})
    if (name.substr(0, prefix.size()) == prefix)
      return count;
  return 0;
}
/// Which of gptc's wgmma GEMMs a GEMM launch of p fits, with its m, n and
/// k: a bf16 matmul_epilogue with GELU that keeps its pre-activation (b
/// [k, n]), or a bf16 matmul_gelu_grad (b [n, k], transpose_b) without a
/// bias gradient or with one, or a plain bf16 matmul with transpose_b (b [n,
/// k]), or a bf16 matmul_epilogue with a bias alone (b [k, n]); neither
/// accumulating nor with a transposed a; m and n multiples of 128, k of
/// 64. Or a weight gradient (WgmmaWeightGrad): a matmul or a
/// matmul_bias_grad with transpose_a alone, a [k, m] and b [k, n] bf16
/// into float32 [m, n], accumulating or not, with at most
/// kWeightGradCounters / 4 tiles (a bias gradient the runtime sums after
/// it, as after a plain cuBLASLt GEMM). The emitter adds the kernel
/// for sm_90a where one fits; the runtime also checks the operands' alignment.
struct WgmmaGemmFit {
  GemmFallback kind; ///< WgmmaBiasGelu, WgmmaGeluGrad, WgmmaGeluGradBias,
                     ///< WgmmaPlain, WgmmaBias, WgmmaWeightGrad
  int64_t m, n, k;
  bool wide;   ///< n is a multiple of 256: the wide blocks fit too
  bool paired; ///< wide, m a multiple of 256, and a GELU kind or a weight
               ///< gradient: the paired blocks fit too
};
std::optional<WgmmaGemmFit> wgmmaGemmFit(const struct Program &p,
                                         const struct Launch &l);
/// The dynamic shared memory of gptc's wgmma GEMMs, the same in both block
/// shapes: six stages of four 8 KB tiles (taking turns) or four of six
/// (wide), then 8 warps' 16 x 40 staged floats and the barriers (96 bytes
/// padded to 1,024), and 1,008 bytes to align them to 1,024
/// (gemm_wgmma.cuh's figures, which the kernels' source asserts equal).
inline constexpr uint32_t kGemmWgmmaSharedBytes =
                              6 * 4 * 8192 + 8 * 16 * 40 * 4 + 1024 + 1024 - 16,
                          kGemmWgmmaWideSharedBytes =
                              4 * 6 * 8192 + 8 * 16 * 40 * 4 + 1024 + 1024 - 16;
/// The paired blocks': the wide ones', in the same layout.
inline constexpr uint32_t kGemmWgmmaPairedSharedBytes =
    kGemmWgmmaWideSharedBytes;
/// What a GemmFallback kernel `name` asks for beside its static shared
/// memory: the wgmma GEMMs' figures, else 0.
inline uint32_t gemmFallbackSharedBytes(std::string_view name) {
  if (name.substr(0, 18) == "gemm_wgmma_paired_")
    return kGemmWgmmaPairedSharedBytes;
  if (name.substr(0, 16) == "gemm_wgmma_wide_")
    return kGemmWgmmaWideSharedBytes;
  return name.substr(0, 11) == "gemm_wgmma_" ? kGemmWgmmaSharedBytes : 0;
}
/// The threads a block of GemmFallback kernel `name`: 384 for the wgmma
/// GEMMs (a warpgroup that copies, two that multiply), else 256.
inline unsigned gemmFallbackThreads(std::string_view name) {
  return name.substr(0, 11) == "gemm_wgmma_" ? 384 : 256;
}
/// The blocks of a cluster (along x) GemmFallback kernel `name` is
/// launched in: 2 for the paired wgmma GEMMs, else 1.
inline unsigned gemmFallbackCluster(std::string_view name) {
  return name.substr(0, 18) == "gemm_wgmma_paired_" ? 2 : 1;
}

struct Function {
  std::string name; ///< "forward", "grads", "update", "grads_accumulate"
  std::vector<Launch> launches;
  std::vector<int> arguments, results; ///< buffer ids, bound by role/binding
  /// update: launches [0, normLaunches) compute "grad_norm", the rest apply
  /// the step, so the host can skip a non-finite step before anything is
  /// written in place. -1 elsewhere.
  int normLaunches = -1;
};

/// Whether `l` adds its (first) result to that result's old value, which it
/// takes as its last input (grads_accumulate's GEMMs and embedding
/// gradients: LowerToKernels.h).
inline bool accumulates(const Launch &l) {
  auto it = l.ints.find("accumulate");
  return it != l.ints.end() && it->second != 0;
}

/// The dialect op a launch serves, as the kernels' headers and the
/// manifest name it: "gpt." and its kernel, but for sort_ids, a launch the
/// kernel level adds for an embedding_grad (sortEmbeddingIds), whose op it
/// names.
inline std::string launchOp(const Launch &l) {
  return l.kernel == "sort_ids" ? "gpt.embedding_grad" : "gpt." + l.kernel;
}

/// Whether launch i of f repeats one of grads': grads_accumulate's launches
/// are grads' on temps of their own, but for its accumulating GEMMs and its
/// last (the add). Reports count and checks run the repeats once, in grads.
inline bool repeatsGrads(const Function &f, size_t i) {
  return f.name == "grads_accumulate" && i + 1 < f.launches.size() &&
         !accumulates(f.launches[i]);
}

struct Program {
  /// "model", "precision", "batch", "seq", "pad_multiple", "n_layer",
  /// "n_head", "n_embd", "block_size", "vocab_size", "weight_decay", ...
  std::map<std::string, std::string> meta;
  std::vector<train::ParamSpec> params;
  std::vector<Buffer> buffers;
  std::vector<Function> functions;
  std::vector<DeviceKernel> kernels;
  int64_t arenaBytes = 0; ///< planMemory: the one allocation

  /// nullptr if there is none.
  const Function *function(std::string_view name) const;
  /// The buffer of this role and binding, or -1.
  int find(Role role, std::string_view binding) const;
  /// A parameter's gradient as the step's functions read and write it:
  /// its Grad buffer, or the view of the parameter's shape where that
  /// buffer is padded (a tied table's, which the lm_head's GEMM writes
  /// whole: LowerToKernels.h); -1 if there is none.
  int gradient(std::string_view param) const;
  /// The buffer whose bytes `id` uses: `id`, or the buffer a view (of a
  /// view ...) is of.
  int root(int id) const;
};

/// Where each buffer's bytes are in use within `f`, by launch index: from
/// the first launch that touches it or a view of it to the last, and on to
/// the launch before the join of a side-stream launch that touches it
/// (Launch::join - 1). Indexed by buffer id, for roots only; {-1, -1} for a
/// buffer `f` does not touch. What planMemory places temps by.
std::vector<std::pair<int, int>> liveRanges(const Program &p, const Function &f);

/// The text form `gptc emit --stage=kernels` prints: the buffers with their
/// offsets, then each function's launches, one per line.
std::string printProgram(const Program &p);
/// A buffer's type as the text form writes it: "f32[2x64x128]".
std::string bufferType(const Buffer &b);

/// The binary form the training program carries (CBOR of the structure,
/// behind a magic and a version); readProgram throws FormatError naming
/// `source` for anything it cannot read.
std::vector<uint8_t> writeProgram(const Program &p);
Program readProgram(const uint8_t *data, size_t size,
                    const std::string &source);

/// gpt-plan-streams (gptc compile --overlap-weight-grads): puts each GEMM
/// whose results no later launch of its function reads (a weight gradient:
/// only update reads it) on the side stream (Launch::stream 1), to run
/// beside the backward's next launches, which need nothing from it, and
/// joins it back (Launch::join) before the next launch it puts there, or
/// before an earlier launch that writes what it reads or touches what it
/// writes, or at the function's end. Run before planMemory, which keeps a
/// side launch's buffers until its join. Returns how many launches it moved.
int planStreams(Program &p);

/// gpt-plan-memory: gives every buffer its offset in one arena and sets
/// arenaBytes. Parameters, gradients, gradient sums, moments, inputs,
/// hypers, outputs and constants live for the whole run; a Temp lives from the launch that
/// writes it to the last launch that reads it (or a view of it) within its
/// function, and to the join of a side-stream launch that touches it
/// (planStreams), and functions never run at once, so their temps share
/// space. Offsets are 256-byte aligned.
void planMemory(Program &p);

} // namespace gptc::rt

#endif // GPTC_RUNTIME_PROGRAM_H
