//===- GPT2Config.h - the sizes of a GPT-2 model ----------------*- C++ -*-===//
//
// Plain data and no MLIR: the training program reads a model's sizes from
// its kernel schedule and records them in checkpoints (TrainState.h).
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_MODELS_GPT2CONFIG_H
#define GPTC_MODELS_GPT2CONFIG_H

#include <cstdint>
#include <string>

namespace gptc::models {

struct GPT2Config {
  std::string name;
  int64_t nLayer = 0;
  int64_t nHead = 0;
  int64_t nEmbd = 0;
  int64_t blockSize = 0;
  int64_t vocabSize = 0;
};

} // namespace gptc::models

#endif // GPTC_MODELS_GPT2CONFIG_H
