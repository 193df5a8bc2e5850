//===- CudaGemms.cpp - gpt.matmul on cuBLASLt, and GEMM tuning ------------===//
//
// planGemm makes a gpt.matmul launch a cuBLASLt plan: the column-major
// views of its row-major buffers (mapMatmul), its epilogue fused as far as
// cuBLASLt has an algorithm for it, the rest as rt::GemmFallback kernels
// after it, and the other ways to that epilogue (cuBLASLt's and gptc's
// share of it, whole or in loops of rows) that tune() times at load
// against its own plan. runGemm runs a plan.
//
//===----------------------------------------------------------------------===//

#include "CudaBackendImpl.h"

namespace gptc::rt {

GemmMapping mapMatmul(const Buffer &a, const Buffer &b, const Buffer &out,
                      bool ta, bool tb, const std::string &where) {
  size_t ra = a.shape.size(), rb = b.shape.size();
  if (ra < 2 || (rb != 2 && rb != ra))
    throw DeviceError(where + ": matmul operand ranks " + std::to_string(ra) +
                      " and " + std::to_string(rb));
  int64_t M = ta ? a.shape[ra - 1] : a.shape[ra - 2];
  int64_t K = ta ? a.shape[ra - 2] : a.shape[ra - 1];
  int64_t kb = tb ? b.shape[rb - 1] : b.shape[rb - 2];
  int64_t N = tb ? b.shape[rb - 2] : b.shape[rb - 1];
  int64_t batch = 1;
  for (size_t i = 0; i + 2 < ra; ++i)
    batch *= a.shape[i];
  if (kb != K || out.numel() != batch * M * N ||
      (rb == ra && b.numel() != batch * K * N))
    throw DeviceError(where + ": matmul shapes do not agree");

  GemmMapping g;
  if (batch > 1 && rb == 2) {
    if (!ta) {
      M *= batch; // a's batch rows stack into one [batch*M, K] matrix
    } else {
      g.loops = batch;
      g.rightLoopStride = M * K;
      g.outLoopStride = M * N;
    }
  } else if (batch > 1) {
    g.batch = batch;
    g.leftStride = K * N;
    g.rightStride = M * K;
    g.outStride = M * N;
  }
  g.transLeft = tb;
  g.transRight = ta;
  g.m = N;
  g.n = M;
  g.k = K;
  // Column-major views of the row-major buffers: stored [r, c] is rows = c,
  // cols = r, ld = c.
  g.leftRows = tb ? K : N;
  g.leftCols = tb ? N : K;
  g.leftLd = g.leftRows;
  g.rightRows = ta ? M : K;
  g.rightCols = ta ? K : M;
  g.rightLd = ta ? M : K;
  g.outLd = N;
  return g;
}

} // namespace gptc::rt

#ifdef GPTC_HAVE_CUDA_HEADERS

#include "gptc/Formats/AtomicFile.h"
#include "gptc/Runtime/NVRTC.h"
#include "gptc/Support/Sha256.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>
#include <utility>

