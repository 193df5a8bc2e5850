//===- gemm_fallback.cuh - a GEMM epilogue cuBLASLt refused, as kernels ---===//
//
// Which epilogue, type and layout combinations cuBLASLt has an algorithm
// for is only known on the device. When it has none for a fused GEMM, the
// runtime runs the GEMM with the DEFAULT epilogue (or a lesser one: BIAS
// without GELU, DGELU without its bias gradient) and these kernels after it
// on the same stream: the bias and GELU (keeping the pre-activation), GELU
// alone, GELU's derivative, and a bias gradient as column sums. Where they
// are faster than cuBLASLt's fused epilogue, GEMM tuning keeps them too.
// Unlike generated kernels they take their sizes
// as arguments, since the runtime decides on them when it plans the GEMM.
// They compute in float32 and round once on store; the GEMM has rounded D
// to its type before, so a 16-bit result may differ from the fused
// epilogue's by that one rounding (and GELU's by its form, below).
//
//===----------------------------------------------------------------------===//

// GELU (tanh) and its derivative. 0.5·x·(1 + tanh(u)) is x·σ(2u), u =
// k0·(x + k1·x³) (k0 = sqrt(2/pi), k1 = 0.044715), σ(z) = 1/(1 + e^-z):
// one exponential and one reciprocal on the special-function unit and
// three more instructions, where tanhf took about twenty-five an element,
// so that the passes over GPT-2's 50M-element activations are bound by
// their bytes rather than their instructions. The derivative is σ + x·σ·
// (1 - σ)·2u', with 1 - σ taken as e^-2u·σ: as 1 - σ it would lose the
// digits that matter where σ nears 1. Both are within a few float32 ulp of
// the CPU executor's tanh form, so a bf16 result is its rounding or one
// ulp from it. Large negative x gives GELU -0 (e^-2u overflows, σ = 0).
__device__ __forceinline__ float geluExpNeg2u(float x, float x2) {
  // -2·log2(e)·k0 and -2·log2(e)·k0·k1: e^-2u = 2^(x·(c0 + c1·x²)).
  const float c0 = -0x1.26aec2p+1f, c1 = -0x1.a5a7dp-4f;
  return fastExp2(x * fmaf(c1, x2, c0));
}
__device__ __forceinline__ float fallbackGelu(float x) {
  return x * fastRcp(1.0f + geluExpNeg2u(x, x * x));
}
__device__ __forceinline__ float fallbackGeluGrad(float x, float dy) {
  // 2u' = 2·k0 + 6·k0·k1·x².
  const float d0 = 0x1.988454p+0f, d1 = 0x1.b6676cp-3f;
  const float x2 = x * x;
  // At most 2^126, so that e·σ (1 - σ) stays finite where e^-2u overflows.
  const float e = fminf(geluExpNeg2u(x, x2), 0x1p126f);
  const float sig = fastRcp(1.0f + e), rest = e * sig;
  return fmaf(x * (sig * rest), fmaf(d1, x2, d0), sig) * dy;
}

/// d[r, c] = act(d[r, c] + bias[c]) in place, act GELU or the identity;
/// `pre` (may be null) gets d + bias. A grid-stride loop over rows x cols.
template <typename T>
__device__ void gemmFallbackBias(T *d, const T *bias, T *pre, i64 rows,
                                 i64 cols, bool gelu) {
  const i64 n = rows * cols;
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += i64(gridDim.x) * blockDim.x) {
    float v = __fadd_rn(toFloat(d[i]), toFloat(bias[i % cols]));
    if (pre)
      pre[i] = fromFloat<T>(v);
    d[i] = fromFloat<T>(gelu ? fallbackGelu(v) : v);
  }
}


/// The 8 elements at p, one 16-byte access where `vector`; else one at a
/// time, those past the first `n` read as 0.
template <typename T>
__device__ __forceinline__ void loadUpTo8(const T *p, i64 n, bool vector,
                                          float (&x)[8]) {
  if (vector) {
    load8(p, x);
    return;
  }
  for (int e = 0; e < 8; ++e)
    x[e] = e < n ? toFloat(p[e]) : 0.0f;
}
/// store8, or the first `n` (up to 8) one at a time.
template <typename T>
__device__ __forceinline__ void storeUpTo8(T *p, i64 n, bool vector,
                                           const float (&x)[8]) {
  if (vector) {
    store8(p, x);
    return;
  }
  for (int e = 0; e < 8 && e < n; ++e)
    p[e] = fromFloat<T>(x[e]);
}

