//===- AttentionGraphTest.cpp - cuDNN's attention graphs on the CPU -------===//
//
// The graphs lib/Runtime/CudnnAttention.cpp hands cuDNN (AttentionGraph.h),
// evaluated here op by op with cuDNN's semantics
// (AttentionGraphInterpreter.h), and checked against the executor's
// attention on packed qkv rows: what cuDNN computes from them on a GPU, if
// it computes what the graph says.
//
//===----------------------------------------------------------------------===//

#include "AttentionGraph.h"
#include "AttentionGraphInterpreter.h"
#include "CudnnAttention.h"

#include "gptc/Executor/HostTensor.h"
#include "gptc/Executor/Kernels.h"
#include "gptc/Executor/Precision.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>

using namespace gptc;
using gptc::exec::HostTensor;
using namespace gptc::rt::attention;
using gptc::rt::attention::testing::Interpreter;

namespace {

HostTensor randomBf16(std::vector<int64_t> shape, uint32_t seed) {
  HostTensor t = HostTensor::floats(std::move(shape));
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (float &x : t.f32)
    x = gptc::exec::roundToBF16(dist(gen));
  return t;
}

/// GPT-2's packed layout at small sizes: qkv [B, T, 3C], out [B, T, C].
struct Packed {
  int64_t B, T, H, D;
  bool causal;
  int64_t C() const { return H * D; }
  float scale() const { return 1.0f / std::sqrt(float(D)); }
  AttentionShape shape() const {
    AttentionShape s;
    s.batch = B;
    s.heads = H;
    s.queries = s.keys = T;
    s.headDim = D;
    s.causal = causal;
    s.scale = scale();
    s.q = s.k = s.v = packedStrides(T, 3 * C(), D);
    s.out = packedStrides(T, C(), D);
    return s;
  }
};

void expectNear(const std::vector<float> &got, const std::vector<float> &want,
                double tolerance, const char *what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << " element " << i;
    if (double e = std::fabs(double(got[i]) - want[i]); e > worst) {
      worst = e;
      at = i;
    }
  }
  EXPECT_LE(worst, tolerance) << what << ": element " << at << " is " << got[at]
                              << ", the executor's " << want[at];
}

class AttentionGraphTest : public ::testing::TestWithParam<bool> {};

TEST_P(AttentionGraphTest, ForwardIsTheExecutorsAttention) {
  const Packed p{2, 24, 3, 16, GetParam()};
  const HostTensor qkv = randomBf16({p.B, p.T, 3 * p.C()}, 1);
  const std::vector<HostTensor> want =
      exec::flashAttentionQKV(qkv, p.H, p.scale(), p.causal);

  const AttentionGraph g = attentionForwardGraph(p.shape());
  std::vector<float> in = qkv.f32, out(size_t(p.B * p.T * p.C())),
                     lse(size_t(p.B * p.H * p.T));
  Interpreter run(g);
  run.bind(GraphRole::Q, in.data());
  run.bind(GraphRole::K, in.data() + p.C());
  run.bind(GraphRole::V, in.data() + 2 * p.C());
  run.bind(GraphRole::Out, out.data());
  run.bind(GraphRole::Lse, lse.data());
  ASSERT_EQ(run.run(), "");
  // out in bf16: one rounding of a value below 4 apart, at most.
  expectNear(out, want[0].f32, 2e-2, "out");
  expectNear(lse, want[1].f32, 1e-4, "lse");
}