namespace gptc::rt::detail {

std::vector<int64_t> envChunkBytes() {
  const char *v = std::getenv("GPTC_GEMM_CHUNK_BYTES");
  if (!v || !*v)
    return {int64_t(6) << 20, int64_t(12) << 20, int64_t(24) << 20};
  std::vector<int64_t> sizes;
  for (std::string_view rest = v; !rest.empty();) {
    size_t comma = rest.find(',');
    std::string word(rest.substr(0, comma));
    char *end = nullptr;
    long long n = std::strtoll(word.c_str(), &end, 10);
    if (word.empty() || *end || n < 0)
      throw DeviceError(std::string("GPTC_GEMM_CHUNK_BYTES=") + v +
                        ": expected byte counts separated by commas (0: no "
                        "row-chunked GEMMs)");
    if (n > 0)
      sizes.push_back(n);
    rest = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
  }
  return sizes;
}

namespace {

cudaDataType_t cudaType(DType t) {
  switch (t) {
  case DType::F32:
    return CUDA_R_32F;
  case DType::BF16:
    return CUDA_R_16BF;
  case DType::F16:
    return CUDA_R_16F;
  case DType::I32:
    break;
  }
  throw DeviceError("cuBLASLt matmul on i32 buffers");
}

/// The largest power of two dividing `x`, at most 256 (cuBLASLt's alignment
/// preferences).
uint32_t alignmentOf(uint64_t x) {
  return x == 0 ? 256u : uint32_t(std::min<uint64_t>(x & (~x + 1), 256));
}

/// How many rows each partial sum of a bias gradient's column sums takes
/// (gemmFallbackColumnPartials, blocks of 256 columns): the fewest rows,
/// from 64 up by doubling, that make at most kColumnPartialBlocks blocks
/// (one wave on an H100 or H200 at 4 blocks an SM), so that each block
/// keeps rows in flight through several rounds and the second pass has
/// few partials to add (GPT-2's 16,384 rows: 128 for 768 columns, 512 for
/// 2,304 and 3,072). At 64 rows for all, 4 in flight, c_fc's weight
/// gradient as a plain GEMM and the two passes took 0.166 ms a run against
/// cuBLASLt's BGRADA's 0.137 (H200, a6be447), the GEMM alone about 0.1.
/// More where the partials would not fit the cuBLASLt workspace or a
/// grid's y.
int64_t partialRows(int64_t rows, int64_t cols) {
  constexpr int64_t kColumnPartialBlocks = 512;
  const int64_t columnBlocks = (cols + 255) / 256;
  int64_t perChunk = 64;
  while ((perChunk < rows && columnBlocks * ((rows + perChunk - 1) / perChunk) >
                                 kColumnPartialBlocks) ||
         ((rows + perChunk - 1) / perChunk) * cols * 4 >
             int64_t(kWorkspaceBytes) ||
         (rows + perChunk - 1) / perChunk > 65535)
    perChunk *= 2;
  return perChunk;
}

/// The rows a loop of a row-chunked GEMM takes: the most, a multiple of
/// `multiple`, that divide `rows` into two or more loops and whose
/// `rowBytes` each come to at most `bytes`; 0 if none does.
int64_t rowChunk(int64_t rows, int64_t rowBytes, int64_t bytes,
                 int64_t multiple) {
  const int64_t most =
      std::min(bytes / std::max<int64_t>(rowBytes, 1), rows / 2);
  for (int64_t r = most / multiple * multiple; r >= multiple; r -= multiple)
    if (rows % r == 0)
      return r;
  return 0;
}

/// What tuning chose for a GEMM: which of its ways to the epilogue (0: its
/// own plan) with which of that way's candidates, and the ms a GEMM (with
/// the kernels after it) of the heuristic's first choice and of this one.
struct GemmChoice {
  size_t way = 0, index = 0;
  double first = 0, best = 0;
};

/// Where a GEMM's tuning choice is kept between runs:
/// kernelCacheDir()/gemms/KEY, KEY the SHA-256 of the device (name and
/// arch), the cuBLASLt version and each way's tuning key, epilogue and
/// candidates (so another heuristic's list is timed afresh). "" when there
/// is no cache directory.
std::string gemmChoiceFile(const std::string &deviceName,
                           const std::string &deviceArch, size_t ltVersion,
                           const std::vector<GemmPlan *> &ways) {
  const std::string dir = kernelCacheDir();
  if (dir.empty())
    return {};
  Sha256 h; // fields separated by NUL, as variantChoiceFile's
  auto field = [&](const std::string &s) { h.update(s.c_str(), s.size() + 1); };
  field("gptc gemm choice 1");
  field(deviceName);
  field(deviceArch);
  field(std::to_string(ltVersion));
  for (const GemmPlan *w : ways) {
    field(w->tuneKey);
    field(w->way);
    field(std::to_string(w->candidates.size()));
    for (const cublasLtMatmulAlgo_t &a : w->candidates)
      h.update(&a, sizeof a);
  }
  return dir + "/gemms/" + h.hexDigest();
}

/// The kept choice ("WAY INDEX FIRST BEST"); false when there is none, or
/// it names no candidate of `ways`.
bool readGemmChoice(const std::string &path,
                    const std::vector<GemmPlan *> &ways, GemmChoice &c) {
  std::ifstream in(path);
  GemmChoice read;
  if (path.empty() || !in ||
      !(in >> read.way >> read.index >> read.first >> read.best) ||
      read.way >= ways.size() ||
      read.index >= ways[read.way]->candidates.size())
    return false;
  c = read;
  return true;
}

void saveGemmChoice(const std::string &path, const GemmChoice &c) {
  char text[96];
  std::snprintf(text, sizeof text, "%zu %zu %.6f %.6f\n", c.way, c.index,
                c.first, c.best);
  keepInCache(path, text);
}

/// A cuBLASLt call's failure as one line naming the launch and the call.
void checkLt(const Lt &lt, cublasStatus_t s, const std::string &label,
             const char *what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw DeviceError(label + ": " + what +
                      " failed: " + lt.cublasLtGetStatusName(s));
}

using PreferenceOwner =
    std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                    cublasStatus_t (*)(cublasLtMatmulPreference_t)>;

/// What the heuristic may choose from: algorithms within cuBLASLt's
/// workspace and the operands' alignments (left, right, and the result's
/// for C and D).
PreferenceOwner gemmPreference(const Lt &lt, const uint32_t (&align)[3],
                               const std::string &label) {
  cublasLtMatmulPreference_t pref = nullptr;
  checkLt(lt, lt.cublasLtMatmulPreferenceCreate(&pref), label,
          "cublasLtMatmulPreferenceCreate");
  PreferenceOwner owner(pref, lt.cublasLtMatmulPreferenceDestroy);
  uint64_t wsBytes = kWorkspaceBytes;
  cublasLtMatmulPreferenceAttributes_t alignAttr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  checkLt(lt,
          lt.cublasLtMatmulPreferenceSetAttribute(
              pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsBytes,
              sizeof(wsBytes)),
          label, "setting MAX_WORKSPACE_BYTES");
  for (int i = 0; i < 4; ++i)
    checkLt(lt,
            lt.cublasLtMatmulPreferenceSetAttribute(
                pref, alignAttr[i], &align[std::min(i, 2)], sizeof(uint32_t)),
            label, "setting MIN_ALIGNMENT");
  return owner;
}

/// Checks a GEMM launch's operands and results against its kind's;
/// returns whether it accumulates into its result. The operands: a, b
/// first; then the epilogue's.
///   matmul            a, b              -> result
///   matmul_epilogue   a, b, bias        -> result [, pre-activation]
///   matmul_gelu_grad  a, b, pre         -> result [, bias gradient]
///   matmul_bias_grad  a, b              -> result, bias gradient
bool checkGemmOperands(const Launch &l, const std::string &label) {
  struct Arity {
    const char *kernel;
    size_t inputs, minOutputs, maxOutputs;
    const char *says;
  };
  static const Arity arities[] = {
      {"matmul", 2, 1, 1, "takes 2 operands and gives 1 result"},
      {"matmul_epilogue", 3, 1, 2,
       "takes a, b and a bias and gives 1 or 2 results"},
      {"matmul_gelu_grad", 3, 1, 2,
       "takes a, b and the pre-activation and gives 1 or 2 results"},
      {"matmul_bias_grad", 2, 2, 2,
       "takes a and b and gives the product and the bias gradient"}};
  // With `accumulate` (grads_accumulate's weight gradients) the result's
  // old value comes after the operands: the result's own buffer, which the
  // GEMM adds its product to (beta = 1).
  const bool accumulate = accumulates(l);
  if (accumulate && (l.kernel != "matmul" && l.kernel != "matmul_bias_grad"))
    throw DeviceError(label + ": of the GEMMs only matmul and "
                              "matmul_bias_grad accumulate into their result");
  for (const Arity &ar : arities)
    if (l.kernel == ar.kernel &&
        (l.inputs.size() != ar.inputs + (accumulate ? 1 : 0) ||
         l.outputs.size() < ar.minOutputs || l.outputs.size() > ar.maxOutputs))
      throw DeviceError(label + ": a " + l.kernel + " " + ar.says +
                        (accumulate ? ", and its result's old value" : ""));
  if (accumulate && l.inputs.back() != l.outputs[0])
    throw DeviceError(label + ": an accumulating " + l.kernel +
                      " takes its own result as its last operand");
  return accumulate;
}

} // namespace

GemmPlan CudaBackendImpl::gemmLayouts(const Launch &l, const GemmMapping &map,
                                      bool accumulate,
                                      const std::string &label) {
  const Lt &lt = cublasLt();
  auto ltCheck = [&](cublasStatus_t s, const char *what) {
    checkLt(lt, s, label, what);
  };
  const Buffer &a = buffer(l.inputs[0]), &b = buffer(l.inputs[1]),
               &d = buffer(l.outputs[0]);
  auto flag = [&](const char *name) {
    auto it = l.ints.find(name);
    return it != l.ints.end() && it->second != 0;
  };
  GemmPlan g;
  g.beta = accumulate ? 1.0f : 0.0f;
  g.loops = int(map.loops);
  g.rightStride = uint64_t(map.rightLoopStride * dtypeBytes(a.dtype));
  g.outStride = uint64_t(map.outLoopStride * dtypeBytes(d.dtype));
  cudaDataType_t ab = cudaType(a.dtype), bb = cudaType(b.dtype),
                 db = cudaType(d.dtype);
  g.shape = std::to_string(map.n) + "x" + std::to_string(map.m) + "x" +
            std::to_string(map.k) +
            (map.batch > 1 ? "x" + std::to_string(map.batch) : std::string()) +
            (g.loops > 1 ? " (" + std::to_string(g.loops) + " GEMMs)" : "") +
            " " + dtypeName(a.dtype) + (flag("transpose_a") ? " tA" : "") +
            (flag("transpose_b") ? " tB" : "") + (accumulate ? " +C" : "");
  ltCheck(lt.cublasLtMatrixLayoutCreate(&g.left, bb, uint64_t(map.leftRows),
                                        uint64_t(map.leftCols), map.leftLd),
          "cublasLtMatrixLayoutCreate");
  ltCheck(lt.cublasLtMatrixLayoutCreate(&g.right, ab, uint64_t(map.rightRows),
                                        uint64_t(map.rightCols), map.rightLd),
          "cublasLtMatrixLayoutCreate");
  ltCheck(lt.cublasLtMatrixLayoutCreate(&g.out, db, uint64_t(map.m),
                                        uint64_t(map.n), map.outLd),
          "cublasLtMatrixLayoutCreate");
  if (map.batch > 1) {
    int32_t count = int32_t(map.batch);
    int64_t strides[3] = {map.leftStride, map.rightStride, map.outStride};
    cublasLtMatrixLayout_t layouts[3] = {g.left, g.right, g.out};
    for (int i = 0; i < 3; ++i) {
      ltCheck(lt.cublasLtMatrixLayoutSetAttribute(
                  layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                  sizeof(count)),
              "setting BATCH_COUNT");
      ltCheck(lt.cublasLtMatrixLayoutSetAttribute(
                  layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                  &strides[i], sizeof(strides[i])),
              "setting STRIDED_BATCH_OFFSET");
    }
  }
  g.leftPtr = address(l.inputs[1]);
  g.rightPtr = address(l.inputs[0]);
  g.outPtr = address(l.outputs[0]);
  g.workspace = l.stream == 1 && sideWorkspace ? sideWorkspace : workspace;
  return g;
}

int CudaBackendImpl::planGemm(const Launch &l, const std::string &label) {
  const bool accumulate = checkGemmOperands(l, label);
  bool epilogue = l.kernel != "matmul";
  const Lt &lt = cublasLt();
  if (!ltHandle) {
    if (cublasStatus_t s = lt.cublasLtCreate(&ltHandle);
        s != CUBLAS_STATUS_SUCCESS)
      throw DeviceError(std::string("cublasLtCreate failed: ") +
                        lt.cublasLtGetStatusName(s));
    check(cu.cuMemAlloc(&workspace, kWorkspaceBytes),
          "cuMemAlloc (cuBLASLt workspace)");
  }
  const Buffer &a = buffer(l.inputs[0]), &b = buffer(l.inputs[1]),
               &d = buffer(l.outputs[0]);
  auto flag = [&](const char *name) {
    auto it = l.ints.find(name);
    return it != l.ints.end() && it->second != 0;
  };
  bool ta = flag("transpose_a"), tb = flag("transpose_b");
  GemmMapping map = mapMatmul(a, b, d, ta, tb, label);
  GemmPlan g = gemmLayouts(l, map, accumulate, label);
  auto ltCheck = [&](cublasStatus_t s, const char *what) {
    checkLt(lt, s, label, what);
  };
  // 16-bit operands accumulate in fp32; fp32 uses the tensor cores' tf32
  // only when the program was compiled for it.
  cublasComputeType_t computeType = CUBLAS_COMPUTE_32F;
  auto precision = prog->meta.find("precision");
  if (a.dtype == DType::F32 && precision != prog->meta.end() &&
      precision->second == "tf32")
    computeType = CUBLAS_COMPUTE_32F_FAST_TF32;

  uint32_t align[3] = {alignmentOf(g.leftPtr | g.leftStride),
                       alignmentOf(g.rightPtr | g.rightStride),
                       alignmentOf(g.outPtr | g.outStride)};
  const PreferenceOwner prefOwner = gemmPreference(lt, align, label);
  cublasLtMatmulPreference_t pref = prefOwner.get();

  // The fused epilogue first; where cuBLASLt has no algorithm for it, less
  // of it, the rest as rt::GemmFallback kernels. GPTC_GEMM_FALLBACK=1 goes
  // straight to the plain GEMM, to check those kernels on a device whose
  // cuBLASLt has them all. So does GELU's derivative with a bias gradient,
  // unless GPTC_GEMM_DGELU=cublaslt or the program lacks the kernels: on an
  // H100, GPT-2's 16384x3072x768 DGELU_BGRAD GEMM took 477 µs, the plain
  // GEMM 159 µs, and even the one-element-a-thread kernels that ran after
  // it then took 370 in all.
  // Whether the program carries the kernels of gptc's bias gradient: the
  // column sums of x (GELU's derivative: the result; else b) into the
  // second result.
  auto hasColumnSums = [&](int x) {
    return hasKernel(gemmFallbackKernel(GemmFallback::ColumnPartials,
                                        buffer(x).dtype)) &&
           hasKernel(gemmFallbackKernel(GemmFallback::ColumnSums,
                                        buffer(l.outputs[1]).dtype));
  };
  const bool dgelu = l.kernel == "matmul_gelu_grad";
  const int summed = dgelu ? l.outputs[0] : l.inputs[1];
  // A GELU epilogue may also run as cuBLASLt's BIAS and gptc's GELU pass.
  auto geluFlag = l.ints.find("gelu");
  const bool geluAfterBias =
      l.kernel == "matmul_epilogue" && geluFlag != l.ints.end() &&
      geluFlag->second != 0 &&
      hasKernel(
          gemmFallbackKernel(GemmFallback::Gelu, buffer(l.outputs[0]).dtype));
  const bool ownDgelu = dgelu && l.outputs.size() > 1 && !dgeluInCublasLt &&
                        hasColumnSums(summed);
  const bool plainFirst = forceGemmFallback || ownDgelu;
  std::vector<EpilogueLevel> levels;
  if (epilogue && !plainFirst)
    levels.push_back(EpilogueLevel::Full);
  if (dgelu && l.outputs.size() > 1 && !plainFirst)
    levels.push_back(EpilogueLevel::WithoutBiasGrad);
  if (geluAfterBias && !plainFirst)
    levels.push_back(EpilogueLevel::WithoutGelu);
  levels.push_back(epilogue ? EpilogueLevel::None : EpilogueLevel::Full);
  // The first of `levels` cuBLASLt has an algorithm for, in `p` (its
  // descriptor, algorithm, candidates and tuning key); false if none.
  // `refused` collects the others.
  std::string refused; // "DGELU_BGRAD: CUBLAS_STATUS_NOT_SUPPORTED; ..."
  auto describe = [&](GemmPlan &p, const std::vector<EpilogueLevel> &tries,
                      EpilogueLevel &kept) {
    for (EpilogueLevel level : tries) {
      if (p.desc)
        lt.cublasLtMatmulDescDestroy(p.desc);
      p.desc = nullptr;
      ltCheck(lt.cublasLtMatmulDescCreate(&p.desc, computeType, CUDA_R_32F),
              "cublasLtMatmulDescCreate");
      cublasOperation_t opLeft = map.transLeft ? CUBLAS_OP_T : CUBLAS_OP_N;
      cublasOperation_t opRight = map.transRight ? CUBLAS_OP_T : CUBLAS_OP_N;
      ltCheck(lt.cublasLtMatmulDescSetAttribute(
                  p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opLeft, sizeof(opLeft)),
              "setting TRANSA");
      ltCheck(lt.cublasLtMatmulDescSetAttribute(p.desc,
                                                CUBLASLT_MATMUL_DESC_TRANSB,
                                                &opRight, sizeof(opRight)),
              "setting TRANSB");
      std::string name =
          epilogue ? setEpilogue(l, map, p, label, level) : "DEFAULT";
      cublasLtMatmulHeuristicResult_t results[kTuneCandidates]{};
      int found = 0;
      cublasStatus_t s = lt.cublasLtMatmulAlgoGetHeuristic(
          ltHandle, p.desc, p.left, p.right, p.out, p.out, pref,
          tuneGemms ? kTuneCandidates : 1, results, &found);
      if (s == CUBLAS_STATUS_SUCCESS && found > 0) {
        p.algo = results[0].algo;
        for (int i = 0; tuneGemms && i < found; ++i)
          if (results[i].state == CUBLAS_STATUS_SUCCESS)
            p.candidates.push_back(results[i].algo);
        p.tuneKey =
            l.kernel + " " + p.shape + " -> " + dtypeName(d.dtype) + " " + name;
        p.way = name;
        kept = level;
        return true;
      }
      refused += (refused.empty() ? "" : "; ") + name + ": " +
                 (s == CUBLAS_STATUS_SUCCESS ? std::string("no algorithm")
                                             : lt.cublasLtGetStatusName(s));
    }
    return false;
  };
  // Tuning (on by default) also times the other ways to a GELU
  // derivative's or a bias gradient's epilogue, where the program has the
  // kernels of them: all of it in cuBLASLt; GELU's derivative in cuBLASLt
  // and gptc's column sums after it; or a plain GEMM and gptc's pass. And
  // to GELU's: cuBLASLt's GELU(_AUX)_BIAS, or its BIAS and gptc's GELU
  // pass. The fastest is kept.
  // GELU's derivative without a bias gradient (GPT-2's c_fc, whose weight
  // gradient sums it) may also run as a plain GEMM and gptc's pass.
  const bool dgeluAlone =
      dgelu && l.outputs.size() == 1 &&
      hasKernel(gemmFallbackKernel(GemmFallback::GeluGrad,
                                   buffer(l.outputs[0]).dtype));
  const bool gradWays =
      (l.outputs.size() > 1 && (dgelu || l.kernel == "matmul_bias_grad") &&
       hasColumnSums(summed)) ||
      dgeluAlone;
  const bool otherWays =
      tuneGemms && !forceGemmFallback && (gradWays || geluAfterBias);
  const GemmPlan layouts = g; // shared with g, destroyed with g's
  EpilogueLevel kept = EpilogueLevel::Full;
  if (!describe(g, levels, kept))
    throw DeviceError(label + ": cuBLASLt has no algorithm for " + g.shape +
                      " (" + refused + ")");
  std::vector<GemmPlan> others;
  std::vector<EpilogueLevel> planned = {kept}; // g's level and the others'
  if (otherWays) {
    std::string refusedBefore = refused;
    std::vector<EpilogueLevel> ways = {EpilogueLevel::Full};
    if (geluAfterBias) {
      ways.push_back(EpilogueLevel::WithoutGelu);
    } else {
      if (dgelu && l.outputs.size() > 1)
        ways.push_back(EpilogueLevel::WithoutBiasGrad);
      ways.push_back(EpilogueLevel::None);
    }
    for (EpilogueLevel want : ways) {
      if (want == kept)
        continue;
      GemmPlan other = layouts;
      EpilogueLevel level = want;
      if (!describe(other, {want}, level)) {
        if (other.desc)
          lt.cublasLtMatmulDescDestroy(other.desc);
        continue;
      }
      planned.push_back(level);
      if (level != EpilogueLevel::Full) {
        // (The profile tells the two gptc ways apart by their names.)
        planFollowups(l, map, other, label, level);
        other.shape += level == EpilogueLevel::WithoutBiasGrad
                           ? " DGELU + gptc bias gradient"
                       : level == EpilogueLevel::WithoutGelu
                           ? " BIAS + gptc GELU"
                           : " + gptc epilogue";
        other.way += " + gptc";
      }
      others.push_back(std::move(other));
    }
    refused = refusedBefore; // a refusal here is no news
  }
  // Row-chunked ways (planRowLoops), also timed, where gptc's pass reads
  // what the GEMM just wrote: BIAS's pre-activation for the GELU pass, the
  // plain GEMM's product for GELU's derivative. Only on the compute stream
  // (partialsScratch is one).
  if (otherWays && l.stream == 0 && map.loops == 1 && map.batch == 1 &&
      !map.transRight) {
    std::vector<EpilogueLevel> chunkable;
    for (EpilogueLevel level : planned)
      if (((geluAfterBias && level == EpilogueLevel::WithoutGelu) ||
           (dgelu && level == EpilogueLevel::None)) &&
          std::find(chunkable.begin(), chunkable.end(), level) ==
              chunkable.end())
        chunkable.push_back(level);
    const std::string refusedBefore = refused; // (no news here either)
    planRowLoops(
        l, map, layouts, chunkable, align, label,
        [&](GemmPlan &p, EpilogueLevel level) {
          EpilogueLevel described = level;
          return describe(p, {level}, described);
        },
        others);
    refused = refusedBefore;
  }
  // gptc's own GEMMs with GELU's epilogue or its derivative, or none
  // (sm_90a): other ways, or with GPTC_GEMM_OWN=narrow, wide or paired
  // the launch's one plan.
  const bool ownOnly = ownGemms == OwnGemms::Narrow ||
                       ownGemms == OwnGemms::Wide ||
                       ownGemms == OwnGemms::Paired;
  if (otherWays || ownOnly || (tuneGemms && !forceGemmFallback))
    if (std::vector<GemmPlan> own = planOwnGemms(l, map); !own.empty()) {
      if (ownOnly) {
        gemms.push_back(std::move(own[0]));
        return int(gemms.size() - 1);
      }
      for (GemmPlan &way : own)
        others.push_back(std::move(way));
    }
  if (kept != EpilogueLevel::Full) {
    planFollowups(l, map, g, label, kept);
    g.shape += ownDgelu ? " + gptc epilogue" : " + fallback epilogue";
    g.way += " + gptc";
    std::string note = l.kernel + " " + g.shape;
    if (!plainFirst && fallbackNotes.insert(note).second)
      std::fprintf(stderr,
                   "gptc: cuBLASLt refused the epilogue of %s (%s); it runs "
                   "as gemm_fallback kernels after the GEMM\n",
                   label.c_str(), refused.c_str());
  }
  gemms.push_back(std::move(g));
  if (!others.empty())
    alternatives.emplace(int(gemms.size() - 1), std::move(others));
  return int(gemms.size() - 1);
}

void CudaBackendImpl::planRowLoops(
    const Launch &l, const GemmMapping &map, const GemmPlan &layouts,
    const std::vector<EpilogueLevel> &levels, const uint32_t (&align)[3],
    const std::string &label,
    const std::function<bool(GemmPlan &, EpilogueLevel)> &describeAt,
    std::vector<GemmPlan> &others) {
  // GPT-2's c_fc output (16,384 rows of 3,072 bf16, 101 MB) is twice an
  // H100's L2: written whole, it is read back from DRAM by the pass. A
  // loop of 2,048 rows is 12.6 MB, read from L2; the other operand (c_fc's
  // or c_proj's weight, 4.7 MB) is read again a loop. The bias gradient's
  // partials sum the same chunks of rows in the same order as unchunked.
  const Lt &lt = cublasLt();
  auto ltCheck = [&](cublasStatus_t s, const char *what) {
    checkLt(lt, s, label, what);
  };
  const Buffer &a = buffer(l.inputs[0]), &d = buffer(l.outputs[0]);
  const bool biasGrad = l.kernel == "matmul_gelu_grad" && l.outputs.size() > 1;
  const int64_t rows = map.n, rowBytes = map.m * dtypeBytes(d.dtype);
  const int64_t multiple = biasGrad ? partialRows(rows, map.m) : 64;
  if (biasGrad &&
      (rows + multiple - 1) / multiple * map.m * 4 > int64_t(kPartialsBytes))
    return;
  std::set<int64_t> sizes; // (two byte counts may give the same loops)
  for (int64_t bytes : chunkBytes)
    if (int64_t r = rowChunk(rows, rowBytes, bytes, multiple); r > 0)
      sizes.insert(r);
  for (EpilogueLevel level : levels)
    for (int64_t r : sizes) {
      GemmPlan c = layouts;
      c.chunkRows = r;
      c.loops = int(rows / r);
      c.rightStride = uint64_t(r * map.k * dtypeBytes(a.dtype));
      c.outStride = uint64_t(r * rowBytes);
      if (alignmentOf(c.rightStride) < align[1] ||
          alignmentOf(c.outStride) < align[2])
        continue;
      ltCheck(lt.cublasLtMatrixLayoutCreate(&c.right, cudaType(a.dtype),
                                            uint64_t(map.rightRows),
                                            uint64_t(r), map.rightLd),
              "cublasLtMatrixLayoutCreate");
      chunkLayouts.push_back(c.right);
      ltCheck(lt.cublasLtMatrixLayoutCreate(&c.out, cudaType(d.dtype),
                                            uint64_t(map.m), uint64_t(r),
                                            map.outLd),
              "cublasLtMatrixLayoutCreate");
      chunkLayouts.push_back(c.out);
      // Each loop's kernels after its GEMM on the compute stream, or beside
      // the next loop's GEMM (memory-bound passes under a compute-bound
      // GEMM, and in its last wave's idle SMs).
      for (bool beside : {false, true}) {
        GemmPlan w = c; // (its own descriptor; the layouts shared)
        if (!describeAt(w, level)) {
          if (w.desc)
            lt.cublasLtMatmulDescDestroy(w.desc);
          continue;
        }
        if (biasGrad && !partialsScratch)
          check(cu.cuMemAlloc(&partialsScratch, kPartialsBytes),
                "cuMemAlloc (bias-gradient partials)");
        if (beside && !loopStream) {
          int greatest = 0, least = 0;
          check(cu.cuCtxGetStreamPriorityRange(&least, &greatest),
                "cuCtxGetStreamPriorityRange");
          check(cu.cuStreamCreateWithPriority(&loopStream,
                                              CU_STREAM_NON_BLOCKING, greatest),
                "cuStreamCreateWithPriority");
          loopFork = newEvent(false);
          loopJoin = newEvent(false);
        }
        w.passesBeside = beside;
        planFollowups(l, map, w, label, level);
        const std::string loops =
            ", " + std::to_string(w.loops) + " loops of " + std::to_string(r) +
            " rows" + (beside ? ", passes beside the next GEMM" : "");
        w.shape += (level == EpilogueLevel::WithoutGelu ? " BIAS + gptc GELU"
                                                        : " + gptc epilogue") +
                   loops;
        w.tuneKey += loops;
        w.way += " + gptc" + loops;
        others.push_back(std::move(w));
      }
    }
}

std::string CudaBackendImpl::setEpilogue(const Launch &l,
                                         const GemmMapping &map, GemmPlan &g,
                                         const std::string &label,
                                         EpilogueLevel level) {
  const Lt &lt = cublasLt();
  auto ltCheck = [&](cublasStatus_t s, const char *what) {
    checkLt(lt, s, label, what);
  };
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const void *value,
                 size_t size, const char *what) {
    ltCheck(lt.cublasLtMatmulDescSetAttribute(g.desc, attr, value, size), what);
  };
  // One GEMM whose column-major rows are gpt's N: the bias (gradient) runs
  // along them and the aux matrix has D's layout. gpt-fuse-matmul-epilogue
  // only makes such (a 2-D right operand, no transposed batched left one).
  if (map.loops > 1 || map.batch > 1)
    throw DeviceError(label + ": a matmul epilogue over several GEMMs");
  auto it = l.ints.find("gelu");
  bool gelu = it != l.ints.end() && it->second != 0;
  // Which epilogue, and where its bias (or bias gradient) and aux matrix
  // are. gpt's b is cuBLASLt's A (the operands swap in the column-major
  // view), so the column sums of gpt's b are BGRADA's.
  cublasLtEpilogue_t epi;
  std::string name;
  int biasId = -1, auxId = -1;
  bool setAux = true;
  if (l.kernel == "matmul_epilogue") {
    bool aux = l.outputs.size() > 1;
    // Without GELU, D is the pre-activation (in the result where none is
    // kept): gptc's GELU pass reads it there.
    const bool withGelu = gelu && level != EpilogueLevel::WithoutGelu;
    epi = !withGelu ? CUBLASLT_EPILOGUE_BIAS
          : aux     ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                    : CUBLASLT_EPILOGUE_GELU_BIAS;
    name = !withGelu ? "BIAS" : aux ? "GELU_AUX_BIAS" : "GELU_BIAS";
    biasId = l.inputs[2];
    if (aux)
      auxId = l.outputs[1]; // checked below; cuBLASLt's only with GELU
    setAux = withGelu;
    g.outPtr =
        address(level == EpilogueLevel::WithoutGelu && aux ? l.outputs[1]
                                                           : l.outputs[0]);
  } else if (l.kernel == "matmul_gelu_grad") {
    bool bgrad = l.outputs.size() > 1 && level == EpilogueLevel::Full;
    epi = bgrad ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
    name = bgrad ? "DGELU_BGRAD" : "DGELU";
    auxId = l.inputs[2];
    if (bgrad)
      biasId = l.outputs[1];
  } else {
    epi = CUBLASLT_EPILOGUE_BGRADA;
    name = "BGRADA";
    biasId = l.outputs[1];
  }
  if (biasId >= 0) {
    const Buffer &bias = buffer(biasId);
    if (bias.numel() != map.m)
      throw DeviceError(label + ": the bias has " +
                        std::to_string(bias.numel()) +
                        " elements, not N = " + std::to_string(map.m));
    // cuBLASLt reads the bias and writes its gradient in D's type (the
    // op verifiers hold gptc to that).
    if (bias.dtype != buffer(l.outputs[0]).dtype)
      throw DeviceError(label + ": the bias (gradient) is " +
                        dtypeName(bias.dtype) + ", D is " +
                        dtypeName(buffer(l.outputs[0]).dtype));
  }
  if (auxId >= 0) {
    // The GELU input matrix (written by GELU_AUX_BIAS or as BIAS's D, read
    // by DGELU) has D's layout and type.
    const Buffer &aux = buffer(auxId), &d = buffer(l.outputs[0]);
    if (aux.numel() != d.numel() || aux.dtype != d.dtype)
      throw DeviceError(
          label + ": the pre-activation is " + dtypeName(aux.dtype) + "[" +
          std::to_string(aux.numel()) + "], the result " + dtypeName(d.dtype) +
          "[" + std::to_string(d.numel()) + "]");
  }
  if (level == EpilogueLevel::None)
    return "DEFAULT";
  set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi), "setting EPILOGUE");
  if (biasId >= 0) {
    void *biasPtr = reinterpret_cast<void *>(address(biasId));
    set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &biasPtr, sizeof(biasPtr),
        "setting BIAS_POINTER");
  }
  if (auxId >= 0 && setAux) {
    void *auxPtr = reinterpret_cast<void *>(address(auxId));
    int64_t auxLd = map.outLd;
    set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &auxPtr, sizeof(auxPtr),
        "setting EPILOGUE_AUX_POINTER");
    set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &auxLd, sizeof(auxLd),
        "setting EPILOGUE_AUX_LD");
  }
  return name;
}

