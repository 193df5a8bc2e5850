//===- Emitter.h - one launch's kernel source (private) ---------*- C++ -*-===//
//
// Shared by the files of the CUDA emitter: EmitCUDA.cpp (the driver and the
// source assembly), EmitGlue.cpp (kernels printed whole: shape glue and
// fused elementwise bodies), EmitMultiTensor.cpp (kernels over many tensors),
// EmitTemplates.cpp (instantiations of the kernels/*.cuh templates),
// EmitFusedLayerNorm.cpp (the layernorms with a fused prologue or epilogue),
// EmitAttention.cpp (flash attention's kernels) and EmitGemmFallback.cpp
// (the GEMM epilogues' kernels).
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_LIB_TARGET_CUDA_EMITTER_H
#define GPTC_LIB_TARGET_CUDA_EMITTER_H

#include "gptc/Target/CUDA/EmitCUDA.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace gptc::cuda::detail {

/// The text of kernels/NAME, embedded at build time.
const char *embedded(const std::string &name);

/// Appends to p.kernels the rt::GemmFallback kernels its fused GEMMs could
/// need (EmitGemmFallback.cpp), and for sm_90a gptc's own wgmma GEMM where
/// a GELU GEMM fits it.
void addGemmFallbackKernels(rt::Program &p, const std::string &arch);

using rt::Buffer;
using rt::DType;
using rt::Launch;
using Shape = std::vector<int64_t>;

inline const char *ctype(DType t) {
  switch (t) {
  case DType::F32:
    return "float";
  case DType::BF16:
    return "bf16";
  case DType::F16:
    return "f16";
  case DType::I32:
    return "int";
  }
  return "?";
}

inline int64_t numel(const Shape &s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

inline Shape rowMajorStrides(const Shape &s) {
  Shape st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;)
    st[i - 1] = st[i] * s[i];
  return st;
}

/// A float constant as CUDA source that reads back to the same float.
inline std::string floatLiteral(double value) {
  float f = float(value);
  if (std::isnan(f))
    return "__int_as_float(0x7fc00000)";
  if (std::isinf(f))
    return f > 0 ? "__int_as_float(0x7f800000)" : "(-__int_as_float(0x7f800000))";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", double(f));
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  return s + "f";
}

inline std::string i64Literal(int64_t v) { return std::to_string(v) + "ll"; }

inline uint32_t toGrid(int64_t blocks) {
  return uint32_t(std::clamp<int64_t>(blocks, 1, int64_t(INT32_MAX)));
}

inline int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The buffer whose storage `id` uses (a reshape's view is its base's).
inline int storageOf(const rt::Program &p, int id) {
  while (p.buffers[id].viewOf >= 0)
    id = p.buffers[id].viewOf;
  return id;
}

/// One launch being emitted.
struct MultiTensorLayout; // EmitMultiTensor.cpp

/// The layernorm gradients' launch: at most 256 blocks of 8 warps (a row a
/// warp at a time), at 2 blocks an SM (kLayernormGradMinBlocks: at most
/// 128 registers). A block's dgamma/dbeta partial is summed with the others
/// of its group of kLayernormGradGroup blocks, then the groups' (each block
/// summing all 256 partials was a large part of the kernel: 512 blocks
/// were slower than 256 on an H100). Each warp's sums take 8·C bytes of
/// shared memory (12·C with an epilogue's bias gradient); a block takes at
/// most kLayernormGradSharedBytes, so that two fit in an H100's SM.
/// The staged form (EmitOptions::layernormStaged) adds a stage of a row of
/// x and one of dy a warp, and is emitted where the whole takes at most
/// kLayernormGradStagedSharedBytes: two blocks an SM of an H100's 228 KB,
/// 1 KB of each reserved (GPT-2: 8 warps of 9,216 + 4,608 bytes, 110,592).
constexpr int64_t kLayernormGradBlocks = 256, kLayernormGradMinBlocks = 2,
                  kLayernormGradGroup = 16,
                  kLayernormGradSharedBytes = 96 * 1024,
                  kLayernormGradStagedSharedBytes = 113 * 1024;

/// reduce_sum gives each thread a whole result where results have at most
/// this many terms (and there are many: EmitTemplates.cpp).
constexpr int64_t kReduceFewTerms = 32;

