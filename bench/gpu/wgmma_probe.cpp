// bench/gpu/wgmma_probe.cpp — how fast warpgroup MMA runs on its own, by
// the shared-memory layout it reads, against mma.sync.
//
// Every wgmma attention kernel gptc has tried runs slower than its mma.sync
// twin on an H100 (docs/benchmarks.md), though their SASS shows the wgmma
// instructions back to back. This asks the tensor cores alone, with
// nothing else in the loop: one warpgroup a block multiplies a 64 x 64
// bf16 A by a 64 x N B, N = 64 (gptc's tiles) or 128 (FlashAttention-3's
// scores tiles): 4 wgmma.m64nNk16, or N/2 mma.m16n8k16 a warp with B's
// fragments through ldmatrix, as gptc's kernels do; `iters` times into
// float32, at 1, 2 and 4 blocks an SM (and how many an SM holds at once,
// by the kernel's registers). Variants:
//   rs-k-none    A from registers, B K-major, no swizzle (gptc's scores
//                product: wg::CoreTile's 8 x 8 core matrices)
//   rs-mn-none   A from registers, B N-major, no swizzle (gptc's output
//                product: v's rows are K)
//   rs-k-sw128   A from registers, B K-major, 128-byte swizzle (CUTLASS's
//                and FlashAttention-3's layout)
//   ss-k-none    A and B from shared memory, K-major, no swizzle
//   ss-k-sw128   the same with 128-byte swizzle
//   mma-sync     mma.sync.m16n8k16, B by ldmatrix.x4 from rows padded by
//                16 bytes (gptc's mma::Tile)
// each as one batch a commit group, waited for before the next ("serial",
// as gptc's wgmma forward waits for each product), and with two
// accumulators and one group left in flight ("pipelined"). Each variant's
// product is checked against the host's (small integers: exact in
// float32), so a layout that reads the wrong elements fails rather than
// being timed.
//
//   wgmma_probe [iters]             on a GPU (sm_90): one line a variant
//   wgmma_probe --compile-only DIR  NVRTC only (no GPU needed): DIR/
//                                   probe.cubin and probe.log (ptxas -v)
//
// Prints TFLOP/s (2·64·N·64 a block an iteration); exits non-zero if a
// product is wrong or CUDA fails. prepare.sh builds it (host C++ on the
// driver API, NVRTC by dlopen) and run.sh's `probe` step runs it.

#include "nvrtc_loader.h"

#include <cuda.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

const char *kSource = R"CUDA(
typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short u16;

__device__ __forceinline__ u32 sharedAddress(const void *p) {
  return u32(__cvta_generic_to_shared(p));
}

// Byte offset of element (r, c) of a bf16 tile whose rows hold kCols
// elements, c the contiguous index. kSw128 false: 8 x 8 core matrices of
// 128 contiguous bytes, the one of rows [8rb, 8rb+8) and columns [8cb,
// 8cb+8) at (rb·kCols/8 + cb)·128 (gptc's wg::CoreTile). true (kCols 64):
// rows of 128 bytes, 16-byte chunk q of row r at chunk q ^ (r % 8)
// (SWIZZLE_128B, the tile 1024-byte aligned).
template <bool kSw128, int kCols = 64>
__device__ __forceinline__ u32 offsetOf(int r, int c) {
  if (kSw128)
    return r * 128 + (((c / 8) ^ (r % 8)) * 16) + (c % 8) * 2;
  return ((r / 8) * (kCols / 8) + c / 8) * 128 + (r % 8) * 16 + (c % 8) * 2;
}

__device__ __forceinline__ u64 descriptor(u32 address, u32 lbo, u32 sbo,
                                          u32 swizzle) {
  return u64((address & 0x3ffff) >> 4) | u64(lbo >> 4) << 16 |
         u64(sbo >> 4) << 32 | u64(swizzle) << 62;
}
// K-major, k-slice kc of 16: no swizzle, two core matrices along K 128
// bytes apart, row groups 1024; 128B swizzle, 32 bytes into each row.
template <bool kSw128> __device__ __forceinline__ u64 kMajor(u32 base, int kc) {
  return kSw128 ? descriptor(base + kc * 32, 16, 1024, 1)
                : descriptor(base + kc * 256, 128, 1024, 0);
}
// N-major (the tile's rows are K, kN elements each): gptc's
// wg::CoreTile::keysAlongK.
template <int kN> __device__ __forceinline__ u64 nMajor(u32 base, int kc) {
  return descriptor(base + kc * 2 * kN * 16, kN * 16, 128, 0);
}