CUfunction CudaBackendImpl::fallbackKernel(GemmFallback kind, DType t,
                                           const std::string &label) {
  std::string name = gemmFallbackKernel(kind, t);
  for (size_t i = 0; i < prog->kernels.size() && i < entries.size(); ++i)
    if (prog->kernels[i].name == name)
      return entries[i];
  throw DeviceError(label +
                    ": cuBLASLt has no algorithm for its epilogue, "
                    "and the program has no kernel " +
                    name +
                    " to run it after the GEMM (compile it again with this "
                    "gptc)");
}

std::vector<GemmPlan> CudaBackendImpl::planOwnGemms(const Launch &l,
                                                    const GemmMapping &map) {
  std::vector<GemmPlan> ways;
  const std::optional<WgmmaGemmFit> fit = wgmmaGemmFit(*prog, l);
  if (ownGemms == OwnGemms::Never || !fit || map.loops != 1 || map.batch != 1)
    return ways;
  if (fit->kind == GemmFallback::WgmmaWeightGrad) {
    for (WgmmaBlocks blocks :
         {WgmmaBlocks::Narrow, WgmmaBlocks::Wide, WgmmaBlocks::Paired})
      if (std::optional<GemmPlan> own =
              planWeightGradGemm(l, map, *fit, blocks))
        ways.push_back(std::move(*own));
    return ways;
  }
  // a and b are copied 16 bytes at a time; the third operand and the
  // results go four elements at a time.
  const bool plain = fit->kind == GemmFallback::WgmmaPlain;
  uint64_t results = plain ? 0 : address(l.inputs[2]);
  for (int id : l.outputs)
    results |= address(id);
  if ((address(l.inputs[0]) | address(l.inputs[1])) % 16 != 0 ||
      results % 8 != 0)
    return ways;
  const bool biasGelu = fit->kind == GemmFallback::WgmmaBiasGelu;
  // GELU's derivative with its bias gradient: the partial sums (m / 16
  // rows of n floats) in the cuBLASLt workspace, which no GEMM uses
  // meanwhile, then ColumnSums into the gradient.
  const bool biasGrad = fit->kind == GemmFallback::WgmmaGeluGradBias;
  const int64_t chunks = fit->m / 16;
  const CUdeviceptr scratch =
      l.stream == 1 && sideWorkspace ? sideWorkspace : workspace;
  if (biasGrad && (chunks * fit->n * 4 > int64_t(kWorkspaceBytes) ||
                   !hasKernel(gemmFallbackKernel(GemmFallback::ColumnSums,
                                                 buffer(l.outputs[1]).dtype))))
    return ways;
  enum Blocks { Narrow, Wide, Paired };
  // The GPTC_GEMM_OWN value that runs each block shape alone, untimed.
  const OwnGemms only[] = {OwnGemms::Narrow, OwnGemms::Wide, OwnGemms::Paired};
  for (Blocks blocks : {Narrow, Wide, Paired}) {
    const bool wide = blocks != Narrow, paired = blocks == Paired;
    const GemmFallback kind = paired ? pairedWgmmaGemm(fit->kind)
                              : wide ? wideWgmmaGemm(fit->kind)
                                     : fit->kind;
    const bool timed = ownGemms == OwnGemms::Timed ||
                       (ownGemms == OwnGemms::Unpaired && !paired);
    if ((wide && !fit->wide) || (paired && !fit->paired) ||
        (!timed && ownGemms != only[blocks]) ||
        !hasKernel(gemmFallbackKernel(kind, DType::BF16)))
      continue;
    // A pair's blocks run as a cluster: as many as the device runs at
    // once walk the tiles (an SM's pair may be short of a partner).
    const uint32_t sharedBytes = paired ? kGemmWgmmaPairedSharedBytes
                                 : wide ? kGemmWgmmaWideSharedBytes
                                        : kGemmWgmmaSharedBytes;
    const CUfunction fn = fallbackKernel(kind, DType::BF16, l.kernel);
    const uint32_t threads =
        gemmFallbackThreads(gemmFallbackKernel(kind, DType::BF16));
    const int pairs = paired ? activeClusters(fn, 2, threads, sharedBytes) : 0;
    if (paired && pairs < 1)
      continue;
    GemmPlan own;
    own.shape =
        std::to_string(fit->m) + "x" + std::to_string(fit->n) + "x" +
        std::to_string(fit->k) + " bf16" +
        (biasGelu   ? " + GELU"
         : biasGrad ? " tB + GELU's derivative and bias gradient"
         : plain    ? " tB"
         : fit->kind == GemmFallback::WgmmaBias ? " + bias"
                                                : " tB + GELU's derivative") +
        (paired ? ", 128x256 blocks in pairs"
         : wide ? ", 128x256 blocks"
                : ", 128x128 blocks");
    own.way = paired ? "gptc wgmma GEMM 128x256 pairs"
              : wide ? "gptc wgmma GEMM 128x256"
                     : "gptc wgmma GEMM 128x128";
    own.tuneKey = l.kernel + " " + own.shape + " -> bf16 gptc wgmma";
    own.candidates = {cublasLtMatmulAlgo_t{}};
    own.outPtr = address(l.outputs[0]);
    // a and b through their tensor maps.
    const std::array<WgmmaOperandMap, 2> operands =
        wgmmaOperandMaps(kind, fit->m, fit->n, fit->k);
    const CUdeviceptr mapA = operandMap(address(l.inputs[0]), operands[0]),
                      mapB = mapA
                                 ? operandMap(address(l.inputs[1]), operands[1])
                                 : 0;
    if (!mapB)
      continue;
    GemmPlan::Followup f;
    f.fn = fn;
    f.threads = threads;
    // The blocks walk their tiles, one block an SM (a pair two SMs).
    const int64_t tiles = fit->m / 128 * (fit->n / (wide ? 256 : 128));
    f.grid[0] = paired ? uint32_t(2 * std::min<int64_t>(tiles / 2, pairs))
                       : uint32_t(std::min<int64_t>(tiles, smCount));
    f.cluster = paired ? 2 : 1;
    f.sharedBytes = sharedBytes;
    // (a's and b's maps, the bias or pre-activation (none for a plain
    // GEMM), then the results (the bias gradient's partial sums in its
    // place), then m, n, k.)
    f.args = {uint64_t(mapA), uint64_t(mapB)};
    if (!plain)
      f.args.push_back(address(l.inputs[2]));
    f.args.push_back(address(l.outputs[0]));
    if (biasGelu)
      f.args.push_back(address(l.outputs[1]));
    if (biasGrad)
      f.args.push_back(uint64_t(scratch));
    for (int64_t size : {fit->m, fit->n, fit->k})
      f.args.push_back(uint64_t(size));
    own.after.push_back(std::move(f));
    if (biasGrad) {
      GemmPlan::Followup sums;
      sums.fn = fallbackKernel(GemmFallback::ColumnSums,
                               buffer(l.outputs[1]).dtype, l.kernel);
      sums.grid[0] = uint32_t((fit->n + 31) / 32);
      sums.args = {uint64_t(scratch), address(l.outputs[1]), uint64_t(chunks),
                   uint64_t(fit->n)};
      own.after.push_back(std::move(sums));
    }
    ways.push_back(std::move(own));
  }
  return ways;
}