/// The rows a lane group of attention_row_dot takes, their loads issued
/// together (attentionRowDot's kRounds).
constexpr int kRowDotRounds = 4;

/// The elements a lane of the layernorm kernels takes at once
/// (RowLayout<C>::kW in layernorm.cuh).
inline int layernormChunk(int64_t C) { return C % 4 == 0 ? 4 : 1; }

class Emitter {
public:
  Emitter(const rt::Program &p, Launch &l, const EmitOptions &opts = {})
      : p(p), l(l), opts(opts) {}

  std::string run(const std::string &name);

  /// The bytes of module-scope scratch the source declares (deviceScratch):
  /// DeviceKernel::scratchBytes.
  int64_t scratchBytes = 0;

private:
  /// Declares `__device__ type name[count];` ahead of the kernel (count
  /// < 0: a scalar) and counts its bytes. type: float, double or unsigned.
  void deviceScratch(const std::string &type, const std::string &name,
                     int64_t count);
  /// Sets the layernorm gradients' launch (grid, block, dynamic shared
  /// memory) for `rows` rows of C and declares the scratch of their
  /// partials of `sums` column sums (dgamma, dbeta, an epilogue's) and
  /// arrival counters; the block's threads.
  int layernormGradLaunch(int64_t rows, int64_t C, int64_t sums);
  /// ", true" (EmitOptions::layernormStaged, rows in chunks of 4, and the
  /// stage within kLayernormGradStagedSharedBytes): the layernorm
  /// gradient's kStaged argument, its launch's (layernormGradLaunch) shared
  /// memory then grown by the stage (x's row and dy's: inputs 0 and 2);
  /// else "".
  std::string layernormGradStaging(int64_t C);
  /// The blocks an SM a layernorm gradient declares: kLayernormGradMinBlocks,
  /// or a denser twin's (EmitOptions::layernormBlocks).
  int layernormGradBlocks() const {
    return opts.layernormBlocks > 0 ? opts.layernormBlocks
                                    : int(kLayernormGradMinBlocks);
  }
  const Buffer &in(size_t i) const { return p.buffers[l.inputs.at(i)]; }
  const Buffer &out(size_t i) const { return p.buffers[l.outputs.at(i)]; }
  const char *tin(size_t i) const { return ctype(in(i).dtype); }
  const char *tout(size_t i) const { return ctype(out(i).dtype); }
  int64_t intAttr(const char *n, int64_t dflt) const {
    auto it = l.ints.find(n);
    return it == l.ints.end() ? dflt : it->second;
  }
  double floatAttr(const char *n, double dflt) const {
    auto it = l.floats.find(n);
    return it == l.floats.end() ? dflt : it->second;
  }
  [[noreturn]] void unsupported(const std::string &why) const {
    // (A launch of the kernel level alone, sort_ids, names its op too.)
    const std::string op = rt::launchOp(l);
    throw EmitError(
        "no CUDA kernel for " +
        (op == "gpt." + l.kernel ? op : l.kernel + " (of " + op + ")") +
        (l.loc.empty() ? "" : " at " + l.loc) + ": " + why);
  }
  void expectArity(size_t ins, size_t outs) const {
    if (l.inputs.size() != ins || l.outputs.size() != outs)
      unsupported("expected " + std::to_string(ins) + " inputs and " +
                  std::to_string(outs) + " outputs");
  }

  /// The wrapper's parameter list; __restrict__ unless an output shares
  /// storage with another operand (update writes parameters in place).
  std::string parameters() const;
  void begin(const std::string &name, int launchBounds, int minBlocks = 0);
  /// Opens a grid-stride loop over `n` elements with index `i`.
  void elementLoop(int64_t n);
  /// Lines computing `prefix0..` = the row-major digits of `index` in
  /// `shape`, for the dimensions > 1 that are `needed` (all if empty).
  void digits(const Shape &shape, const std::string &index,
              const std::string &prefix, const std::string &indent,
              const std::vector<bool> &needed = {});
  /// sum of digit_d · stride_d, for digits named `prefix` of `shape`.
  static std::string offsetExpr(const Shape &shape, const Shape &strides,
                                const std::string &prefix);
  /// The offset into a tensor of shape `operand` that broadcasts (numpy,
  /// from the right) to `shape`, for digits `prefix` of `shape`.
  static std::string broadcastOffset(const Shape &operand, const Shape &shape,
                                     const std::string &prefix);