template <int kT> __device__ __forceinline__ void pin(float (&d)[kT][4]) {
#pragma unroll
  for (int i = 0; i < kT; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      asm volatile("" : "+f"(d[i][e])::"memory");
}
template <int kT> __device__ __forceinline__ void fence(float (&d)[kT][4]) {
  pin(d);
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// The accumulators' operands: "+f" constraints of d[i][0..3], and the
// instruction's register lists (%0 on) for N of 64 (32 registers a thread)
// and 128 (64).
#define GPTC_ACC(d, i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define GPTC_ACC_N64(d)                                                      \
  GPTC_ACC(d, 0), GPTC_ACC(d, 1), GPTC_ACC(d, 2), GPTC_ACC(d, 3),            \
      GPTC_ACC(d, 4), GPTC_ACC(d, 5), GPTC_ACC(d, 6), GPTC_ACC(d, 7)
#define GPTC_ACC_N128(d)                                                     \
  GPTC_ACC_N64(d), GPTC_ACC(d, 8), GPTC_ACC(d, 9), GPTC_ACC(d, 10),          \
      GPTC_ACC(d, 11), GPTC_ACC(d, 12), GPTC_ACC(d, 13), GPTC_ACC(d, 14),    \
      GPTC_ACC(d, 15)
#define GPTC_REGS_N64                                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define GPTC_REGS_N128                                                       \
  GPTC_REGS_N64 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"

// d += a·b, m64nNk16, A from registers (kTransB: B N-major) or from shared
// memory; scale-d is a predicate: true, accumulate.
template <int kTransB>
__device__ __forceinline__ void wgmmaRS(float (&d)[8][4], const u32 (&a)[4],
                                        u64 b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
               GPTC_REGS_N64 "}, {%32, %33, %34, %35}, %36, p, 1, 1, %37;\n}\n"
               : GPTC_ACC_N64(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),
                 "n"(kTransB), "r"(1));
}
__device__ __forceinline__ void wgmmaSS(float (&d)[8][4], u64 a, u64 b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
               GPTC_REGS_N64 "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
               : GPTC_ACC_N64(d)
               : "l"(a), "l"(b), "r"(1));
}
template <int kTransB>
__device__ __forceinline__ void wgmmaRS(float (&d)[16][4], const u32 (&a)[4],
                                        u64 b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %70, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
               GPTC_REGS_N128 "}, {%64, %65, %66, %67}, %68, p, 1, 1, %69;\n}\n"
               : GPTC_ACC_N128(d)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b),
                 "n"(kTransB), "r"(1));
}
__device__ __forceinline__ void wgmmaSS(float (&d)[16][4], u64 a, u64 b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
               GPTC_REGS_N128 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
               : GPTC_ACC_N128(d)
               : "l"(a), "l"(b), "r"(1));
}
__device__ __forceinline__ void mma16816(float (&c)[4], const u32 (&a)[4],
                                         u32 b0, u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
                 "r"(b1));
}
__device__ __forceinline__ void ldmatrix4(u32 (&r)[4], u32 address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, "
               "[%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// kMode: 0 rs-k-none, 1 rs-mn-none, 2 rs-k-sw128, 3 ss-k-none,
// 4 ss-k-sw128, 5 mma-sync; kN: B's N (64 or 128). a: 64 x 64 bf16,
// row-major a[m][k]; b: 128 x 64, b[n][k] (B's K along its rows), its
// first kN rows used. Block 0 writes its 64 x kN product to out.
template <int kMode, bool kPipelined, int kN>
__device__ void probe(const u16 *a, const u16 *b, float *out, int iters) {
  constexpr bool kSw128 = kMode == 2 || kMode == 4;
  constexpr int kPad = 72; // mma-sync's rows: 64 elements and 16 bytes
  constexpr int kT = kN / 8; // n-tiles of 8
  __shared__ __align__(1024) u16 sA[64 * 64], sB[kN * kPad];
  const int t = threadIdx.x, lane = t % 32, warp = t / 32, g = lane / 4,
            tq = lane % 4;
  for (int i = t; i < kN * 64; i += 128) {
    const int r = i / 64, c = i % 64; // b: r = n, c = k
    if (kMode == 5)
      sB[r * kPad + c] = b[i];
    else if (kMode == 1) // N-major: the tile's rows are k
      sB[offsetOf<false, kN>(c, r) / 2] = b[i];
    else
      sB[offsetOf<kSw128>(r, c) / 2] = b[i];
  }
  for (int i = t; i < 64 * 64; i += 128)
    sA[offsetOf<kSw128>(i / 64, i % 64) / 2] = a[i];
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  // This warp's 16 rows of A as mma.m16n8k16 A fragments, k-slice kc.
  u32 af[4][4];
  auto pair = [&](int m, int k) {
    return u32(a[m * 64 + k]) | u32(a[m * 64 + k + 1]) << 16;
  };
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) {
    const int m = 16 * warp + g, k = 16 * kc + 2 * tq;
    af[kc][0] = pair(m, k);
    af[kc][1] = pair(m + 8, k);
    af[kc][2] = pair(m, k + 8);
    af[kc][3] = pair(m + 8, k + 8);
  }
  const u32 aBase = sharedAddress(sA), bBase = sharedAddress(sB);
  float d0[kT][4] = {}, d1[kT][4] = {};
  auto batch = [&](float (&d)[kT][4]) {
    if (kMode == 5) {
#pragma unroll
      for (int kc = 0; kc < 4; ++kc)
#pragma unroll
        for (int np = 0; np < kT / 2; ++np) {
          // Matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7),
          // (n 8-15, k 8-15) of n-tiles 2np and 2np+1.
          const int m = lane / 8;
          const int n = 16 * np + 8 * (m / 2) + lane % 8,
                    k = 16 * kc + 8 * (m % 2);
          u32 bf[4];
          ldmatrix4(bf, bBase + (n * kPad + k) * 2);
          mma16816(d[2 * np], af[kc], bf[0], bf[1]);
          mma16816(d[2 * np + 1], af[kc], bf[2], bf[3]);
        }
      return;
    }
    fence(d);
#pragma unroll
    for (int kc = 0; kc < 4; ++kc) {
      if (kMode == 3 || kMode == 4)
        wgmmaSS(d, kMajor<kSw128>(aBase, kc), kMajor<kSw128>(bBase, kc));
      else if (kMode == 1)
        wgmmaRS<1>(d, af[kc], nMajor<kN>(bBase, kc));
      else
        wgmmaRS<0>(d, af[kc], kMajor<kSw128>(bBase, kc));
    }
    commit();
  };
  for (int it = 0; it < iters; it += kPipelined ? 2 : 1) {
    batch(d0);
    if (kMode != 5) {
      if (kPipelined)
        wait<1>();
      else
        wait<0>();
      pin(d0);
    }
    if (kPipelined) {
      batch(d1);
      if (kMode != 5) {
        wait<1>();
        pin(d1);
      }
    }
  }
  if (kMode != 5) {
    wait<0>();
    pin(d0);
    pin(d1);
  }
  if (blockIdx.x != 0)
    return;
#pragma unroll
  for (int nt = 0; nt < kT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int m = 16 * warp + g + 8 * (e / 2), n = 8 * nt + 2 * tq + e % 2;
      out[m * kN + n] = d0[nt][e] + d1[nt][e];
    }
}