std::optional<GemmPlan>
CudaBackendImpl::planWeightGradGemm(const Launch &l, const GemmMapping &map,
                                    const WgmmaGemmFit &fit,
                                    WgmmaBlocks blocks) {
  // Each block shape alone: GPTC_GEMM_OWN=narrow, =wide or =paired runs it
  // untimed (=unpaired both others).
  const bool wide = blocks != WgmmaBlocks::Narrow,
             paired = blocks == WgmmaBlocks::Paired;
  const GemmFallback kind = paired ? pairedWgmmaGemm(fit.kind)
                            : wide ? wideWgmmaGemm(fit.kind)
                                   : fit.kind;
  const std::string name = gemmFallbackKernel(kind, DType::BF16);
  if ((wide && !fit.wide) || (paired && !fit.paired))
    return std::nullopt;
  const bool accumulate = l.inputs.size() == 3,
             biasGrad = l.kernel == "matmul_bias_grad";
  // A bias gradient: b's column sums after the GEMM (ColumnPartials and
  // ColumnSums, as after cuBLASLt's plain GEMM), its partials in the
  // workspace once the GEMM's slots are done with.
  if (biasGrad && (!hasKernel(gemmFallbackKernel(GemmFallback::ColumnPartials,
                                                 buffer(l.inputs[1]).dtype)) ||
                   !hasKernel(gemmFallbackKernel(GemmFallback::ColumnSums,
                                                 buffer(l.outputs[1]).dtype))))
    return std::nullopt;
  const OwnGemms alone = paired ? OwnGemms::Paired
                         : wide ? OwnGemms::Wide
                                : OwnGemms::Narrow;
  if ((ownGemms != OwnGemms::Timed &&
       !(ownGemms == OwnGemms::Unpaired && !paired) && ownGemms != alone) ||
      !hasKernel(name))
    return std::nullopt;
  const uint64_t floats =
      address(l.outputs[0]) | (accumulate ? address(l.inputs[2]) : 0);
  if ((address(l.inputs[0]) | address(l.inputs[1])) % 16 != 0 ||
      floats % 8 != 0)
    return std::nullopt;
  // One block an SM, each a span of the tiles' depth steps (a pair two
  // SMs, the pair a span, as many pairs as the device runs at once); two
  // partial slots a block in the stream's cuBLASLt workspace, which no
  // GEMM uses meanwhile, and the stream's counters (zeroed once: each
  // launch leaves them zero).
  const int64_t rows = paired ? 256 : 128, cols = wide ? 256 : 128,
                iterations = fit.m / rows * (fit.n / cols) * (fit.k / 64);
  const uint32_t sharedBytes = gemmFallbackSharedBytes(name);
  const CUfunction fn = fallbackKernel(kind, DType::BF16, l.kernel);
  const int64_t owners = std::min<int64_t>(
      paired ? activeClusters(fn, 2, gemmFallbackThreads(name), sharedBytes)
             : smCount,
      iterations);
  const int64_t blockCount = paired ? 2 * owners : owners;
  if (owners < 1 ||
      2 * blockCount * int64_t(weightGradSlotBytes(kind)) >
          int64_t(kWorkspaceBytes) ||
      iterations * owners >= int64_t(1) << 31) // (the kernel's int spans)
    return std::nullopt;
  const bool onSide = l.stream == 1 && sideWorkspace;
  const CUdeviceptr scratch = onSide ? sideWorkspace : workspace;
  CUdeviceptr &counters = onSide ? sideWeightGradCounters : weightGradCounters;
  if (!counters) {
    check(cu.cuMemAlloc(&counters, kWeightGradCounters * 4),
          "cuMemAlloc (weight-gradient GEMMs' counters)");
    check(cu.cuMemsetD8Async(counters, 0, kWeightGradCounters * 4, compute),
          "cuMemsetD8Async");
    check(cu.cuStreamSynchronize(compute), "cuStreamSynchronize");
  }
  const std::array<WgmmaOperandMap, 2> operands =
      wgmmaOperandMaps(kind, fit.m, fit.n, fit.k);
  const CUdeviceptr mapA = operandMap(address(l.inputs[0]), operands[0]),
                    mapB = mapA ? operandMap(address(l.inputs[1]), operands[1])
                                : 0;
  if (!mapB)
    return std::nullopt;
  GemmPlan own;
  const std::string tile = wide ? "128x256" : "128x128";
  own.shape = std::to_string(fit.m) + "x" + std::to_string(fit.n) + "x" +
              std::to_string(fit.k) + " bf16 tA" + (accumulate ? " +C" : "") +
              (biasGrad ? " + bias gradient" : "") + ", " + tile + " blocks" +
              (paired ? " in pairs" : "") + ", stream-K";
  own.way = "gptc wgmma GEMM " + tile + (paired ? " pairs" : "") + " stream-K";
  own.tuneKey = l.kernel + " " + own.shape + " -> f32 gptc wgmma";
  own.candidates = {cublasLtMatmulAlgo_t{}};
  own.outPtr = address(l.outputs[0]);
  GemmPlan::Followup f;
  f.fn = fn;
  f.threads = gemmFallbackThreads(name);
  f.grid[0] = uint32_t(blockCount);
  f.cluster = paired ? 2 : 1;
  f.sharedBytes = sharedBytes;
  f.args = {uint64_t(mapA),
            uint64_t(mapB),
            accumulate ? address(l.inputs[2]) : 0,
            address(l.outputs[0]),
            uint64_t(scratch),
            uint64_t(counters),
            uint64_t(fit.m),
            uint64_t(fit.n),
            uint64_t(fit.k)};
  own.after.push_back(std::move(f));
  if (biasGrad) {
    own.workspace = scratch;
    planFollowups(l, map, own, l.kernel, EpilogueLevel::None);
  }
  return own;
}

