//===- Sampling.h - drawing the next token from logits ----------*- C++ -*-===//

#ifndef GPTC_TRAIN_SAMPLING_H
#define GPTC_TRAIN_SAMPLING_H

#include "gptc/Train/Random.h"

#include <span>

namespace gptc::train {

/// Draws a token id from softmax(logits / temperature), restricted to the
/// top_k largest logits when topK > 0 (ties broken towards the lower id).
/// temperature == 0 picks the largest logit (greedy).
int sampleToken(std::span<const float> logits, double temperature, int topK,
                Rng &rng);

} // namespace gptc::train

#endif // GPTC_TRAIN_SAMPLING_H
