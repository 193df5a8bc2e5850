//===- TargetTestUtil.h - shared scaffolding of the CUDA tests --*- C++ -*-===//
//
// What the CUDA emitter's tests share: a fresh NVRTC kernel cache, whether
// NVRTC is there, compiling a Program's kernels with a report, a builder of
// one-function Programs launch by launch, and a builder of the
// ScalarPrograms fused launches carry.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_UNITTESTS_TARGET_TARGETTESTUTIL_H
#define GPTC_UNITTESTS_TARGET_TARGETTESTUTIL_H

#include "gptc/Executor/ScalarProgram.h"
#include "gptc/Runtime/Backend.h"
#include "gptc/Runtime/NVRTC.h"
#include "gptc/Runtime/Program.h"
#include "gptc/Target/CUDA/CompileKernels.h"

#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace gptc::test {

/// NVRTC compiles for real in every run: a fresh kernel cache, removed at
/// exit (the default, ~/.cache/gptc, would turn the test into a lookup).
/// A test binary that compiles kernels holds one at namespace scope.
struct FreshKernelCache {
  FreshKernelCache() {
    char dir[] = "/tmp/gptc-test-cache-XXXXXX";
    if (mkdtemp(dir)) {
      path = dir;
      setenv("GPTC_CACHE_DIR", dir, 1);
    }
  }
  ~FreshKernelCache() {
    if (!path.empty())
      std::filesystem::remove_all(path);
  }
  std::string path;
};

/// Whether NVRTC can be loaded.
inline bool haveNvrtc() {
  try {
    rt::nvrtcVersion();
    return true;
  } catch (const rt::DeviceError &) {
    return false;
  }
}

/// Compiles every kernel of `p` for `arch` with NVRTC on two threads,
/// writing ptxas's report to `report`.
inline std::vector<cuda::KernelResources>
compileKernelsReporting(rt::Program &p, const std::string &arch,
                        std::ostream &report) {
  cuda::CompileKernelsOptions opts;
  opts.report = &report;
  opts.threads = 2;
  return cuda::compileKernels(p, arch, opts);
}

/// A Program with one function, "forward", built buffer by buffer and
/// launch by launch. With `withLocs`, launch n (from 1) is at "test:n:1".
struct Builder {
  rt::Program p;
  rt::Function *f;
  bool withLocs;
  explicit Builder(bool withLocs = false) : withLocs(withLocs) {
    p.functions.push_back({"forward", {}, {}, {}, -1});
    f = &p.functions.back();
  }
  int buf(rt::DType t, std::vector<int64_t> s) {
    rt::Buffer b;
    b.name = "v" + std::to_string(p.buffers.size());
    b.dtype = t;
    b.shape = std::move(s);
    p.buffers.push_back(b);
    return int(p.buffers.size()) - 1;
  }
  rt::Launch &launch(std::string kind, std::vector<int> ins,
                     std::vector<int> outs) {
    rt::Launch l;
    l.kernel = std::move(kind);
    l.inputs = std::move(ins);
    l.outputs = std::move(outs);
    if (withLocs)
      l.loc = "test:" + std::to_string(f->launches.size() + 1) + ":1";
    f->launches.push_back(std::move(l));
    return f->launches.back();
  }
  /// gpt.attention_row_dot of out `o` and `dout` into a new float32
  /// buffer of shape `rows` ([B, H, T]; `heads` for packed [B, T, C]
  /// operands), as gpt-autodiff writes it ahead of an attention gradient,
  /// which takes the result as its last input.
  int rowDot(int o, int dout, std::vector<int64_t> rows, int64_t heads = 0) {
    int delta = buf(rt::DType::F32, std::move(rows));
    rt::Launch &l = launch("attention_row_dot", {o, dout}, {delta});
    if (heads)
      l.ints["num_heads"] = heads;
    return delta;
  }
};

/// A ScalarProgram of `numArgs` arguments, one instruction at a time, each
/// writing the next register.
struct ScalarBuilder {
  exec::ScalarProgram s;
  explicit ScalarBuilder(int numArgs) { s.numArgs = numArgs; }
  /// Appends `op` on registers `a`, `b` (or the constant `v`); returns the
  /// register it writes.
  int emit(exec::Opcode op, int a, int b = 0, float v = 0) {
    s.code.push_back({op, s.numArgs + int(s.code.size()), a, b, v});
    return s.numArgs + int(s.code.size()) - 1;
  }
  int constant(float v) { return emit(exec::Opcode::Const, 0, 0, v); }
  /// The program, returning `results`.
  exec::ScalarProgram finish(std::vector<int> results) {
    s.numRegisters = s.numArgs + int(s.code.size());
    s.results = std::move(results);
    return std::move(s);
  }
};

/// x = arg 0 + arg 1 and the tanh GELU of x, as the fuser writes them:
/// returns {GELU(x), x}.
inline std::pair<int, int> emitGeluOfSum(ScalarBuilder &b) {
  using exec::Opcode;
  int x = b.emit(Opcode::Add, 0, 1);
  int x3 = b.emit(Opcode::Mul, b.emit(Opcode::Mul, x, x), x);
  int inner =
      b.emit(Opcode::Add, x, b.emit(Opcode::Mul, b.constant(0.044715f), x3));
  int t = b.emit(Opcode::Tanh,
                 b.emit(Opcode::Mul, b.constant(0.7978845608f), inner));
  int one = b.emit(Opcode::Add, b.constant(1.0f), t);
  int y = b.emit(Opcode::Mul, b.emit(Opcode::Mul, b.constant(0.5f), x), one);
  return {y, x};
}

} // namespace gptc::test

#endif // GPTC_UNITTESTS_TARGET_TARGETTESTUTIL_H
