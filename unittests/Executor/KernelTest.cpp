//===- KernelTest.cpp - the CPU kernels against naive definitions ---------===//
//
// The executor is the reference for everything else, so its kernels are
// checked here against the definitions written as plainly as possible
// (index arithmetic, double accumulation), on random data and on shapes
// that exercise broadcasting, transposes and batching.
//
//===----------------------------------------------------------------------===//

#include "gptc/Executor/Kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
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

void expectNear(const HostTensor &a, const HostTensor &b, float tol) {
  ASSERT_EQ(a.shape, b.shape);
  for (size_t i = 0; i < a.f32.size(); ++i)
    ASSERT_NEAR(a.f32[i], b.f32[i], tol) << "at flat index " << i;
}

/// Flat index of `index` in a row-major `shape`.
int64_t flat(const std::vector<int64_t> &shape,
             const std::vector<int64_t> &index) {
  int64_t f = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    f = f * shape[d] + index[d];
  return f;
}

/// Calls `f` with every multi-index of `shape`.
template <typename F> void forEachIndex(const std::vector<int64_t> &shape, F f) {
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t n = numElements(shape); n > 0; --n) {
    f(index);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d])
        break;
      index[d] = 0;
    }
  }
}

TEST(Kernels, MatmulEveryTransposeAndSharedWeight) {
  const int64_t B = 3, M = 5, K = 7, N = 4;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool shared : {false, true}) {
        HostTensor a = random(ta ? std::vector<int64_t>{B, K, M}
                                 : std::vector<int64_t>{B, M, K},
                              1);
        std::vector<int64_t> bs = tb ? std::vector<int64_t>{N, K}
                                     : std::vector<int64_t>{K, N};
        if (!shared)
          bs.insert(bs.begin(), B);
        HostTensor b = random(bs, 2);
        HostTensor got = matmul(a, b, ta, tb);
        HostTensor want = HostTensor::floats({B, M, N});
        for (int64_t i = 0; i < B; ++i)
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
              double s = 0;
              for (int64_t k = 0; k < K; ++k) {
                float av = ta ? a.f32[(i * K + k) * M + m]
                              : a.f32[(i * M + m) * K + k];
                int64_t boff = shared ? 0 : i * K * N;
                float bv = tb ? b.f32[boff + n * K + k]
                              : b.f32[boff + k * N + n];
                s += double(av) * bv;
              }
              want.f32[(i * M + m) * N + n] = float(s);
            }
        SCOPED_TRACE(testing::Message() << "ta=" << ta << " tb=" << tb
                                        << " shared=" << shared);
        expectNear(got, want, 1e-5f);
      }
}

TEST(Kernels, BinaryBroadcastsAsNumpy) {
  HostTensor a = random({2, 3, 4}, 3), b = random({3, 1}, 4);
  HostTensor got = binary(BinaryKind::Sub, a, b, {2, 3, 4});
  HostTensor want = HostTensor::floats({2, 3, 4});
  forEachIndex({2, 3, 4}, [&](const std::vector<int64_t> &i) {
    want.f32[flat({2, 3, 4}, i)] =
        a.f32[flat({2, 3, 4}, i)] - b.f32[flat({3, 1}, {i[1], 0})];
  });
  expectNear(got, want, 0.0f);
  HostTensor s = HostTensor::floats({}, 2.0f);
  expectNear(binary(BinaryKind::Mul, s, a, {2, 3, 4}),
             binary(BinaryKind::Add, a, a, {2, 3, 4}), 0.0f);
}

TEST(Kernels, ReduceSumIsTheAdjointOfBroadcast) {
  HostTensor x = random({2, 3, 4}, 5);
  HostTensor got = reduceSum(x, {3, 1});
  HostTensor want = HostTensor::floats({3, 1});
  forEachIndex({2, 3, 4}, [&](const std::vector<int64_t> &i) {
    want.f32[i[1]] += x.f32[flat({2, 3, 4}, i)];
  });
  expectNear(got, want, 1e-6f);
  float total = 0;
  for (float v : x.f32)
    total += v;
  EXPECT_NEAR(reduceSum(x, {}).f32[0], total, 1e-5f);
}

TEST(Kernels, TransposeMovesEveryElement) {
  HostTensor x = random({2, 3, 4, 5}, 6);
  std::vector<int64_t> perm = {0, 2, 3, 1};
  HostTensor got = transpose(x, perm);
  ASSERT_EQ(got.shape, (std::vector<int64_t>{2, 4, 5, 3}));
  forEachIndex(got.shape, [&](const std::vector<int64_t> &i) {
    std::vector<int64_t> src(4);
    for (size_t d = 0; d < 4; ++d)
      src[perm[d]] = i[d];
    ASSERT_EQ(got.f32[flat(got.shape, i)], x.f32[flat(x.shape, src)]);
  });
}