#define GPTC_PROBE(name, mode, pipelined, n)                                 \
  extern "C" __global__ void __launch_bounds__(128)                          \
      name##_n##n(const u16 *a, const u16 *b, float *out, int iters) {       \
    probe<mode, pipelined, n>(a, b, out, iters);                             \
  }
#define GPTC_PROBES(n)                                                       \
  GPTC_PROBE(rs_k_none_serial, 0, false, n)                                  \
  GPTC_PROBE(rs_k_none_pipelined, 0, true, n)                                \
  GPTC_PROBE(rs_mn_none_serial, 1, false, n)                                 \
  GPTC_PROBE(rs_mn_none_pipelined, 1, true, n)                               \
  GPTC_PROBE(rs_k_sw128_serial, 2, false, n)                                 \
  GPTC_PROBE(rs_k_sw128_pipelined, 2, true, n)                               \
  GPTC_PROBE(ss_k_none_serial, 3, false, n)                                  \
  GPTC_PROBE(ss_k_none_pipelined, 3, true, n)                                \
  GPTC_PROBE(ss_k_sw128_serial, 4, false, n)                                 \
  GPTC_PROBE(ss_k_sw128_pipelined, 4, true, n)                               \
  GPTC_PROBE(mma_sync_serial, 5, false, n)                                   \
  GPTC_PROBE(mma_sync_pipelined, 5, true, n)
