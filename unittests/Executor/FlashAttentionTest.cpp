//===- FlashAttentionTest.cpp - blocked attention against the unfused ops -===//
//
// The flash-attention kernels against the graph gpt-fuse-attention replaces,
// run with the executor's own kernels: softmax(causal_mask(q·kᵀ · scale))·v
// for the forward, and that graph's vector-Jacobian product (the ops
// gpt-autodiff emits for it) for the backward. Small tiles make the online
// softmax cross many tiles, with ragged last tiles and diagonal tiles that are
// not square; the backward is also checked against finite differences of the
// forward kernel itself.
//
//===----------------------------------------------------------------------===//

#include "gptc/Executor/Kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

using namespace gptc::exec;

namespace {

HostTensor random(std::vector<int64_t> shape, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  HostTensor t = HostTensor::floats(std::move(shape));
  for (float &v : t.f32)
    v = dist(gen);
  return t;
}

void expectNear(const HostTensor &got, const HostTensor &want, float tol,
                const char *what) {
  ASSERT_EQ(got.shape, want.shape) << what;
  for (size_t i = 0; i < got.f32.size(); ++i)
    ASSERT_NEAR(got.f32[i], want.f32[i], tol) << what << " at flat index " << i;
}

HostTensor scaled(const HostTensor &x, float s) {
  return binary(BinaryKind::Mul, x, HostTensor::floats({}, s), x.shape);
}

/// One attention problem: q [B, H, T, D], k and v [B, H, S, D].
struct Problem {
  int64_t B, H, T, S, D;
  bool causal;
  AttentionTiles tiles;
};

std::string describe(const Problem &p) {
  return "B=" + std::to_string(p.B) + " H=" + std::to_string(p.H) +
         " T=" + std::to_string(p.T) + " S=" + std::to_string(p.S) +
         " D=" + std::to_string(p.D) + (p.causal ? " causal" : "") + " tiles " +
         std::to_string(p.tiles.queries) + "x" + std::to_string(p.tiles.keys);
}

/// The unfused graph: probabilities softmax(mask(scale · q·kᵀ)).
HostTensor probabilities(const HostTensor &q, const HostTensor &k, float scale,
                         bool causal) {
  HostTensor s = scaled(matmul(q, k, false, true), scale);
  if (causal)
    s = causalMask(s, -std::numeric_limits<float>::infinity());
  return softmax(s);
}

struct Inputs {
  HostTensor q, k, v, dout;
  float scale;
};

Inputs inputsFor(const Problem &p, unsigned seed) {
  return {random({p.B, p.H, p.T, p.D}, seed),
          random({p.B, p.H, p.S, p.D}, seed + 1),
          random({p.B, p.H, p.S, p.D}, seed + 2),
          random({p.B, p.H, p.T, p.D}, seed + 3),
          float(1.0 / std::sqrt(double(p.D)))};
}

const Problem kProblems[] = {
    // T not a multiple of either tile; diagonal tiles that are not square.
    {2, 3, 37, 37, 16, true, {8, 5}},
    {2, 3, 37, 37, 16, false, {8, 5}},
    {1, 2, 37, 37, 8, true, {5, 8}},
    // The default 64 x 64 tiles: one ragged tile after a full one.
    {2, 2, 100, 100, 32, true, {}},
    {1, 1, 64, 64, 16, true, {}},
    // T = 1: a query that sees only itself.
    {3, 4, 1, 1, 8, true, {}},
    {3, 4, 1, 1, 8, false, {4, 4}},
    // Cross attention: more keys than queries.
    {2, 2, 11, 29, 8, false, {4, 6}},
};

TEST(FlashAttention, ForwardMatchesTheUnfusedGraph) {
  for (const Problem &p : kProblems) {
    SCOPED_TRACE(describe(p));
    Inputs in = inputsFor(p, 1);
    std::vector<HostTensor> got =
        flashAttention(in.q, in.k, in.v, in.scale, p.causal, p.tiles);
    ASSERT_EQ(got.size(), 2u);
    HostTensor want = matmul(probabilities(in.q, in.k, in.scale, p.causal),
                             in.v, false, false);
    expectNear(got[0], want, 1e-5f, "out");
  }
}

TEST(FlashAttention, LogsumexpIsThatOfTheMaskedScaledScores) {
  for (const Problem &p : kProblems) {
    SCOPED_TRACE(describe(p));
    Inputs in = inputsFor(p, 2);
    HostTensor lse =
        flashAttention(in.q, in.k, in.v, in.scale, p.causal, p.tiles)[1];
    ASSERT_EQ(lse.shape, (std::vector<int64_t>{p.B, p.H, p.T}));
    // Directly, in double: log Σ_j exp(scale · q_i·k_j) over visible keys.
    for (int64_t h = 0; h < p.B * p.H; ++h)
      for (int64_t i = 0; i < p.T; ++i) {
        double sum = 0.0;
        for (int64_t j = 0; j < (p.causal ? i + 1 : p.S); ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < p.D; ++d)
            dot += double(in.q.f32[(h * p.T + i) * p.D + d]) *
                   in.k.f32[(h * p.S + j) * p.D + d];
          sum += std::exp(in.scale * dot);
        }
        ASSERT_NEAR(lse.f32[h * p.T + i], std::log(sum), 1e-5)
            << "row " << i << " of head " << h;
      }
  }
}