TEST(Kernels, SplitThenConcatIsIdentity) {
  HostTensor x = random({2, 9, 3}, 7);
  std::vector<HostTensor> pieces = split(x, 1, {2, 3, 4});
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[2].shape, (std::vector<int64_t>{2, 4, 3}));
  EXPECT_EQ(pieces[1].f32[0], x.f32[flat(x.shape, {0, 2, 0})]);
  expectNear(concat({&pieces[0], &pieces[1], &pieces[2]}, 1), x, 0.0f);
}

TEST(Kernels, LayerNormGradMatchesFiniteDifferences) {
  // Directional derivative of sum(dy * layernorm(x)) along random v.
  HostTensor x = random({3, 8}, 8), g = random({8}, 9), beta = random({8}, 10);
  HostTensor dy = random({3, 8}, 11), v = random({3, 8}, 12);
  std::vector<HostTensor> grads = layernormGrad(x, g, dy, 1e-5f);
  auto objective = [&](float h) {
    HostTensor xh = x;
    for (size_t i = 0; i < xh.f32.size(); ++i)
      xh.f32[i] += h * v.f32[i];
    HostTensor y = layernorm(xh, g, beta, 1e-5f);
    double s = 0;
    for (size_t i = 0; i < y.f32.size(); ++i)
      s += double(y.f32[i]) * dy.f32[i];
    return s;
  };
  double fd = (objective(1e-2f) - objective(-1e-2f)) / 2e-2;
  double analytic = 0;
  for (size_t i = 0; i < v.f32.size(); ++i)
    analytic += double(grads[0].f32[i]) * v.f32[i];
  EXPECT_NEAR(analytic, fd, 2e-3 * std::max(1.0, std::abs(fd)));
  // dbeta is the column sum of dy.
  for (int64_t c = 0; c < 8; ++c)
    EXPECT_NEAR(grads[2].f32[c],
                dy.f32[c] + dy.f32[8 + c] + dy.f32[16 + c], 1e-6f);
}

TEST(Kernels, SoftmaxRowsSumToOneAndMaskedEntriesVanish) {
  HostTensor x = causalMask(random({2, 4, 4}, 13),
                            -std::numeric_limits<float>::infinity());
  HostTensor p = softmax(x);
  for (int64_t r = 0; r < 8; ++r) {
    double s = 0;
    for (int64_t c = 0; c < 4; ++c) {
      s += p.f32[r * 4 + c];
      if (c > r % 4)
        EXPECT_EQ(p.f32[r * 4 + c], 0.0f);
    }
    EXPECT_NEAR(s, 1.0, 1e-6);
  }
}

TEST(Kernels, CrossEntropyAndItsGradient) {
  HostTensor logits = random({2, 3, 5}, 14);
  HostTensor targets = HostTensor::ids({2, 3});
  for (int i = 0; i < 6; ++i)
    targets.i32[i] = (i * 3) % 5;
  double want = 0;
  for (int r = 0; r < 6; ++r) {
    double z = 0;
    for (int c = 0; c < 5; ++c)
      z += std::exp(double(logits.f32[r * 5 + c]));
    want += std::log(z) - logits.f32[r * 5 + targets.i32[r]];
  }
  EXPECT_NEAR(crossEntropy(logits, targets).f32[0], want / 6, 1e-6);
  // Each row of the gradient is (softmax - onehot) / N: it sums to zero.
  HostTensor d = crossEntropyGrad(logits, targets, HostTensor::floats({}, 1));
  for (int r = 0; r < 6; ++r) {
    double s = 0;
    for (int c = 0; c < 5; ++c)
      s += d.f32[r * 5 + c];
    EXPECT_NEAR(s, 0.0, 1e-7);
    EXPECT_LT(d.f32[r * 5 + targets.i32[r]], 0.0f);
  }
}

TEST(Kernels, EmbeddingRejectsIdsOutsideTheTable) {
  HostTensor table = random({4, 2}, 15), ids = HostTensor::ids({3});
  ids.i32 = {0, 3, 4};
  try {
    embedding(table, ids);
    FAIL() << "expected a KernelError";
  } catch (const KernelError &e) {
    EXPECT_STREQ(e.what(),
                 "id 4 at position 2 is outside the table's 4 rows");
  }
}

