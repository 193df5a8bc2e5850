//===- CudaBackend.h - the CUDA backend's extras ----------------*- C++ -*-===//
//
// makeCudaBackend() (Backend.h) runs a Program on the first CUDA device: one
// device arena, generated kernels through the driver API, matmul through
// cuBLASLt, both loaded with dlopen so the training program links neither.
// This header adds what only a GPU has: the device's arch and peak rate for
// MFU, its memory use, and a per-kernel time profile.
//
// Environment switches (read once, by the constructor; unset or empty is
// the default, a value a switch does not take is a DeviceError naming it):
//   GPTC_PROFILE=1     time every launch with CUDA events, from the second
//                      run of each launch range on (disables graphs); the
//                      table goes to stderr at the end unless profileReport()
//                      was called
//   GPTC_CUDA_GRAPH=0  never capture a run into a CUDA graph
//   GPTC_PDL=1|0       1 (the default, compute capability 9.0 on, not
//                      with GPTC_PROFILE or GPTC_CUDA_SYNC): launch gptc's
//                      kernels with programmatic stream serialization, so
//                      that each starts launching under the one before it
//                      and waits for it inside (awaitPriorKernels in
//                      kernels/types.cuh); 0: plain launches
//   GPTC_CUDA_SYNC=1   synchronise after every launch, so an asynchronous
//                      fault names the exact launch (slow; for debugging)
//   GPTC_CUBLASLT=PATH the cuBLASLt library to dlopen first
//   GPTC_GEMM_FALLBACK=1  run every fused GEMM as a plain cuBLASLt GEMM and
//                      the rt::GemmFallback kernels, as happens by itself
//                      where cuBLASLt has no algorithm for an epilogue (one
//                      stderr line per refused epilogue and shape says so)
//   GPTC_GEMM_DGELU=cublaslt|gptc  GELU's derivative and the bias gradient
//                      (matmul_gelu_grad) in cuBLASLt's DGELU_BGRAD
//                      epilogue; by default gptc runs a plain GEMM and one
//                      rt::GemmFallback pass for both, which was faster on
//                      an H100 (docs/benchmarks.md)
//   GPTC_GEMM_TUNE=1|0|time  1 (the default): at load, time up to 16 of
//                      cuBLASLt's candidate algorithms for each GEMM shape
//                      and keep the fastest; where a GELU's, a GELU
//                      derivative's or a bias gradient's epilogue can also
//                      run in part or whole as gptc's kernels after the
//                      GEMM (GELU_AUX_BIAS as BIAS and gptc's GELU), time each
//                      way and keep the fastest whose results agree with
//                      the GEMM's own plan's on varied operands (one stderr
//                      line gives the counts and both totals). The choice is
//                      kept in the kernel cache directory
//                      (kernelCacheDir()/gemms, one file a GEMM shape on a kind
//                      of GPU and cuBLASLt), and later runs take it untimed:
//                      the same algorithms, so the same bits, run to run and
//                      across a resume. time: time again and keep the new
//                      choice. 0: the heuristic's first choice and the default
//                      way, untimed. Where gptc's pass reads what the GEMM
//                      wrote (GELU after BIAS, GELU's derivative after a
//                      plain GEMM), tuning also times that way in loops of
//                      rows, each loop's pass right after its GEMM (or
//                      beside the next loop's, on a stream of its own), so
//                      that it reads the rows from L2 (one line a GEMM
//                      gives every way's time)
//                      Where the program carries gptc's own wgmma GEMMs
//                      (an sm_90a program's c_fc GEMMs: GELU with its bias,
//                      GELU's derivative; the plain and bias-only
//                      projections; the weight gradients, stream-K;
//                      kernels/gemm_wgmma.cuh), they are one more way,
//                      timed and checked the same
//   GPTC_GEMM_OWN=1|0|narrow|wide|paired|unpaired  0: never gptc's own
//                      GEMMs, whatever tuning would say (a GPU on which
//                      they fault); narrow, wide, paired: always where
//                      they fit, in tiles of 128 x 128 (taken in turns;
//                      the weight gradients' stream-K blocks too), 128 x
//                      256, or those in pairs, untimed (to check them
//                      against the CPU backend: --check-kernels);
//                      unpaired: timed, but not the pairs
//   GPTC_GEMM_CHUNK_BYTES=N[,N...]  the bytes of D a loop of such a
//                      row-chunked way may write, two ways a size (the
//                      passes after each GEMM, or beside the next; default
//                      6, 12 and 24 MiB); 0: no row-chunked ways
//
// A program whose launches carry variants (rt::Launch::variants: gptc
// compile --attention-forward=auto or --attention-backward=auto, and the
// uncapped twin of a kernel that spilled under its register cap) has each
// set of candidates timed at load, five runs each after a warm-up, and runs
// the fastest of those whose results agree with the launch's own kernel's
// (within 2% of the largest); one stderr line a set gives every time and
// the choice. The choice is kept in the kernel cache directory
// (kernelCacheDir()/variants, one file a set of candidates on a kind of
// GPU), and later runs take it untimed, so that they run the same kernels,
// with the same bits; their line says so.
//   GPTC_VARIANT=L[,L...]  run the candidate labelled L instead, untimed,
//                      wherever a launch has one (the first L listed that
//                      it has; e.g. GPTC_VARIANT=split,mma for the default
//                      kernels, reproducible run to run; capped or
//                      uncapped for a spilling kernel; own: each launch's
//                      own kernel, whatever its label; time: time the
//                      candidates again and keep the new choice); a label
//                      no launch has is an error that lists the program's;
//                      -L leaves the candidates labelled L out of the
//                      timing (never a launch's own kernel), and leaves
//                      nothing out where no launch has one
// An attention launch with variants also has cuDNN's fused flash attention
// among its candidates where libcudnn.so.9 loads (cuDNN 9 is optional):
// timed and checked against the launch's own kernel like gptc's.
//   GPTC_CUDNN=1|all|0  1 (default): the forward and the backward whose dq
//                      is dS·k straight, labelled cudnn; all: also the
//                      backward that adds dq in float32 sums across key
//                      tiles (cudnn-dq-sums: not the same bits run to run);
//                      0: no cuDNN candidates
//   GPTC_CUDNN_LIBRARY=path  the libcudnn.so.9 to load (else the loader's,
//                      then $CUDA_HOME's and /usr/local/cuda's)
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_RUNTIME_CUDABACKEND_H
#define GPTC_RUNTIME_CUDABACKEND_H