// dq by way of the float32 sums, and straight.
TEST_P(AttentionGraphTest, BackwardIsTheExecutorsGradient) {
  const Packed p{2, 24, 3, 16, GetParam()};
  const HostTensor qkv = randomBf16({p.B, p.T, 3 * p.C()}, 2);
  const HostTensor dout = randomBf16({p.B, p.T, p.C()}, 3);
  const std::vector<HostTensor> fwd =
      exec::flashAttentionQKV(qkv, p.H, p.scale(), p.causal);
  HostTensor out = fwd[0];
  for (float &x : out.f32)
    x = gptc::exec::roundToBF16(x);
  const HostTensor want = exec::flashAttentionQKVGrad(
      qkv, out, fwd[1], dout, p.H, p.scale(), p.causal)[0];

  for (bool sums : {true, false}) {
    SCOPED_TRACE(sums ? "dq sums" : "dq straight");
    const AttentionGraph g = attentionBackwardGraph(p.shape(), sums);
    EXPECT_EQ(g.workspaceOffset.count(GraphRole::DqSums), sums ? 1u : 0u);
    std::vector<float> in = qkv.f32, o = out.f32, dO = dout.f32,
                       lse = fwd[1].f32, dqkv(in.size(), std::nanf("")),
                       work(size_t(g.workspaceBytes / 4));
    Interpreter run(g);
    run.bind(GraphRole::Q, in.data());
    run.bind(GraphRole::K, in.data() + p.C());
    run.bind(GraphRole::V, in.data() + 2 * p.C());
    run.bind(GraphRole::Out, o.data());
    run.bind(GraphRole::Dout, dO.data());
    run.bind(GraphRole::Lse, lse.data());
    run.bind(GraphRole::Dq, dqkv.data());
    run.bind(GraphRole::Dk, dqkv.data() + p.C());
    run.bind(GraphRole::Dv, dqkv.data() + 2 * p.C());
    for (auto [role, offset] : g.workspaceOffset)
      run.bind(role, work.data() + offset / 4);
    ASSERT_EQ(run.run(), "");
    // Gradients of magnitude up to about 10, in bf16 (the executor's are
    // float32): a few roundings of the largest.
    for (int part = 0; part < 3; ++part) {
      std::vector<float> got, expected;
      for (size_t i = 0; i < dqkv.size(); ++i)
        if (int64_t(i) % (3 * p.C()) / p.C() == part) {
          got.push_back(dqkv[i]);
          expected.push_back(want.f32[i]);
        }
      expectNear(got, expected, 0.1,
                 part == 0   ? "dq"
                 : part == 1 ? "dk"
                             : "dv");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Causal, AttentionGraphTest, ::testing::Bool(),
                         [](const auto &info) {
                           return info.param ? "Causal" : "Full";
                         });

// The graph's bound tensors are the launch's operands, with the layouts it
// gives; gptc's workspace holds what cuDNN's does not.
TEST(AttentionGraph, BoundTensorsAndWorkspace) {
  const Packed p{2, 24, 3, 16, true};
  const AttentionGraph fwd = attentionForwardGraph(p.shape());
  EXPECT_EQ(fwd.roles.size(), 5u);
  EXPECT_EQ(fwd.workspaceBytes, 0);
  const GraphTensor &k = fwd.tensor(fwd.roles.at(GraphRole::K));
  // kᵀ: (b, h, d, key), each key a packed row of 3C further on.
  EXPECT_EQ(k.dims, (std::array<int64_t, 4>{2, 3, 16, 24}));
  EXPECT_EQ(k.strides, (std::array<int64_t, 4>{24 * 144, 16, 1, 144}));
  const AttentionGraph bwd = attentionBackwardGraph(p.shape(), true);
  EXPECT_EQ(bwd.roles.size(), 11u);
  // Σ dout·out: 2·3·24 floats, 256-byte aligned; dq sums 2·3·24·16.
  EXPECT_EQ(bwd.workspaceOffset.at(GraphRole::RowDot), 0);
  EXPECT_EQ(bwd.workspaceOffset.at(GraphRole::DqSums), 768);
  EXPECT_EQ(bwd.workspaceBytes, 768 + 2 * 3 * 24 * 16 * 4);
  // Each op reads bound tensors, scalars and earlier ops' results only.
  std::set<int64_t> known;
  for (const GraphTensor &t : bwd.tensors)
    if (!t.isVirtual)
      known.insert(t.uid);
  for (const GraphOp &op : bwd.ops) {
    for (int64_t in : op.inputs)
      EXPECT_TRUE(known.count(in))
          << op.name << " reads tensor " << in << " before an op writes it";
    known.insert(op.output);
  }
}

// cuDNN takes every tensor and operation of the graphs (and, from 9.8 on,
// the operation graph) without a GPU: what is left for one is the engines'
// heuristics and the run, which the CUDA backend checks at load against
// the launch's own kernel.
TEST(AttentionGraph, CudnnTakesTheDescriptors) {
  try {
    gptc::rt::cudnn::cudnnVersion();
  } catch (const gptc::rt::cudnn::CudnnError &e) {
    GTEST_SKIP() << e.what();
  }
  for (bool causal : {false, true}) {
    const Packed p{2, 24, 3, 16, causal};
    std::vector<AttentionGraph> graphs;
    graphs.push_back(attentionForwardGraph(p.shape()));
    graphs.push_back(attentionBackwardGraph(p.shape(), true));
    graphs.push_back(attentionBackwardGraph(p.shape(), false));
    for (const AttentionGraph &g : graphs) {
      int ops = 0;
      EXPECT_NO_THROW(ops = gptc::rt::cudnn::checkDescriptors(g));
      EXPECT_EQ(size_t(ops), g.ops.size());
    }
  }
}

// A graph cuDNN refuses is one error naming what it refused: here a matmul
// whose operands' inner sizes differ.
TEST(AttentionGraph, CudnnNamesWhatItRefuses) {
  try {
    gptc::rt::cudnn::cudnnVersion();
  } catch (const gptc::rt::cudnn::CudnnError &e) {
    GTEST_SKIP() << e.what();
  }
  AttentionGraph g = attentionForwardGraph(Packed{2, 24, 3, 16, true}.shape());
  g.tensors[size_t(g.roles.at(GraphRole::K) - 1)].dims[2] = 8;
  try {
    gptc::rt::cudnn::checkDescriptors(g);
    FAIL() << "cuDNN took a matmul of 16 by 8";
  } catch (const gptc::rt::cudnn::CudnnError &e) {
    EXPECT_NE(std::string(e.what()).find("q kT"), std::string::npos)
        << e.what();
  }
}

} // namespace