TEST(FlashAttention, BackwardMatchesTheVJPOfTheUnfusedGraph) {
  for (const Problem &p : kProblems) {
    SCOPED_TRACE(describe(p));
    Inputs in = inputsFor(p, 3);
    std::vector<HostTensor> fwd =
        flashAttention(in.q, in.k, in.v, in.scale, p.causal, p.tiles);
    std::vector<HostTensor> got = flashAttentionGrad(
        in.q, in.k, in.v, fwd[0], fwd[1], in.dout, in.scale, p.causal, p.tiles);
    ASSERT_EQ(got.size(), 3u);

    // What gpt-autodiff emits for matmul, softmax, causal_mask, mul, matmul.
    HostTensor probs = probabilities(in.q, in.k, in.scale, p.causal);
    HostTensor dv = matmul(probs, in.dout, true, false);
    HostTensor dprobs = matmul(in.dout, in.v, false, true);
    HostTensor dscores = softmaxGrad(probs, dprobs);
    if (p.causal)
      dscores = causalMask(dscores, 0.0f);
    dscores = scaled(dscores, in.scale);
    HostTensor dq = matmul(dscores, in.k, false, false);
    HostTensor dk = matmul(dscores, in.q, true, false);
    expectNear(got[0], dq, 1e-5f, "dq");
    expectNear(got[1], dk, 1e-5f, "dk");
    expectNear(got[2], dv, 1e-5f, "dv");
  }
}

TEST(FlashAttention, BackwardMatchesFiniteDifferencesOfTheForward) {
  // Directional derivative of Σ dout·out along random (vq, vk, vv).
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "non-causal");
    Problem p{1, 2, 13, 13, 8, causal, {4, 3}};
    Inputs in = inputsFor(p, 4);
    HostTensor vq = random(in.q.shape, 8), vk = random(in.k.shape, 9),
               vv = random(in.v.shape, 10);
    auto objective = [&](float h) {
      auto along = [h](HostTensor x, const HostTensor &dir) {
        for (size_t i = 0; i < x.f32.size(); ++i)
          x.f32[i] += h * dir.f32[i];
        return x;
      };
      HostTensor out =
          flashAttention(along(in.q, vq), along(in.k, vk), along(in.v, vv),
                         in.scale, causal, p.tiles)[0];
      double s = 0.0;
      for (size_t i = 0; i < out.f32.size(); ++i)
        s += double(out.f32[i]) * in.dout.f32[i];
      return s;
    };
    double fd = (objective(1e-2f) - objective(-1e-2f)) / 2e-2;

    std::vector<HostTensor> fwd =
        flashAttention(in.q, in.k, in.v, in.scale, causal, p.tiles);
    std::vector<HostTensor> grads = flashAttentionGrad(
        in.q, in.k, in.v, fwd[0], fwd[1], in.dout, in.scale, causal, p.tiles);
    double analytic = 0.0;
    for (auto [g, dir] : {std::pair{&grads[0], &vq}, std::pair{&grads[1], &vk},
                          std::pair{&grads[2], &vv}})
      for (size_t i = 0; i < g->f32.size(); ++i)
        analytic += double(g->f32[i]) * dir->f32[i];
    EXPECT_NEAR(analytic, fd, 2e-3 * std::max(1.0, std::abs(fd)));
  }
}

TEST(FlashAttention, TileSizesDoNotChangeTheResult) {
  // Different tilings sum in different orders: equal to float rounding.
  Problem p{1, 2, 45, 45, 16, true, {}};
  Inputs in = inputsFor(p, 5);
  std::vector<HostTensor> a = flashAttention(in.q, in.k, in.v, in.scale, true);
  std::vector<HostTensor> b =
      flashAttention(in.q, in.k, in.v, in.scale, true, {7, 3});
  expectNear(a[0], b[0], 1e-6f, "out");
  expectNear(a[1], b[1], 1e-6f, "lse");
}

} // namespace