#include "gptc/Runtime/Backend.h"

#include <cstdint>
#include <memory>
#include <string>

namespace gptc::rt {

class CudaBackend : public Backend {
public:
  /// The arch kernels are compiled for: "sm_90a" on compute capability 9.0,
  /// "sm_80" on 8.0 (the "a" variants from 9.0 on).
  virtual std::string arch() const = 0;
  /// Dense bf16 tensor-core peak in FLOP/s where the device is known
  /// (H100 SXM and H200: 989e12), else 0: MFU is printed only when known.
  virtual double peakBf16Flops() const = 0;
  /// Device memory in use on the whole device now (total - free), bytes.
  virtual int64_t deviceMemoryUsed() const = 0;
  /// What this backend allocated itself: arena + cuBLASLt workspace.
  virtual int64_t bytesAllocated() const = 0;

  /// Whether GPTC_PROFILE=1 made launches timed.
  virtual bool profiling() const = 0;
  /// Forgets the times so far (call after the warm-up steps).
  virtual void resetProfile() = 0;
  /// The `top` kernels by total time, one line each (total ms, calls,
  /// mean us, share, the floor of one call and the share of the time the
  /// floor is, kernel, op and location), then the totals and the peaks the
  /// floors use; waits for the device first. "" when not profiling. A
  /// floor is launchCost's bytes at the DRAM peak (memory clock and bus
  /// width) or its FLOPs at the dense bf16 peak, whichever is longer.
  virtual std::string profileReport(size_t top = 25) = 0;
};

/// makeCudaBackend() with its extras; throws DeviceError (one line) when
/// there is no driver or no device.
std::unique_ptr<CudaBackend> createCudaBackend();

/// `b` as a CudaBackend if it came from createCudaBackend/makeCudaBackend,
/// else nullptr. (The tools build without RTTI, so no dynamic_cast.)
CudaBackend *asCudaBackend(Backend *b);

/// How a gpt.matmul maps onto column-major cuBLASLt (exposed so that the
/// mapping is tested without a GPU). A row-major [r, c] matrix is the
/// column-major [c, r] one, so the row-major C = op(a)·op(b) is computed as
/// Cᵀ = op(b)ᵀ·op(a)ᵀ: cuBLASLt's left operand ("A") is gpt's b, its right
/// operand ("B") is gpt's a, m = N, n = M, and the transposes carry over.
struct GemmMapping {
  bool transLeft = false, transRight = false; ///< TRANSA, TRANSB
  int64_t m = 0, n = 0, k = 0;                ///< the result is m x n
  int64_t leftRows = 0, leftCols = 0, leftLd = 0;    ///< gpt's b as stored
  int64_t rightRows = 0, rightCols = 0, rightLd = 0; ///< gpt's a as stored
  int64_t outLd = 0;
  /// Strided batch inside one cuBLASLt call (a and b both batched); strides
  /// in elements.
  int64_t batch = 1, leftStride = 0, rightStride = 0, outStride = 0;
  /// Separate calls (a batched a with transpose_a and a shared 2-D b, which
  /// would need a zero stride); strides in elements.
  int64_t loops = 1, rightLoopStride = 0, outLoopStride = 0;
};

/// The mapping of matmul(a, b) -> out; throws DeviceError naming `where`
/// when the shapes disagree.
GemmMapping mapMatmul(const Buffer &a, const Buffer &b, const Buffer &out,
                      bool transposeA, bool transposeB,
                      const std::string &where);

/// Dense bf16 peak for a device name and compute capability, 0 if unknown.
double knownPeakBf16Flops(const std::string &deviceName, int ccMajor,
                          int ccMinor);

} // namespace gptc::rt

#endif // GPTC_RUNTIME_CUDABACKEND_H