GPTC_PROBES(64)
GPTC_PROBES(128)
)CUDA";

struct Variant {
  const char *label, *entry;
};
const Variant kVariants[] = {
    {"rs-k-none serial", "rs_k_none_serial"},
    {"rs-k-none pipelined", "rs_k_none_pipelined"},
    {"rs-mn-none serial", "rs_mn_none_serial"},
    {"rs-mn-none pipelined", "rs_mn_none_pipelined"},
    {"rs-k-sw128 serial", "rs_k_sw128_serial"},
    {"rs-k-sw128 pipelined", "rs_k_sw128_pipelined"},
    {"ss-k-none serial", "ss_k_none_serial"},
    {"ss-k-none pipelined", "ss_k_none_pipelined"},
    {"ss-k-sw128 serial", "ss_k_sw128_serial"},
    {"ss-k-sw128 pipelined", "ss_k_sw128_pipelined"},
    {"mma-sync serial", "mma_sync_serial"},
    {"mma-sync pipelined", "mma_sync_pipelined"},
};

[[noreturn]] void fail(const std::string &what) {
  std::fprintf(stderr, "wgmma_probe: %s\n", what.c_str());
  std::exit(3);
}

void check(CUresult r, const char *what) {
  if (r == CUDA_SUCCESS)
    return;
  const char *name = "?";
  cuGetErrorName(r, &name);
  fail(std::string(what) + ": " + name);
}

/// The probe kernels' cubin for sm_90a and ptxas's report.
std::string compile(std::string &log) {
  std::string cubin;
  if (!bench::nvrtcCubin(kSource, "wgmma_probe.cu",
                         {"--gpu-architecture=sm_90a", "-std=c++17",
                          "--ptxas-options=-v"},
                         cubin, log))
    fail(log);
  return cubin;
}

uint16_t toBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return uint16_t(u >> 16); // small integers: exact
}

void writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out)
    fail("cannot write " + path);
}

} // namespace

