//===- LlmcModel.cpp - llm.c's model_*.bin checkpoints --------------------===//

#include "gptc/Formats/LlmcModel.h"

#include "gptc/Formats/Error.h"
#include "gptc/Formats/Safetensors.h"

#include "ReadFile.h"

#include <cstring>
#include <fstream>

namespace gptc {

namespace {
constexpr size_t kHeaderInts = 256;

/// Reads consecutive tensors out of the data region.
struct Cursor {
  const uint8_t *data;
  size_t size;
  size_t offset = 0;
  bool bf16;
  std::string path;

  std::vector<float> take(int64_t count) {
    size_t width = bf16 ? 2 : 4, bytes = size_t(count) * width;
    if (offset + bytes > size)
      throw FormatError(path + ": truncated: the header's model needs more "
                               "parameters than the file holds");
    std::vector<float> out(count);
    for (int64_t i = 0; i < count; ++i) {
      const uint8_t *p = data + offset + size_t(i) * width;
      if (bf16) {
        uint16_t bits;
        std::memcpy(&bits, p, 2);
        out[i] = bf16ToFloat(bits);
      } else {
        std::memcpy(&out[i], p, 4);
      }
    }
    offset += bytes;
    return out;
  }
};

/// (out, in) row-major, as nn.Linear and llm.c store it, to (in, out).
std::vector<float> transposed(const float *w, int64_t out, int64_t in) {
  std::vector<float> t(size_t(out * in));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i)
      t[size_t(i * out + o)] = w[o * in + i];
  return t;
}
} // namespace

bool isLlmcModelFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  int32_t magic = 0;
  return in.read(reinterpret_cast<char *>(&magic), 4) &&
         magic == kLlmcModelMagic;
}

LlmcModel readLlmcModel(const std::string &path) {
  std::vector<uint8_t> bytes = readWholeFile(path);
  if (bytes.size() < kHeaderInts * 4)
    throw FormatError(path + ": truncated llm.c model file (" +
                      std::to_string(bytes.size()) +
                      " bytes, shorter than its 1024-byte header)");
  int32_t header[kHeaderInts];
  std::memcpy(header, bytes.data(), sizeof(header));
  if (header[0] != kLlmcModelMagic)
    throw FormatError(path + ": bad magic " + std::to_string(header[0]) +
                      " (expected 20240326 for an llm.c model file)");
  if (header[1] != 3 && header[1] != 5)
    throw FormatError(path + ": unsupported llm.c model version " +
                      std::to_string(header[1]) +
                      " (expected 3 for float32 or 5 for bfloat16)");
  LlmcModel m;
  m.maxSeqLen = header[2];
  m.vocabSize = header[3];
  m.numLayers = header[4];
  m.numHeads = header[5];
  m.channels = header[6];
  m.paddedVocabSize = header[7] ? header[7] : header[3];
  if (m.maxSeqLen <= 0 || m.vocabSize <= 0 || m.numLayers <= 0 ||
      m.numHeads <= 0 || m.channels <= 0 || m.paddedVocabSize < m.vocabSize)
    throw FormatError(path + ": inconsistent llm.c header (max_seq_len " +
                      std::to_string(m.maxSeqLen) + ", vocab " +
                      std::to_string(m.vocabSize) + ", padded vocab " +
                      std::to_string(m.paddedVocabSize) + ", layers " +
                      std::to_string(m.numLayers) + ", heads " +
                      std::to_string(m.numHeads) + ", channels " +
                      std::to_string(m.channels) + ")");

  int64_t L = m.numLayers, C = m.channels, V = m.vocabSize;
  Cursor cur{bytes.data() + kHeaderInts * 4, bytes.size() - kHeaderInts * 4,
             0, header[1] == 5, path};
  auto put = [&](const std::string &name, std::vector<int64_t> shape,
                 std::vector<float> data) {
    m.tensors[name] = {std::move(shape), std::move(data)};
  };
  std::vector<float> wte = cur.take(m.paddedVocabSize * C);
  wte.resize(size_t(V * C)); // the padded rows are not GPT-2's
  put("wte.weight", {V, C}, std::move(wte));
  put("wpe.weight", {m.maxSeqLen, C}, cur.take(m.maxSeqLen * C));

  // Per-layer tensors come stacked over the layers, in this order.
  struct Stacked {
    const char *name;
    int64_t out, in; ///< in == 0: a vector of `out`
  };
  const Stacked order[] = {
      {"ln_1.weight", C, 0},          {"ln_1.bias", C, 0},
      {"attn.c_attn.weight", 3 * C, C}, {"attn.c_attn.bias", 3 * C, 0},
      {"attn.c_proj.weight", C, C},   {"attn.c_proj.bias", C, 0},
      {"ln_2.weight", C, 0},          {"ln_2.bias", C, 0},
      {"mlp.c_fc.weight", 4 * C, C},  {"mlp.c_fc.bias", 4 * C, 0},
      {"mlp.c_proj.weight", C, 4 * C}, {"mlp.c_proj.bias", C, 0},
  };
  for (const Stacked &t : order) {
    int64_t per = t.in ? t.out * t.in : t.out;
    std::vector<float> all = cur.take(L * per);
    for (int64_t l = 0; l < L; ++l) {
      std::string name = "h." + std::to_string(l) + "." + t.name;
      const float *p = all.data() + l * per;
      if (t.in)
        put(name, {t.in, t.out}, transposed(p, t.out, t.in));
      else
        put(name, {t.out}, std::vector<float>(p, p + per));
    }
  }
  put("ln_f.weight", {C}, cur.take(C));
  put("ln_f.bias", {C}, cur.take(C));
  if (cur.offset != cur.size)
    throw FormatError(path + ": " + std::to_string(cur.size - cur.offset) +
                      " bytes after the last tensor (not an llm.c GPT-2 "
                      "model of the header's size)");
  return m;
}

} // namespace gptc