/// out[i] = f(a[i], b[i]) over n elements, b null (f's second argument 0)
/// or out itself (in place), as the passes after a GEMM need them: thread
/// t of a block takes 8 adjacent elements (one 16-byte access of bf16) in
/// each of kChunks chunks 8·256 elements apart, all loaded before any is
/// used, so that the pass is bound by its bytes.
template <typename T, class F>
__device__ __forceinline__ void chunkedPass(T *out, const T *a, const T *b,
                                            i64 n, const F &f) {
  constexpr int kChunks = 4;
  const bool aligned = (reinterpret_cast<unsigned long long>(out) |
                        reinterpret_cast<unsigned long long>(a) |
                        reinterpret_cast<unsigned long long>(b)) %
                           16 ==
                       0;
  const i64 span = i64(blockDim.x) * 8; // one chunk of the block
  for (i64 base = i64(blockIdx.x) * span * kChunks + 8 * threadIdx.x;
       base < n; base += i64(gridDim.x) * span * kChunks) {
    float x[kChunks][8], y[kChunks][8] = {};
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const i64 at = base + c * span;
      if (at < n) {
        loadUpTo8(a + at, n - at, aligned && at + 8 <= n, x[c]);
        if (b)
          loadUpTo8(b + at, n - at, aligned && at + 8 <= n, y[c]);
      }
    }
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const i64 at = base + c * span;
      if (at >= n)
        continue;
#pragma unroll
      for (int e = 0; e < 8; ++e)
        x[c][e] = f(x[c][e], y[c][e]);
      storeUpTo8(out + at, n - at, aligned && at + 8 <= n, x[c]);
    }
  }
}

/// out = GELU(pre) over n elements (out may be pre: in place). The second
/// half of GELU_AUX_BIAS done as cuBLASLt's plain BIAS epilogue, which
/// writes pre, and this pass: on an H100, GPT-2's c_fc GEMM took 163 µs
/// with GELU_AUX_BIAS against PyTorch's 83 with BIAS, and this pass moves
/// 4 bytes an element.
template <typename T>
__device__ void gemmFallbackGelu(T *out, const T *pre, i64 n) {
  chunkedPass(out, pre, static_cast<const T *>(nullptr), n,
              [](float x, float) { return fallbackGelu(x); });
}

/// d = gelu'(pre) * d in place over n elements: the second half of DGELU
/// after a plain GEMM (c_fc's backward, since its bias gradient is its
/// weight-gradient GEMM's), 6 bytes an element of bf16.
template <typename T>
__device__ void gemmFallbackGeluGrad(T *d, const T *pre, i64 n) {
  chunkedPass(d, pre, d, n,
              [](float x, float g) { return fallbackGeluGrad(x, g); });
}

/// Eight elements' bytes as loaded (one 16-byte access of bf16 or f16, two
/// of f32), turned into floats only where they are added: 8 rows of bf16
/// in flight take 32 registers rather than 64.
template <typename T> struct Raw8 { uint4 w[sizeof(T) / 2]; };
template <typename T>
__device__ __forceinline__ void loadRaw8(const T *p, Raw8<T> &r) {
#pragma unroll
  for (int i = 0; i < int(sizeof(T) / 2); ++i)
    r.w[i] = reinterpret_cast<const uint4 *>(p)[i];
}
__device__ __forceinline__ void unpack8(const Raw8<float> &r, float (&x)[8]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    x[4 * i] = __uint_as_float(r.w[i].x);
    x[4 * i + 1] = __uint_as_float(r.w[i].y);
    x[4 * i + 2] = __uint_as_float(r.w[i].z);
    x[4 * i + 3] = __uint_as_float(r.w[i].w);
  }
}
template <typename T>
__device__ __forceinline__ void unpack8(const Raw8<T> &r, float (&x)[8]) {
  unpack8<T>(r.w[0], x);
}

/// One lane's rows of a column chunk, 16-byte accesses: rows r, r + 8, ...
/// below `end` of x (and pre), pointers at the lane's 8 columns, kRows rows
/// loaded before any is added. With kPre, x = gelu'(pre) * x in place
/// first. s gets each row's values in row order, whatever kRows is.
template <int kRows, bool kPre, typename T>
__device__ __forceinline__ void columnRowsInFlight(T *x, const T *pre, i64 r,
                                                   i64 end, i64 cols,
                                                   float (&s)[8]) {
  for (; r < end; r += 8 * kRows) {
    Raw8<T> v[kRows], p[kRows];
#pragma unroll
    for (int b = 0; b < kRows; ++b)
      if (r + 8 * b < end) {
        loadRaw8(x + (r + 8 * b) * cols, v[b]);
        if (kPre)
          loadRaw8(pre + (r + 8 * b) * cols, p[b]);
      }
#pragma unroll
    for (int b = 0; b < kRows; ++b) {
      if (r + 8 * b >= end)
        break;
      float f[8];
      unpack8(v[b], f);
      if (kPre) {
        float q[8];
        unpack8(p[b], q);
#pragma unroll
        for (int e = 0; e < 8; ++e)
          f[e] = fallbackGeluGrad(q[e], f[e]);
        store8(x + (r + 8 * b) * cols, f);
      }
#pragma unroll
      for (int e = 0; e < 8; ++e)
        s[e] = __fadd_rn(s[e], f[e]);
    }
  }
}