int main(int argc, char **argv) {
  std::string log;
  if (argc == 3 && std::string(argv[1]) == "--compile-only") {
    const std::string cubin = compile(log);
    writeFile(std::string(argv[2]) + "/probe.cubin", cubin);
    writeFile(std::string(argv[2]) + "/probe.log", log);
    return 0;
  }
  const int iters = argc > 1 ? std::atoi(argv[1]) : 2048;
  if (argc > 2 || iters <= 0 || iters % 2 != 0)
    fail("usage: wgmma_probe [iters (even, > 0)] | --compile-only DIR");

  check(cuInit(0), "cuInit");
  CUdevice dev;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  int major = 0, minor = 0, sms = 0;
  cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                       dev);
  cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                       dev);
  cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  if (major != 9 || minor != 0)
    fail("an sm_90 GPU is needed, this is sm_" + std::to_string(major) +
         std::to_string(minor));
  char name[256] = "";
  cuDeviceGetName(name, sizeof name, dev);
  CUcontext ctx;
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  const std::string cubin = compile(log);
  CUmodule module;
  check(cuModuleLoadData(&module, cubin.data()), "cuModuleLoadData");

  // a[m][k] in {-1, 0, 1}, b[n][k] in {-2, ..., 2} (128 rows; an n64
  // variant takes the first 64): every product sum is an integer below
  // 2^24 in magnitude, exact in float32 at any order.
  std::vector<uint16_t> a(64 * 64), b(128 * 64);
  for (int r = 0; r < 128; ++r)
    for (int c = 0; c < 64; ++c) {
      if (r < 64)
        a[r * 64 + c] = toBf16(float((r + 2 * c) % 3 - 1));
      b[r * 64 + c] = toBf16(float((3 * r + c) % 5 - 2));
    }
  auto product = [&](int n) { // 64 x n, `iters` times
    std::vector<double> want(size_t(64 * n), 0.0);
    for (int m = 0; m < 64; ++m)
      for (int j = 0; j < n; ++j)
        for (int k = 0; k < 64; ++k)
          want[size_t(m * n + j)] += double((m + 2 * k) % 3 - 1) *
                                     double((3 * j + k) % 5 - 2) *
                                     double(iters);
    return want;
  };
  CUdeviceptr dA, dB, dOut;
  check(cuMemAlloc(&dA, a.size() * 2), "cuMemAlloc");
  check(cuMemAlloc(&dB, b.size() * 2), "cuMemAlloc");
  check(cuMemAlloc(&dOut, 64 * 128 * 4), "cuMemAlloc");
  check(cuMemcpyHtoD(dA, a.data(), a.size() * 2), "cuMemcpyHtoD");
  check(cuMemcpyHtoD(dB, b.data(), b.size() * 2), "cuMemcpyHtoD");
  CUevent start, stop;
  check(cuEventCreate(&start, 0), "cuEventCreate");
  check(cuEventCreate(&stop, 0), "cuEventCreate");

  std::printf("wgmma_probe on %s (%d SMs): 64xNx64 bf16 products into "
              "float32, %d a block; TFLOP/s (best of 3), and how many blocks "
              "an SM holds at once\n",
              name, sms, iters);
  std::printf("%-27s %5s %14s %14s %14s\n", "variant", "fits", "1 block/SM",
              "2 blocks/SM", "4 blocks/SM");
  int wrong = 0;
  for (int n : {64, 128}) {
    const std::vector<double> want = product(n);
    for (const Variant &v : kVariants) {
      const std::string entry = std::string(v.entry) + "_n" + std::to_string(n);
      CUfunction fn;
      check(cuModuleGetFunction(&fn, module, entry.c_str()), entry.c_str());
      int fits = 0;
      check(cuOccupancyMaxActiveBlocksPerMultiprocessor(&fits, fn, 128, 0),
            entry.c_str());
      std::printf("%-27s %5d",
                  (std::string(v.label) + " n" + std::to_string(n)).c_str(),
                  fits);
      for (int perSM : {1, 2, 4}) {
        int it = iters;
        void *args[] = {&dA, &dB, &dOut, &it};
        auto launch = [&] {
          check(cuLaunchKernel(fn, unsigned(sms * perSM), 1, 1, 128, 1, 1, 0,
                               nullptr, args, nullptr),
                entry.c_str());
        };
        check(cuMemsetD8(dOut, 0, 64 * 128 * 4), "cuMemsetD8");
        launch(); // warm-up, and the product checked
        check(cuCtxSynchronize(), entry.c_str());
        std::vector<float> out(size_t(64 * n));
        check(cuMemcpyDtoH(out.data(), dOut, out.size() * 4), "cuMemcpyDtoH");
        int bad = 0;
        for (size_t i = 0; i < out.size(); ++i)
          bad += double(out[i]) != want[i];
        float best = 1e30f;
        for (int rep = 0; rep < 3; ++rep) {
          check(cuEventRecord(start, nullptr), "cuEventRecord");
          launch();
          check(cuEventRecord(stop, nullptr), "cuEventRecord");
          check(cuEventSynchronize(stop), "cuEventSynchronize");
          float ms = 0;
          check(cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
          best = std::min(best, ms);
        }
        const double flops =
            2.0 * 64 * n * 64 * double(iters) * sms * perSM;
        if (bad) {
          ++wrong;
          std::printf(" %8.1f WRONG", flops / (best * 1e-3) / 1e12);
        } else {
          std::printf(" %14.1f", flops / (best * 1e-3) / 1e12);
        }
      }
      std::printf("\n");
    }
  }
  if (wrong)
    std::printf("%d variant runs computed a wrong product (WRONG): their "
                "layout reads other elements\n",
                wrong);
  return wrong ? 1 : 0;
}