CUdeviceptr CudaBackendImpl::operandMap(CUdeviceptr base,
                                        const WgmmaOperandMap &operand) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {cuuint64_t(operand.inner),
                              cuuint64_t(operand.outer)};
  const cuuint64_t rowBytes[1] = {cuuint64_t(operand.inner) * 2};
  const cuuint32_t box[2] = {64, operand.boxRows}, unitStrides[2] = {1, 1};
  if (CUresult r = cu.cuTensorMapEncodeTiled(
          &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
          reinterpret_cast<void *>(base), dims, rowBytes, box, unitStrides,
          CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
          CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
      r != CUDA_SUCCESS) {
    if (!std::exchange(saidMapRefused, true))
      std::fprintf(
          stderr,
          "gptc: cuTensorMapEncodeTiled refused a %lldx%lld bf16 "
          "operand (%s): gptc's own GEMMs are left out where it does\n",
          (long long)operand.outer, (long long)operand.inner,
          cuError(cu, r).c_str());
    return 0;
  }
  if (tensorMapBlocks.empty() || tensorMapsInLast == kTensorMapsPerBlock) {
    CUdeviceptr block = 0;
    check(cu.cuMemAlloc(&block, kTensorMapsPerBlock * sizeof(CUtensorMap)),
          "cuMemAlloc (gptc's GEMMs' tensor maps)");
    tensorMapBlocks.push_back(block);
    tensorMapsInLast = 0;
  }
  const CUdeviceptr at =
      tensorMapBlocks.back() + tensorMapsInLast++ * sizeof(CUtensorMap);
  check(cu.cuMemcpyHtoDAsync(at, &map, sizeof map, compute),
        "cuMemcpyHtoDAsync (a tensor map)");
  check(cu.cuStreamSynchronize(compute), "cuStreamSynchronize (a tensor map)");
  return at;
}