// gpt.attention_bias_grad: [Σ dq, 0, Σ dout] over the rows, dq the first C
// of each row of dqkv; the sums are reduce_sum's (of a slice and of dout),
// bit for bit. A dqkv that is not three times dout is a kernel error.
TEST(Kernels, AttentionBiasGradSumsDqAndDout) {
  HostTensor dqkv = random({2, 3, 12}, 18), dout = random({2, 3, 4}, 19);
  HostTensor db = attentionBiasGrad(dqkv, dout);
  ASSERT_EQ(db.shape, (std::vector<int64_t>{12}));
  HostTensor rows = dqkv;
  rows.shape = {6, 3, 4};
  HostTensor q = reduceSum(slice(rows, {6, 1, 4}), {4});
  HostTensor v = reduceSum(dout, {4});
  for (int c = 0; c < 4; ++c) {
    EXPECT_EQ(db.f32[c], q.f32[c]) << c;
    EXPECT_EQ(db.f32[4 + c], 0.0f) << c;
    EXPECT_EQ(db.f32[8 + c], v.f32[c]) << c;
  }
  EXPECT_NE(q.f32[0], v.f32[0]);
  EXPECT_THROW(attentionBiasGrad(random({2, 3, 11}, 20), dout), KernelError);
}

TEST(Kernels, EmbeddingGradScatterAddsRepeatedIds) {
  HostTensor dy = random({3, 2}, 16), ids = HostTensor::ids({3});
  ids.i32 = {1, 0, 1};
  HostTensor d = embeddingGrad(dy, ids, {3, 2});
  EXPECT_FLOAT_EQ(d.f32[2], dy.f32[0] + dy.f32[4]);
  EXPECT_FLOAT_EQ(d.f32[0], dy.f32[2]);
  EXPECT_FLOAT_EQ(d.f32[4], 0.0f);
}

// sort_ids' keys (the sorted form of embedding_grad): id · 2^bits +
// position, ascending, so each row's positions are together and in order;
// idsOfSortedKeys gives the ids back. Bad input, one line each: an id
// outside the table (embedding_grad's own error), positions or rows the
// keys cannot hold, and keys that are not every position once.
TEST(Kernels, SortIdsGroupsPositionsByRowInOrder) {
  HostTensor ids = HostTensor::ids({2, 3});
  ids.i32 = {2, 0, 2, 1, 2, 0};
  EXPECT_EQ(sortedIdPositionBits(6), 3);
  EXPECT_EQ(sortedIdPositionBits(16384), 14);
  HostTensor keys = sortIds(ids, 3, 3);
  EXPECT_EQ(keys.shape, (std::vector<int64_t>{6}));
  EXPECT_EQ(keys.i32,
            (std::vector<int32_t>{0 << 3 | 1, 0 << 3 | 5, 1 << 3 | 3,
                                  2 << 3 | 0, 2 << 3 | 2, 2 << 3 | 4}));
  EXPECT_EQ(idsOfSortedKeys(keys, 3).i32, ids.i32);
  // GPT-2's 16,384 positions over 50,257 rows fit (16 + 14 bits); one
  // position more than a block's 32,768, or a row's bit more, do not.
  EXPECT_TRUE(idsSortable(16384, 50257));
  EXPECT_TRUE(idsSortable(32768, 65535));
  EXPECT_FALSE(idsSortable(32769, 100));
  EXPECT_FALSE(idsSortable(32768, 65536));
  auto error = [](const std::function<void()> &f) {
    try {
      f();
    } catch (const KernelError &e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  HostTensor bad = ids;
  bad.i32[4] = 3;
  EXPECT_EQ(error([&] { sortIds(bad, 3, 3); }),
            "id 3 at position 4 is outside the table's 3 rows");
  EXPECT_EQ(error([&] { sortIds(ids, 3, 2); }),
            "sort_ids: 6 positions of a table of 3 rows do not fit keys of 2 "
            "position bits");
  HostTensor twice = keys;
  twice.i32[1] = twice.i32[0];
  EXPECT_EQ(error([&] { idsOfSortedKeys(twice, 3); }),
            "sorted ids: key 1 at 1 is not a position of 6 once");
  HostTensor outside = keys;
  outside.i32[5] = -1;
  EXPECT_EQ(error([&] { idsOfSortedKeys(outside, 3); }),
            "sorted ids: key -1 at 5 is not a position of 6 once");
}

// With an addend: the bits of the plain scatter-add with an add after it.
TEST(Kernels, EmbeddingGradAddsItsAddendLast) {
  HostTensor dy = random({4, 3}, 17), ids = HostTensor::ids({4});
  ids.i32 = {2, 0, 2, 2};
  HostTensor addend = random({3, 3}, 18);
  HostTensor plain = embeddingGrad(dy, ids, {3, 3});
  HostTensor d = embeddingGrad(dy, ids, {3, 3}, &addend);
  for (int64_t i = 0; i < 9; ++i)
    EXPECT_EQ(d.f32[i], addend.f32[i] + plain.f32[i]) << i;
  HostTensor wrong = random({2, 3}, 19);
  try {
    embeddingGrad(dy, ids, {3, 3}, &wrong);
    FAIL() << "an addend of another shape was accepted";
  } catch (const KernelError &e) {
    EXPECT_STREQ(e.what(),
                 "embedding_grad: the addend is not of the table's shape");
  }
}

} // namespace
