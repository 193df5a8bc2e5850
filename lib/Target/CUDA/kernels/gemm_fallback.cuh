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
// epilogue's by that one rounding.
//
//===----------------------------------------------------------------------===//

// GELU (tanh) and its derivative with the operations and float32 constants
// of gpt-fuse-elementwise's bodies and the CPU executor, in their order:
// k0 = sqrt(2/pi), k1 = 0.044715, k3 = 3 * 0.044715, each rounded to float.
__device__ __forceinline__ float fallbackGelu(float x) {
  const float k0 = 0x1.988454p-1f, k1 = 0x1.6e4e26p-5f;
  float cube = __fmul_rn(__fmul_rn(x, x), x);
  float t = tanhf(__fmul_rn(k0, __fadd_rn(x, __fmul_rn(k1, cube))));
  return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, t));
}
__device__ __forceinline__ float fallbackGeluGrad(float x, float dy) {
  const float k0 = 0x1.988454p-1f, k1 = 0x1.6e4e26p-5f, k3 = 0x1.12ba9ep-3f;
  float t = tanhf(
      __fmul_rn(k0, __fadd_rn(x, __fmul_rn(k1, __fmul_rn(__fmul_rn(x, x), x)))));
  float dInner = __fmul_rn(k0, __fadd_rn(1.0f, __fmul_rn(k3, __fmul_rn(x, x))));
  float left = __fmul_rn(0.5f, __fadd_rn(1.0f, t));
  float right = __fmul_rn(
      __fmul_rn(__fmul_rn(0.5f, x), __fsub_rn(1.0f, __fmul_rn(t, t))), dInner);
  return __fmul_rn(__fadd_rn(left, right), dy);
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

/// d = gelu'(pre) * d in place over n elements.
template <typename T>
__device__ void gemmFallbackGeluGrad(T *d, const T *pre, i64 n) {
  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += i64(gridDim.x) * blockDim.x)
    d[i] = fromFloat<T>(fallbackGeluGrad(toFloat(pre[i]), toFloat(d[i])));
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

/// out = GELU(pre) over n elements (out may be pre: in place). The second
/// half of GELU_AUX_BIAS done as cuBLASLt's plain BIAS epilogue, which
/// writes pre, and this pass: on an H100, GPT-2's c_fc GEMM took 163 µs
/// with GELU_AUX_BIAS against PyTorch's 83 with BIAS, and this pass moves
/// 4 bytes an element. Thread t of a block takes 8 adjacent elements (one
/// 16-byte access of bf16) in each of kChunks chunks 8·256 elements
/// apart, all loaded before any is used.
template <typename T>
__device__ void gemmFallbackGelu(T *out, const T *pre, i64 n) {
  constexpr int kChunks = 4;
  const bool aligned = (reinterpret_cast<unsigned long long>(out) |
                        reinterpret_cast<unsigned long long>(pre)) %
                           16 ==
                       0;
  const i64 span = i64(blockDim.x) * 8; // one chunk of the block
  for (i64 base = i64(blockIdx.x) * span * kChunks + 8 * threadIdx.x;
       base < n; base += i64(gridDim.x) * span * kChunks) {
    float x[kChunks][8];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const i64 at = base + c * span;
      if (at < n)
        loadUpTo8(pre + at, n - at, aligned && at + 8 <= n, x[c]);
    }
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const i64 at = base + c * span;
      if (at >= n)
        continue;
#pragma unroll
      for (int e = 0; e < 8; ++e)
        x[c][e] = fallbackGelu(x[c][e]);
      storeUpTo8(out + at, n - at, aligned && at + 8 <= n, x[c]);
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
/// 8), each of the 8 warps every 8th row, kRows of its rows in flight at
/// once; then the 8 warps' sums are added in order: deterministic.
template <typename T>
__device__ void gemmFallbackColumnPartials(T *x, const T *pre, float *partial,
                                           i64 rows, i64 cols,
                                           i64 rowsPerChunk) {
  constexpr int kRows = 4;
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
  for (i64 r0 = begin + warp; r0 < end && c0 < cols; r0 += 8 * kRows) {
    float v[kRows][8], p[kRows][8];
    // Every load of the kRows rows before any use. Columns past the end
    // read as 0 (and GELU's derivative keeps them 0): their sums are not
    // written.
#pragma unroll
    for (int b = 0; b < kRows; ++b) {
      const i64 at = (r0 + 8 * b) * cols + c0;
      if (r0 + 8 * b >= end)
        continue;
      loadUpTo8(x + at, cols - c0, vector, v[b]);
      if (pre)
        loadUpTo8(pre + at, cols - c0, vector, p[b]);
    }
#pragma unroll
    for (int b = 0; b < kRows; ++b) {
      const i64 at = (r0 + 8 * b) * cols + c0;
      if (r0 + 8 * b >= end)
        continue;
      if (pre) {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          v[b][e] = fallbackGeluGrad(p[b][e], v[b][e]);
        storeUpTo8(x + at, cols - c0, vector, v[b]);
      }
#pragma unroll
      for (int e = 0; e < 8; ++e)
        s[e] = __fadd_rn(s[e], v[b][e]);
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
/// column: warp w adds chunks w, w + 8, ... in order (4 loads in flight),
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
    for (; k + 24 < chunks; k += 32) {
      float p[4];
#pragma unroll
      for (int j = 0; j < 4; ++j)
        p[j] = partial[(k + 8 * j) * cols + c];
#pragma unroll
      for (int j = 0; j < 4; ++j)
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