void CudaBackendImpl::planFollowups(const Launch &l, const GemmMapping &map,
                                    GemmPlan &g, const std::string &label,
                                    EpilogueLevel level) {
  const Buffer &d = buffer(l.outputs[0]);
  const int64_t cols = map.m, allRows = d.numel() / cols;
  // A row-chunked plan (g.chunkRows rows a loop): the kernels that take
  // rows run after each loop's GEMM on its rows, their pointers moved by
  // the loop's bytes of D (the pre-activation has D's type and layout).
  const int64_t rows = g.chunkRows > 0 ? g.chunkRows : allRows;
  const uint64_t step = g.chunkRows > 0 ? g.outStride : 0;
  auto ceilDiv = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  auto gridFor = [&](int64_t n) {
    return uint32_t(std::clamp<int64_t>(ceilDiv(n, 256), 1, 1 << 20));
  };
  auto add = [&](GemmFallback kind, DType t, uint32_t gx, uint32_t gy,
                 std::vector<uint64_t> args,
                 std::vector<uint64_t> loopStride = {}) {
    GemmPlan::Followup f;
    f.fn = fallbackKernel(kind, t, label);
    f.grid[0] = gx;
    f.grid[1] = gy;
    f.args = std::move(args);
    f.loopStride = std::move(loopStride);
    g.after.push_back(std::move(f));
  };
  // Column sums of x [allRows, cols] into `out`: partial sums per chunk of
  // rows (in the cuBLASLt workspace, free again once the GEMM ran; in
  // partialsScratch for a row-chunked plan, whose next GEMM uses the
  // workspace), then their sum in chunk order. With `pre` (an address, or
  // 0), x = gelu'(pre) * x in place first, in the same pass.
  auto columnSums = [&](int xId, int outId, uint64_t pre) {
    const Buffer &x = buffer(xId), &out = buffer(outId);
    // (x is D itself, or a bias gradient's b: its rows are not D's.)
    const int64_t xRows = x.numel() / cols,
                  rows = g.chunkRows > 0 ? g.chunkRows : xRows;
    const int64_t perChunk = partialRows(xRows, cols);
    const int64_t chunks = std::max<int64_t>(ceilDiv(xRows, perChunk), 1);
    const uint64_t partials =
        g.chunkRows > 0 ? partialsScratch : uint64_t(g.workspace);
    add(GemmFallback::ColumnPartials, x.dtype, uint32_t(ceilDiv(cols, 256)),
        uint32_t(ceilDiv(rows, perChunk)),
        {address(xId), pre, partials, uint64_t(rows), uint64_t(cols),
         uint64_t(perChunk)},
        g.chunkRows > 0
            ? std::vector<uint64_t>{step, pre ? step : 0,
                                    uint64_t(rows / perChunk * cols * 4), 0, 0,
                                    0}
            : std::vector<uint64_t>{});
    add(GemmFallback::ColumnSums, out.dtype, uint32_t(ceilDiv(cols, 32)), 1,
        {partials, address(outId), uint64_t(chunks), uint64_t(cols)});
  };
  const std::vector<uint64_t> twoPointers =
      g.chunkRows > 0 ? std::vector<uint64_t>{step, step, 0}
                      : std::vector<uint64_t>{};
  if (l.kernel == "matmul_epilogue" && level == EpilogueLevel::WithoutGelu) {
    // The GEMM wrote the pre-activation (setEpilogue: D's pointer); a
    // block takes 4 chunks of 8·256 elements, a thread 4 loads in flight.
    const uint64_t pre = g.outPtr, n = uint64_t(rows * cols);
    add(GemmFallback::Gelu, d.dtype,
        uint32_t(
            std::clamp<int64_t>(ceilDiv(rows * cols, 4 * 8 * 256), 1, 1 << 20)),
        1, {address(l.outputs[0]), pre, n}, twoPointers);
  } else if (l.kernel == "matmul_epilogue") {
    auto it = l.ints.find("gelu");
    bool gelu = it != l.ints.end() && it->second != 0;
    uint64_t pre = l.outputs.size() > 1 ? address(l.outputs[1]) : 0;
    add(GemmFallback::Bias, d.dtype, gridFor(allRows * cols), 1,
        {address(l.outputs[0]), address(l.inputs[2]), pre, uint64_t(allRows),
         uint64_t(cols), uint64_t(gelu)});
  } else if (l.kernel == "matmul_gelu_grad") {
    // DEFAULT: GELU's derivative here too, with the bias gradient if any.
    uint64_t pre = level == EpilogueLevel::None ? address(l.inputs[2]) : 0;
    if (l.outputs.size() > 1)
      columnSums(l.outputs[0], l.outputs[1], pre);
    else if (pre) // a block takes 4 chunks of 8·256 elements, as Gelu's
      add(GemmFallback::GeluGrad, d.dtype,
          uint32_t(std::clamp<int64_t>(ceilDiv(rows * cols, 4 * 8 * 256), 1,
                                       1 << 20)),
          1, {address(l.outputs[0]), pre, uint64_t(rows * cols)}, twoPointers);
  } else {
    columnSums(l.inputs[1], l.outputs[1], 0);
  }
}

