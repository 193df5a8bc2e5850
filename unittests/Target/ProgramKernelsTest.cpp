//===- ProgramKernelsTest.cpp - a real program's kernels compile ----------===//
//
// gpt2-tiny lowered to a kernel-level Program (gptc/Conversion), in fp32 and
// bf16, through the CUDA emitter and NVRTC: every launch but the GEMMs
// (matmul, matmul_epilogue) gets a kernel, every kernel compiles for sm_80,
// none spills. The fp32 program covers the f32 paths the GPT-2 lit test
// (bf16) does not.
//
//===----------------------------------------------------------------------===//

#include "TargetTestUtil.h"

#include "gptc/Conversion/LowerToKernels.h"
#include "gptc/Dialect/GPT/GPTDialect.h"
#include "gptc/Models/GPT2.h"
#include "gptc/Runtime/Backend.h"
#include "gptc/Runtime/NVRTC.h"
#include "gptc/Target/CUDA/CompileKernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"

#include <gtest/gtest.h>

#include <sstream>

using namespace gptc;
using namespace gptc::test;

namespace {

/// A fresh kernel cache for this binary's NVRTC compiles.
FreshKernelCache freshKernelCache;

rt::Program tinyProgram(const std::string &precision) {
  mlir::MLIRContext ctx;
  ctx.loadDialect<gpt::GPTDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::math::MathDialect>();
  models::GPT2Config cfg = *models::gpt2Preset("gpt2-tiny");
  OptimizerOptions opts;
  opts.precision = precision;
  mlir::FailureOr<rt::Program> p =
      compileKernelProgram(ctx, cfg, 2, cfg.blockSize, opts);
  if (mlir::failed(p))
    throw std::runtime_error("compileKernelProgram failed");
  return std::move(*p);
}

void compileTiny(const std::string &precision) {
  if (!haveNvrtc())
    GTEST_SKIP() << "no NVRTC";
  rt::Program p = tinyProgram(precision);
  std::ostringstream report;
  std::vector<cuda::KernelResources> rs;
  try {
    rs = compileKernelsReporting(p, "sm_80", report);
  } catch (const std::exception &e) {
    FAIL() << e.what();
  }
  SCOPED_TRACE(report.str());
  size_t launches = 0;
  for (const rt::Function &f : p.functions)
    for (const rt::Launch &l : f.launches) {
      // GEMMs, with or without an epilogue, are cuBLASLt's.
      bool gemm = rt::isGemm(l.kernel);
      EXPECT_EQ(l.deviceKernel < 0, gemm) << l.kernel;
      launches += !gemm;
    }
  size_t shared = 0;
  for (const cuda::KernelResources &r : rs) {
    EXPECT_FALSE(p.kernels[&r - rs.data()].cubin.empty()) << r.name;
    EXPECT_EQ(p.kernels[&r - rs.data()].arch, "sm_80");
    // gpt2-tiny's head dim is small enough for the simple f32 attention to
    // keep its rows in registers too.
    EXPECT_EQ(r.spillStores, 0) << r.name;
    shared += r.launches;
  }
  EXPECT_EQ(shared, launches);
  EXPECT_LT(rs.size(), launches) << "identical launches share kernels";
}

} // namespace

TEST(ProgramKernels, Fp32TinyCompilesForSm80) { compileTiny("fp32"); }

TEST(ProgramKernels, Bf16TinyCompilesForSm80) { compileTiny("bf16"); }
