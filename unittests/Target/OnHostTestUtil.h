//===- OnHostTestUtil.h - what the kernels-on-host tests share --*- C++ -*-===//
//
// KernelsOnHostTest.cpp and AttentionOnHostTest.cpp run generated kernels
// compiled for the host (HostKernels.h) against the CPU executor; both
// need random operands, the comparisons, the attention reference
// (AttentionBothWays), a run of a program's launches on random data, and
// the mutations that take one statement out of a kernel's source to show
// that the race checker needs it.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_UNITTESTS_TARGET_ONHOSTTESTUTIL_H
#define GPTC_UNITTESTS_TARGET_ONHOSTTESTUTIL_H

#include "HostKernels.h"
#include "TargetTestUtil.h"

#include "gptc/Executor/Kernels.h"
#include "gptc/Executor/Precision.h"
#include "gptc/Target/CUDA/EmitCUDA.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace gptc::test {

using rt::DType;
using Shape = std::vector<int64_t>;

inline exec::HostTensor randomFloats(Shape shape, uint32_t seed) {
  exec::HostTensor t = exec::HostTensor::floats(std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (float &x : t.f32)
    x = u(rng);
  return t;
}

inline exec::HostTensor randomIds(Shape shape, uint32_t seed) {
  exec::HostTensor t = exec::HostTensor::ids(std::move(shape));
  std::mt19937 rng(seed);
  for (int32_t &x : t.i32)
    x = int32_t(rng() % 1000) - 500;
  return t;
}

inline void expectSame(const exec::HostTensor &want,
                       const std::vector<float> &got, const char *what) {
  ASSERT_EQ(want.f32.size(), got.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(want.f32[i], got[i]) << what << " element " << i;
}

/// The attention implementation a kernel's entry calls: "TensorCores" (the
/// forward or backward that takes wgmma on sm_90a), "SplitTensorCores" (the
/// split backward that does), "Mma" (mma.sync, the default forward and the
/// backward), "Atomic" (the backward summing dq with atomics), "Simple", or
/// "" for none. (The source holds the direction's attention headers; the
/// entry's call is the line that starts with two spaces.)
inline std::string attentionImpl(const std::string &source) {
  for (const char *impl :
       {"TensorCores", "SplitTensorCores", "StoredDsTensorCores",
        "Keys128TensorCores", "Mma", "Atomic", "Simple"})
    for (const char *dir : {"Forward", "Backward"})
      if (source.find(std::string("\n  attention") + dir + impl + "<") !=
          std::string::npos)
        return impl;
  return "";
}

/// The index of p's first kernel whose attention is `impl`; p.kernels.size()
/// if none.
inline size_t kernelWithImpl(const rt::Program &p, const std::string &impl) {
  size_t k = 0;
  while (k < p.kernels.size() && attentionImpl(p.kernels[k].source) != impl)
    ++k;
  return k;
}

/// The index of p's first kernel whose body calls the template `fn`;
/// p.kernels.size() if none.
inline size_t kernelCalling(const rt::Program &p, const std::string &fn) {
  size_t k = 0;
  while (k < p.kernels.size() &&
         p.kernels[k].source.find("\n  " + fn + "<") == std::string::npos)
    ++k;
  return k;
}

inline const char *targetName(HostTarget t) {
  return t == HostTarget::Sm90a ? "sm_90a" : "sm_80";
}

inline void expectNear(const exec::HostTensor &want,
                       const std::vector<float> &got, float tolerance,
                       const char *what) {
  ASSERT_EQ(want.f32.size(), got.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(want.f32[i], got[i],
                tolerance * std::max(1.0f, std::fabs(want.f32[i])))
        << what << " element " << i;
}

/// gpt.flash_attention on q, k, v ([B, H, T, D] of one dtype) and its
/// float32 gradient with dout (and the row dot it reads), causal and not,
/// and their check against the CPU executor, whose backward computes the
/// row dot itself from out and dout.
struct AttentionBothWays {
  int q, k, v, dout;
  int o[2], lse[2], dq[2], dk[2], dv[2], delta[2]; ///< [0] causal
  float scale;

  AttentionBothWays(Builder &b, DType t, const Shape &qs, float scale)
      : scale(scale) {
    q = b.buf(t, qs), k = b.buf(t, qs), v = b.buf(t, qs), dout = b.buf(t, qs);
    const Shape rows(qs.begin(), qs.end() - 1);
    for (int c = 0; c < 2; ++c) {
      const bool causal = c == 0;
      o[c] = b.buf(t, qs), lse[c] = b.buf(DType::F32, rows);
      auto &fa = b.launch("flash_attention", {q, k, v}, {o[c], lse[c]});
      fa.ints["causal"] = causal;
      fa.floats["scale"] = scale;
      dq[c] = b.buf(DType::F32, qs), dk[c] = b.buf(DType::F32, qs),
      dv[c] = b.buf(DType::F32, qs);
      delta[c] = b.rowDot(o[c], dout, rows);
      auto &fag = b.launch("flash_attention_grad",
                           {q, k, v, o[c], lse[c], dout, delta[c]},
                           {dq[c], dk[c], dv[c]});
      fag.ints["causal"] = causal;
      fag.floats["scale"] = scale;
    }
  }

  /// Every buffer the launches write.
  std::vector<int> results() const {
    std::vector<int> ids;
    for (int c = 0; c < 2; ++c)
      ids.insert(ids.end(), {o[c], lse[c], dq[c], dk[c], dv[c], delta[c]});
    return ids;
  }

  void check(const std::vector<exec::HostTensor> &data, float outTol,
             float lseTol, float dotTol, float gradTol) const {
    for (int c = 0; c < 2; ++c) {
      const bool causal = c == 0;
      SCOPED_TRACE(causal ? "causal" : "not causal");
      std::vector<exec::HostTensor> fw =
          exec::flashAttention(data[q], data[k], data[v], scale, causal);
      expectNear(fw[0], data[o[c]].f32, outTol, "flash_attention out");
      expectNear(fw[1], data[lse[c]].f32, lseTol, "flash_attention lse");
      expectNear(exec::attentionRowDot(data[o[c]], data[dout]),
                 data[delta[c]].f32, dotTol, "attention_row_dot");
      std::vector<exec::HostTensor> bw =
          exec::flashAttentionGrad(data[q], data[k], data[v], data[o[c]],
                                   data[lse[c]], data[dout], scale, causal);
      expectNear(bw[0], data[dq[c]].f32, gradTol, "flash_attention_grad dq");
      expectNear(bw[1], data[dk[c]].f32, gradTol, "flash_attention_grad dk");
      expectNear(bw[2], data[dv[c]].f32, gradTol, "flash_attention_grad dv");
    }
  }
};

/// Random values for every buffer of `p` (seeded `seed` + its index; bf16
/// ones rounded to bf16 and handed to the kernels as bf16 bits; int32 ones
/// ids in [0, idLimit)), then every launch of its first function in order;
/// returns the buffers' values, the kernels' outputs included (bf16 ones
/// widened to float32 after each launch, for the launches that read them).
/// `reshape`, if given, may change a float buffer's random values (by
/// buffer id) before they are rounded to its type.
inline std::vector<exec::HostTensor> runOnRandomData(
    rt::Program &p, HostKernels &kernels, uint32_t seed, int32_t idLimit = 1,
    const std::function<void(int, std::vector<float> &)> &reshape = {}) {
  std::vector<exec::HostTensor> data(p.buffers.size());
  std::vector<std::vector<uint16_t>> bits(p.buffers.size());
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    if (p.buffers[i].dtype == DType::I32) {
      data[i] = exec::HostTensor::ids(p.buffers[i].shape);
      std::mt19937 rng(seed + uint32_t(i));
      for (int32_t &id : data[i].i32)
        id = int32_t(rng() % uint32_t(idLimit));
      continue;
    }
    data[i] = randomFloats(p.buffers[i].shape, uint32_t(seed + i));
    if (reshape)
      reshape(int(i), data[i].f32);
    if (p.buffers[i].dtype != DType::BF16)
      continue;
    for (float &x : data[i].f32) {
      x = exec::roundToBF16(x);
      uint32_t u;
      std::memcpy(&u, &x, 4);
      bits[i].push_back(uint16_t(u >> 16));
    }
  }
  for (size_t i = 0; i < p.functions[0].launches.size(); ++i) {
    std::vector<void *> ptrs;
    const rt::Launch &l = p.functions[0].launches[i];
    for (int id : l.inputs)
      ptrs.push_back(!bits[id].empty() ? static_cast<void *>(bits[id].data())
                     : data[id].i32.empty()
                         ? static_cast<void *>(data[id].f32.data())
                         : static_cast<void *>(data[id].i32.data()));
    for (int id : l.outputs)
      ptrs.push_back(!bits[id].empty() ? static_cast<void *>(bits[id].data())
                     : data[id].i32.empty()
                         ? static_cast<void *>(data[id].f32.data())
                         : static_cast<void *>(data[id].i32.data()));
    kernels.run(i, ptrs);
    for (int id : l.outputs)
      for (size_t e = 0; e < bits[id].size(); ++e) {
        uint32_t u = uint32_t(bits[id][e]) << 16;
        std::memcpy(&data[id].f32[e], &u, 4);
      }
  }
  return data;
}

/// Where function `name` of a kernel source begins and ends: its definition
/// (the first `name(` after a space or at a line's start, followed by `{`
/// before any `;`) to the `}` that starts a line after it.
inline std::pair<size_t, size_t> functionSpan(const std::string &source,
                                              const std::string &name) {
  for (size_t at = source.find(name + "("); at != std::string::npos;
       at = source.find(name + "(", at + 1)) {
    if (at == 0 || (source[at - 1] != ' ' && source[at - 1] != '\n'))
      continue;
    size_t brace = source.find('{', at), semi = source.find(';', at);
    if (brace < semi)
      return {at, source.find("\n}", brace)};
  }
  return {std::string::npos, std::string::npos};
}

/// Runs `check` on `p` with kernel `k`'s source [at, at + length) replaced
/// by `replacement`, compiled for the host (with the line of `at`); false
/// (and a failure) if it does not compile.
inline bool withMutation(
    const rt::Program &p, size_t k, size_t at, size_t length,
    const std::string &replacement, HostTarget target,
    const std::function<void(rt::Program &, HostKernels &, size_t)> &check) {
  const std::string &source = p.kernels[k].source;
  rt::Program mutated = p;
  mutated.kernels[k].source =
      source.substr(0, at) + replacement + source.substr(at + length);
  HostKernels kernels(mutated, target);
  EXPECT_TRUE(kernels.ok()) << kernels.error;
  if (!kernels.ok())
    return false;
  check(mutated, kernels,
        std::count(source.begin(), source.begin() + at, '\n') + 1);
  return true;
}

/// The other side of expectEachNeeded: with every statement in place, p's
/// kernels run on random data with nothing reported (a report throws).
inline void expectRunsUnreported(rt::Program &p, HostTarget target) {
  HostKernels kernels(p, target);
  ASSERT_TRUE(kernels.ok()) << kernels.error;
  runOnRandomData(p, kernels, 7);
}

/// Replaces each `statement` in function `fn` of kernel `k` by
/// `replacement`, one at a time, and expects `run` (the results' bits) to
/// report a race or a misuse (throw std::runtime_error) or to return
/// other bits than `want`; returns how many it replaced.
template <class Bits>
int expectEachMutationSeen(
    const rt::Program &p, size_t k, const std::string &fn,
    const std::string &statement, const std::string &replacement,
    HostTarget target, const Bits &want,
    const std::function<Bits(HostKernels &)> &run) {
  const std::string source = p.kernels[k].source;
  auto [from, to] = functionSpan(source, fn);
  EXPECT_NE(from, std::string::npos) << fn;
  int done = 0;
  for (size_t at = source.find(statement, from); at < to;
       at = source.find(statement, at + 1), ++done)
    withMutation(p, k, at, statement.size(), replacement, target,
                 [&](rt::Program &, HostKernels &kernels, size_t line) {
                   try {
                     EXPECT_NE(run(kernels), want)
                         << statement << " at line " << line
                         << " replaced by '" << replacement
                         << "': nothing reported, the same bits";
                   } catch (const std::runtime_error &) {
                     // (a race or a misuse: reported)
                   }
                 });
  return done;
}

/// Takes each `statement` out of function `fn` of kernel `k`, one at a
/// time, and expects the run to report `message`; returns how many.
inline int expectEachNeeded(const rt::Program &p, size_t k,
                            const std::string &fn, const std::string &statement,
                            const std::string &message, HostTarget target,
                            const std::string &replacement = "") {
  const std::string source = p.kernels[k].source;
  auto [from, to] = functionSpan(source, fn);
  EXPECT_NE(from, std::string::npos) << fn;
  int removed = 0;
  for (size_t at = source.find(statement, from); at < to;
       at = source.find(statement, at + 1)) {
    const bool compiled = withMutation(
        p, k, at, statement.size(), replacement, target,
        [&](rt::Program &mutated, HostKernels &kernels, size_t line) {
          try {
            runOnRandomData(mutated, kernels, 7);
            ADD_FAILURE() << p.kernels[k].name << ": nothing reported with "
                          << statement << " at line " << line
                          << " replaced by '" << replacement << "'";
          } catch (const std::runtime_error &e) {
            EXPECT_NE(std::string(e.what()).find(message), std::string::npos)
                << statement << " at line " << line << ": " << e.what();
          }
        });
    if (!compiled)
      return removed;
    ++removed;
  }
  return removed;
}

} // namespace gptc::test

#endif // GPTC_UNITTESTS_TARGET_ONHOSTTESTUTIL_H