  // EmitGlue.cpp
  void emitMap(); // cast
  void emitIota();
  void emitTranspose();
  void emitPad();
  void emitSlice();
  void emitSplit();
  void emitConcat();
  /// fused_elementwise, and cast as the identity body.
  void emitElementwise(const exec::ScalarProgram &body);
  // EmitMultiTensor.cpp
  void emitMultiTensor();
  void emitMultiTensorReduce();
  MultiTensorLayout multiTensorLayout();
  /// The tables and the code that finds chunk `chunk` (an expression: the
  /// chunks of 1024 elements run through the tensors in order) and its
  /// tensor's pointers; each line indented by `ind` more. The number of
  /// chunks.
  int64_t
  multiTensorHead(const MultiTensorLayout &m,
                  const std::vector<int64_t> &numels,
                  const std::vector<std::pair<std::string, std::string>> &outs,
                  const std::string &chunk = "i64(blockIdx.x)",
                  const std::string &ind = "");
  /// multiTensorHead's tables alone (kFirstBlock, kNumel, kPerTensor):
  /// the number of chunks.
  int64_t multiTensorTables(const MultiTensorLayout &m,
                            const std::vector<int64_t> &numels);
  /// multiTensorHead's code alone: `t`, the pointers `aJ` (and `outs`),
  /// the per-tensor constants and scalars `rJ`, `n` and `base`.
  void multiTensorPick(
      const MultiTensorLayout &m,
      const std::vector<std::pair<std::string, std::string>> &outs,
      const std::string &chunk, const std::string &ind);
  /// Whether every tensor's length is a multiple of 4: a thread then takes
  /// 4 consecutive elements with vector accesses.
  static bool multiTensorVectorizes(const std::vector<int64_t> &numels);
  /// Opens the per-element code: a loop over this thread's elements `i` with
  /// the per-tensor arguments as `rJ`, or (vec) a block over elements
  /// [i, i + 4) with them loaded as `xJ[4]` (or broadcast `sJ`).
  void multiTensorLoop(const MultiTensorLayout &m, bool vec,
                       const std::string &ind = "");
  /// In the vector case, inside `for (int e ...)`: the arguments as `rJ`.
  void multiTensorElement(const MultiTensorLayout &m,
                          const std::string &ind = "");
  /// The fused `body` at `width` consecutive elements [i, i + width) of
  /// `shape`, in one row (rows are a multiple of `width` long): argument a
  /// is launch input args[a], read with one access when it varies along the
  /// row and once otherwise, or, where args[a] < 0, the caller's
  /// `given[e]`. Result k goes to targets[k][e], or to `float yK[width]`
  /// (declared here) where targets[k] is empty.
  void chunkBody(const exec::ScalarProgram &body, const Shape &shape,
                 const std::vector<int> &args, int width,
                 const std::vector<std::string> &targets,
                 const std::string &ind);
  /// The body's instructions as `float rN = ...;` lines.
  void scalarCode(const exec::ScalarProgram &body, const std::string &indent);
  // EmitTemplates.cpp
  void emitEmbedding();
  void emitEmbeddingGrad();
  void emitEmbeddingGradSorted(bool addend, bool accumulate, size_t operands);
  void emitSortIds();
  void emitLayernorm();
  void emitLayernormGrad();
  void emitReduceSum();
  void emitAttentionBiasGrad();
  void emitCrossEntropy(bool withGrad);
  // EmitFusedLayerNorm.cpp
  void emitFusedLayernorm();
  void emitFusedLayernormGrad();
  // EmitAttention.cpp
  void emitFlashAttention(bool grad);
  void emitFlashAttentionQKV(bool grad);
  struct AttentionLayout;
  void emitAttention(const AttentionLayout &a, bool grad);
  void emitAttentionRowDot();

  const rt::Program &p;
  Launch &l;
  EmitOptions opts;
  /// The kernel templates the source takes, in this order (a header may
  /// use what the ones before it define).
  std::vector<std::string> headers;
  void useHeader(const std::string &h) {
    if (std::find(headers.begin(), headers.end(), h) == headers.end())
      headers.push_back(h);
  }
  std::ostringstream pre, os;
  std::string entry;
};

} // namespace gptc::cuda::detail

#endif // GPTC_LIB_TARGET_CUDA_EMITTER_H
