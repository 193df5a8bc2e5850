//===- Sampling.cpp - drawing the next token from logits ------------------===//

#include "gptc/Train/Sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace gptc::train {

int sampleToken(std::span<const float> logits, double temperature, int topK,
                Rng &rng) {
  const int n = int(logits.size());
  std::vector<int> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  auto higher = [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  int k = topK > 0 ? std::min(topK, n) : n;
  if (temperature == 0.0)
    k = 1;
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), higher);
  if (k == 1)
    return ids[0];

  // Softmax over the candidates, shifted by the largest for stability.
  std::vector<double> weights(k);
  double top = logits[ids[0]], total = 0.0;
  for (int i = 0; i < k; ++i)
    total += weights[i] = std::exp((logits[ids[i]] - top) / temperature);
  double u = rng.uniform() * total;
  for (int i = 0; i < k; ++i) {
    if (u < weights[i])
      return ids[i];
    u -= weights[i];
  }
  return ids[k - 1]; // rounding left u just above the last weight
}

} // namespace gptc::train
