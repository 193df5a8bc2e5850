//===- LlmcModel.h - llm.c's model_*.bin checkpoints ------------*- C++ -*-===//
//
// llm.c writes GPT-2 weights as one file: a header of 256 int32 (magic
// 20240326; version 3 = float32, 5 = bfloat16; max_seq_len, vocab_size,
// num_layers, num_heads, channels, padded_vocab_size), then every tensor in
// a fixed order, each layer's tensors stacked over the layers, linear
// weights as (out, in) as nn.Linear stores them, and wte with the padded
// vocabulary's rows. This reader hands back the tensors under Hugging Face
// GPT-2 names and layouts (Conv1D weights (in, out), wte cut to vocab_size),
// so the rest of gptc sees one checkpoint format.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_FORMATS_LLMCMODEL_H
#define GPTC_FORMATS_LLMCMODEL_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gptc {

constexpr int32_t kLlmcModelMagic = 20240326;

struct LlmcModel {
  int64_t maxSeqLen = 0, vocabSize = 0, numLayers = 0, numHeads = 0,
          channels = 0, paddedVocabSize = 0;
  struct Tensor {
    std::vector<int64_t> shape;
    std::vector<float> data;
  };
  std::map<std::string, Tensor> tensors; ///< Hugging Face names
};

/// Whether `path` starts with llm.c's model magic (false if unreadable).
bool isLlmcModelFile(const std::string &path);

/// Reads and validates an llm.c model file; throws FormatError naming the
/// file (bad magic or version, inconsistent header, wrong length).
LlmcModel readLlmcModel(const std::string &path);

} // namespace gptc

#endif // GPTC_FORMATS_LLMCMODEL_H
