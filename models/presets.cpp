//===- presets.cpp - GPT-2 sizes and configuration checks -----------------===//

#include "gptc/Models/GPT2.h"

namespace gptc::models {

namespace {
// gpt2-tiny trains on two CPU cores in minutes; the others are OpenAI's.
const GPT2Config kPresets[] = {
    {"gpt2-tiny", 4, 4, 128, 256, 50257},
    {"gpt2", 12, 12, 768, 1024, 50257},
    {"gpt2-medium", 24, 16, 1024, 1024, 50257},
    {"gpt2-large", 36, 20, 1280, 1024, 50257},
    {"gpt2-xl", 48, 25, 1600, 1024, 50257},
};
} // namespace

std::optional<GPT2Config> gpt2Preset(const std::string &name) {
  for (const GPT2Config &c : kPresets)
    if (c.name == name)
      return c;
  return std::nullopt;
}

std::vector<std::string> gpt2PresetNames() {
  std::vector<std::string> names;
  for (const GPT2Config &c : kPresets)
    names.push_back(c.name);
  return names;
}

std::string validateGPT2(const GPT2Config &c, int64_t batch, int64_t seq) {
  auto positive = [](int64_t v) { return v > 0; };
  if (!positive(c.nLayer))
    return "--n-layer must be positive, got " + std::to_string(c.nLayer);
  if (!positive(c.nHead))
    return "--n-head must be positive, got " + std::to_string(c.nHead);
  if (!positive(c.nEmbd))
    return "--n-embd must be positive, got " + std::to_string(c.nEmbd);
  if (!positive(c.blockSize))
    return "--block-size must be positive, got " + std::to_string(c.blockSize);
  if (!positive(c.vocabSize))
    return "--vocab-size must be positive, got " + std::to_string(c.vocabSize);
  if (c.vocabSize > 65536)
    return "--vocab-size " + std::to_string(c.vocabSize) +
           " does not fit the uint16 token files (at most 65536)";
  if (c.nEmbd % c.nHead != 0)
    return "n_embd " + std::to_string(c.nEmbd) +
           " is not divisible by n_head " + std::to_string(c.nHead);
  if (!positive(batch))
    return "--batch must be positive, got " + std::to_string(batch);
  if (!positive(seq))
    return "--seq must be positive, got " + std::to_string(seq);
  if (seq > c.blockSize)
    return "--seq " + std::to_string(seq) + " is above the block size " +
           std::to_string(c.blockSize);
  return "";
}

} // namespace gptc::models