cublasStatus_t CudaBackendImpl::runGemm(const GemmPlan &g,
                                        const cublasLtMatmulAlgo_t &algo,
                                        const std::string &label,
                                        CUstream stream) {
  const Lt &lt = cublasLt();
  const float alpha = 1.0f, beta = g.beta;
  if (!stream)
    stream = compute;
  // (planGemm makes such plans only for the compute stream's launches.)
  const CUstream loops = g.passesBeside ? loopStream : stream;
  if (!g.desc) { // gptc's own GEMM: its kernel is the plan
    for (const GemmPlan::Followup &f : g.after)
      launchFollowup(f, 0, label, stream);
    return CUBLAS_STATUS_SUCCESS;
  }
  for (int i = 0; i < g.loops; ++i) {
    auto at = [&](CUdeviceptr p, uint64_t stride) {
      return reinterpret_cast<void *>(p + stride * uint64_t(i));
    };
    void *out = at(g.outPtr, g.outStride);
    if (cublasStatus_t s = lt.cublasLtMatmul(
            ltHandle, g.desc, &alpha, at(g.leftPtr, g.leftStride), g.left,
            at(g.rightPtr, g.rightStride), g.right, &beta, out, g.out, out,
            g.out, &algo, reinterpret_cast<void *>(g.workspace),
            kWorkspaceBytes, stream);
        s != CUBLAS_STATUS_SUCCESS) {
      if (loops != stream && i > 0) { // (a capture must end joined)
        check(cu.cuEventRecord(loopJoin, loops), "cuEventRecord");
        check(cu.cuStreamWaitEvent(stream, loopJoin, 0), "cuStreamWaitEvent");
      }
      return s;
    }
    if (loops != stream) { // this loop's kernels wait for its GEMM
      check(cu.cuEventRecord(loopFork, stream), "cuEventRecord");
      check(cu.cuStreamWaitEvent(loops, loopFork, 0), "cuStreamWaitEvent");
    }
    for (const GemmPlan::Followup &f : g.after)
      if (!f.loopStride.empty())
        launchFollowup(f, i, label, loops);
  }
  if (loops != stream) { // the launch ends when the last loop's kernels do
    check(cu.cuEventRecord(loopJoin, loops), "cuEventRecord");
    check(cu.cuStreamWaitEvent(stream, loopJoin, 0), "cuStreamWaitEvent");
  }
  for (const GemmPlan::Followup &f : g.after)
    if (f.loopStride.empty())
      launchFollowup(f, 0, label, stream);
  return CUBLAS_STATUS_SUCCESS;
}

void CudaBackendImpl::launchFollowup(const GemmPlan::Followup &f, int loop,
                                     const std::string &label,
                                     CUstream stream) {
  uint64_t values[12];
  void *params[12];
  for (size_t i = 0; i < f.args.size() && i < 12; ++i) {
    const uint64_t stride = i < f.loopStride.size() ? f.loopStride[i] : 0;
    values[i] = f.args[i] + stride * uint64_t(loop);
    params[i] = &values[i];
  }
  const uint32_t grid[3] = {f.grid[0], f.grid[1], 1},
                 block[3] = {f.threads, 1, 1};
  if (CUresult r = launchKernel(f.fn, grid, block, f.sharedBytes, stream,
                                params, f.cluster);
      r != CUDA_SUCCESS)
    throw DeviceError("cannot launch gptc's kernel of " + label + ": " +
                      cuError(cu, r));
}