/// The first half of column sums over x [rows, cols], and with `pre` (may
/// be null) GELU's derivative before them: x = gelu'(pre) * x in place,
/// the sums over those values before their rounding to T (as the fused
/// DGELU_BGRAD epilogue and the CPU executor sum them). Block (bx, by) of
/// 256 threads sums columns [256 bx, 256 bx + 256) over rows [by *
/// rowsPerChunk, ...) into partial[by * cols + c]: a lane takes 8
/// adjacent columns (one 16-byte load of bf16 when cols is a multiple of
/// 8), each of the 8 warps every 8th row, 8 of its rows in flight at once
/// (4 of float32; a quarter of that with pre: twice the bytes a row, and
/// the derivative's registers: at 3 rows of bf16 the 64 registers of 4
/// blocks an SM spill); then the 8 warps' sums are added in order:
/// deterministic, and the same sums either way.
/// (partialRows sizes the chunks so that the grid fills the device about
/// once and the partials are few.)
template <typename T>
__device__ void gemmFallbackColumnPartials(T *x, const T *pre, float *partial,
                                           i64 rows, i64 cols,
                                           i64 rowsPerChunk) {
  __shared__ float sums[8][256];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const i64 c0 = i64(blockIdx.x) * 256 + 8 * lane;
  const i64 begin = i64(blockIdx.y) * rowsPerChunk;
  const i64 end = begin + rowsPerChunk < rows ? begin + rowsPerChunk : rows;
  // The vector path: 16-byte rows (the runtime's buffers are 256-byte
  // aligned). Otherwise one element at a time, the same sums.
  const bool vector = cols % 8 == 0 &&
                      (reinterpret_cast<unsigned long long>(x) |
                       reinterpret_cast<unsigned long long>(pre)) %
                              16 ==
                          0;
  float s[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  // 128 bytes of a lane's rows in flight (8 rows of bf16, 4 of float32).
  constexpr int kRows = 128 / (8 * int(sizeof(T)));
  if (c0 < cols && vector) {
    if (pre)
      columnRowsInFlight<kRows / 4, true>(x + c0, pre + c0, begin + warp, end,
                                          cols, s);
    else
      columnRowsInFlight<kRows, false>(x + c0, pre, begin + warp, end, cols,
                                       s);
  } else if (c0 < cols) {
    // Columns past the end read as 0 (and GELU's derivative keeps them
    // 0): their sums are not written.
    for (i64 r = begin + warp; r < end; r += 8) {
      const i64 at = r * cols + c0;
      float v[8], p[8];
      loadUpTo8(x + at, cols - c0, false, v);
      if (pre) {
        loadUpTo8(pre + at, cols - c0, false, p);
#pragma unroll
        for (int e = 0; e < 8; ++e)
          v[e] = fallbackGeluGrad(p[e], v[e]);
        storeUpTo8(x + at, cols - c0, false, v);
      }
#pragma unroll
      for (int e = 0; e < 8; ++e)
        s[e] = __fadd_rn(s[e], v[e]);
    }
  }
  for (int e = 0; e < 8; ++e)
    sums[warp][8 * lane + e] = s[e];
  __syncthreads();
  const i64 c = i64(blockIdx.x) * 256 + threadIdx.x;
  if (c < cols) {
    float total = 0.0f;
    for (int w = 0; w < 8; ++w)
      total = __fadd_rn(total, sums[w][threadIdx.x]);
    partial[i64(blockIdx.y) * cols + c] = total;
  }
}

/// The second half: out[c] = the sum of the chunks' partials of column c.
/// Block bx of 256 threads takes columns [32 bx, 32 bx + 32), a lane one
/// column: warp w adds chunks w, w + 8, ... in order (8 loads in flight),
/// then warp 0 adds the 8 warps' sums in warp order: deterministic, and
/// with 8 warps a column rather than one thread.
template <typename O>
__device__ void gemmFallbackColumnSums(const float *partial, O *out,
                                       i64 chunks, i64 cols) {
  __shared__ float sums[8][33];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const i64 c = i64(blockIdx.x) * 32 + lane;
  float s = 0.0f;
  if (c < cols) {
    i64 k = warp;
    for (; k + 56 < chunks; k += 64) {
      float p[8];
#pragma unroll
      for (int j = 0; j < 8; ++j)
        p[j] = partial[(k + 8 * j) * cols + c];
#pragma unroll
      for (int j = 0; j < 8; ++j)
        s = __fadd_rn(s, p[j]);
    }
    for (; k < chunks; k += 8)
      s = __fadd_rn(s, partial[k * cols + c]);
  }
  sums[warp][lane] = s;
  __syncthreads();
  if (warp == 0 && c < cols) {
    float total = 0.0f;
    for (int w = 0; w < 8; ++w)
      total = __fadd_rn(total, sums[w][lane]);
    out[c] = fromFloat<O>(total);
  }
}