// GEMM tuning (GPTC_GEMM_TUNE, on by default), at load: every GEMM of the
// program with each of the heuristic's candidates, and each other way to
// its epilogue with each of its own, timed on the device; the fastest is
// kept (GEMMs of one kernel, shape and epilogue share the result). The
// arena then holds nothing but constants, and the GEMMs write only temps,
// gradients and outputs, so running them is harmless; their inputs are set
// to 0x3f bytes (0.75 as bf16 and as float32: finite, non-zero) and the
// arena is zeroed again afterwards. Timing picks the algorithm, so two
// timings may pick differently, and their bits differ: the choice is kept
// in the kernel cache (gemmChoiceFile), and later runs on the same kind of
// GPU with the same cuBLASLt take it untimed, with the same bits run to
// run and across a resume. GPTC_GEMM_TUNE=time times again;
// GPTC_GEMM_TUNE=0 takes the heuristic's first choice and the default way.
namespace {

/// One GEMM shape's tuning, shared by every GEMM of that shape and epilogue.
struct Tuned {
  GemmChoice choice; // way 0 (the GEMM's own plan), candidate 0: unchanged
  int gemms = 0;
  bool kept = false; // an earlier run's choice, not timed now
  bool otherWays = false;
  std::string timedWays; // "DEFAULT + gptc 0.271 (kept), ..." if timed
};

/// tune()'s lines: the step's GEMMs untuned and tuned, where the kept
/// algorithms lie in the heuristic's lists, and each GEMM's ways timed now.
void reportTuning(const std::map<std::string, Tuned> &byKey,
                  size_t gemmLaunches) {
  double first = 0, best = 0;
  int changed = 0, otherWay = 0, otherWays = 0, kept = 0;
  for (const auto &[key, t] : byKey) {
    first += t.choice.first * t.gemms;
    best += t.choice.best * t.gemms;
    changed += t.choice.way > 0 || t.choice.index > 0;
    otherWay += t.choice.way > 0;
    otherWays += t.otherWays;
    kept += t.kept;
  }
  char earlier[160] = "";
  if (kept > 0)
    std::snprintf(earlier, sizeof earlier,
                  " (%d of them by an earlier run, kept in the cache; "
                  "GPTC_GEMM_TUNE=time times them again)",
                  kept);
  std::fprintf(stderr,
               "gptc: GPTC_GEMM_TUNE: up to %d cuBLASLt algorithms timed for "
               "each of %zu GEMM shapes%s, %d changed (%d of the %d with "
               "other ways to their epilogue took another); all %zu GEMM "
               "launches once: %.3f ms with the heuristic's first choice, "
               "%.3f ms tuned\n",
               kTuneCandidates, byKey.size(), earlier, changed, otherWay,
               otherWays, gemmLaunches, first, best);
  // Where in the heuristic's list each shape's kept algorithm lies.
  std::map<size_t, int> places;
  for (const auto &[key, t] : byKey)
    ++places[t.choice.index];
  std::string listed;
  for (const auto &[place, shapes] : places)
    listed += (listed.empty() ? "" : ", ") + std::to_string(place + 1) +
              (shapes > 1 ? " (" + std::to_string(shapes) + " shapes)" : "");
  std::fprintf(stderr,
               "gptc: GPTC_GEMM_TUNE: the kept algorithms' places in the "
               "heuristic's lists: %s\n",
               listed.c_str());
  // Each GEMM whose ways to its epilogue were timed now: every way's best.
  for (const auto &[key, t] : byKey)
    if (!t.timedWays.empty())
      std::fprintf(stderr, "gptc: GPTC_GEMM_TUNE: %s\n", t.timedWays.c_str());
}

} // namespace

size_t CudaBackendImpl::fastestWayThatAgrees(
    const Launch &l, const std::vector<GemmPlan *> &ways,
    const std::vector<double> &wayMs, const std::vector<size_t> &wayIndex,
    std::vector<std::string> &notUsed) {
  // Every way from the same operands: an accumulating GEMM's result is
  // also its operand (beta = 1), which the way before added to.
  auto runWay = [&](size_t w) {
    for (int in : l.inputs)
      upload(in,
             trialOperands(buffer(in).dtype, buffer(in).numel(), uint64_t(in))
                 .data());
    if (runGemm(*ways[w], ways[w]->candidates[wayIndex[w]], ways[w]->tuneKey) !=
        CUBLAS_STATUS_SUCCESS)
      return std::vector<std::vector<uint8_t>>();
    return launchResults(l);
  };
  const auto own = runWay(0);
  std::vector<size_t> byTime;
  for (size_t w = 0; w < ways.size(); ++w)
    if (wayMs[w] >= 0)
      byTime.push_back(w);
  std::stable_sort(byTime.begin(), byTime.end(),
                   [&](size_t x, size_t y) { return wayMs[x] < wayMs[y]; });
  for (size_t w : byTime) {
    std::string differs = "it did not run";
    if (w != 0 && !own.empty())
      if (const auto mine = runWay(w); !mine.empty())
        differs = resultsDiffer(l, own, mine);
    if (w == 0 || differs.empty())
      return w;
    notUsed[w] = differs;
  }
  return 0;
}

void CudaBackendImpl::tune() {
  CUevent start = nullptr, stop = nullptr;
  auto readyToTime = [&] { // the 0x3f operands, once something is timed
    if (start)
      return;
    check(cu.cuMemsetD8Async(
              arena, 0x3f, size_t(std::max<int64_t>(arenaBytes, 256)), compute),
          "cuMemsetD8Async");
    start = newEvent(true);
    stop = newEvent(true);
  };
  constexpr int kRuns = 5;
  // The fastest of p's candidates (with the kernels after its GEMM) into
  // `index`, its ms and the first candidate's into `best` and `first`;
  // false if none ran.
  auto fastest = [&](const GemmPlan &p, size_t &index, double &first,
                     double &best) {
    best = -1;
    for (size_t c = 0; c < p.candidates.size(); ++c) {
      if (runGemm(p, p.candidates[c], p.tuneKey) != CUBLAS_STATUS_SUCCESS)
        continue; // (warm-up) this candidate cannot run here after all
      const double each = msPerRun(
          start, stop, kRuns, [&] { runGemm(p, p.candidates[c], p.tuneKey); });
      if (c == 0)
        first = each;
      if (best < 0 || each < best) {
        best = each;
        index = c;
      }
    }
    return best >= 0;
  };
  std::map<std::string, Tuned> byKey;
  const size_t ltVersion = cublasLt().cublasLtGetVersion();
  std::map<int, const Launch *> launchOf; // a launch each GEMM plan runs
  for (const Function &f : prog->functions)
    for (size_t i = 0; i < f.launches.size(); ++i)
      if (int gemm = launches[&f][i].gemm; gemm >= 0)
        launchOf.emplace(gemm, &f.launches[i]);
  for (size_t i = 0; i < gemms.size(); ++i) {
    GemmPlan &g = gemms[i];
    // The ways to this GEMM's epilogue: its own plan first.
    std::vector<GemmPlan *> ways = {&g};
    if (auto alt = alternatives.find(int(i)); alt != alternatives.end())
      for (GemmPlan &other : alt->second)
        ways.push_back(&other);
    // (An algorithm is only good for the epilogue it was found for.)
    std::string key;
    for (const GemmPlan *w : ways)
      key += (key.empty() ? "" : " or ") + w->tuneKey;
    auto [it, added] = byKey.try_emplace(key);
    Tuned &t = it->second;
    ++t.gemms;
    if (added) {
      t.otherWays = ways.size() > 1;
      const std::string file =
          gemmChoiceFile(deviceName, deviceArch, ltVersion, ways);
      if (!retimeGemms && readGemmChoice(file, ways, t.choice)) {
        t.kept = true;
      } else {
        readyToTime();
        GemmChoice c;
        double best = -1;
        std::vector<double> wayMs(ways.size(), -1);
        std::vector<size_t> wayIndex(ways.size(), 0);
        for (size_t w = 0; w < ways.size(); ++w) {
          size_t index = 0;
          double first = 0, each = 0;
          if (!fastest(*ways[w], index, first, each))
            continue;
          wayMs[w] = each;
          wayIndex[w] = index;
          if (w == 0)
            c.first = first;
          if (best < 0 || each < best) {
            best = each;
            c.way = w;
            c.index = index;
          }
        }
        // Another way is kept only if it computes what the GEMM's own plan
        // does, on varied operands (trialOperands; the timing's constant
        // ones would hide a way that reads the wrong rows): a way wrong on
        // this GPU must not win by being fast. Else the next fastest.
        std::vector<std::string> notUsed(ways.size());
        auto it = launchOf.find(int(i));
        if (best >= 0 && c.way != 0 && wayMs[0] >= 0 && it != launchOf.end()) {
          c.way =
              fastestWayThatAgrees(*it->second, ways, wayMs, wayIndex, notUsed);
          c.index = wayIndex[c.way];
          best = wayMs[c.way];
        }
        if (best >= 0) { // (else nothing ran: the heuristic's first)
          c.best = best;
          if (c.first == 0)
            c.first = best; // (the own plan's first candidate did not run)
          t.choice = c;
          saveGemmChoice(file, c);
          if (t.otherWays) {
            const std::string &own = ways[0]->tuneKey;
            t.timedWays = own.substr(0, own.find(" -> ")) + ", ms a run:";
            for (size_t w = 0; w < ways.size(); ++w)
              if (wayMs[w] >= 0) {
                char ms[32];
                std::snprintf(ms, sizeof ms, " %.3f", wayMs[w]);
                t.timedWays +=
                    std::string(w ? "," : "") + " " + ways[w]->way + ms +
                    (w == c.way ? " (kept)" : "") +
                    (notUsed[w].empty() ? ""
                                        : " (" + notUsed[w] + ": not used)");
              }
          }
        }
      }
    }
    const GemmChoice &c = t.choice;
    if (GemmPlan &chosen = *ways[c.way]; c.index < chosen.candidates.size())
      chosen.algo = chosen.candidates[c.index];
    if (c.way > 0)
      std::swap(g, *ways[c.way]);
  }
  synchronize();
  if (start) {
    cu.cuEventDestroy(start);
    cu.cuEventDestroy(stop);
  }
  reportTuning(byKey, gemms.size());
}

} // namespace gptc::rt::detail

#endif // GPTC_HAVE_CUDA_HEADERS
