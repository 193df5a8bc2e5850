//===- TokenFile.h - Tokenized training data files ---------------*- C++
//-*-===//
//
// Two layouts of uint16 GPT-2 tokens, told apart by their first bytes:
//  - llm.c shards: a header of 256 little-endian int32 (magic 20240520,
//    version 1, token count), then the tokens;
//  - nanoGPT .bin files: the tokens alone.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_FORMATS_TOKENFILE_H
#define GPTC_FORMATS_TOKENFILE_H

#include <cstdint>
#include <string>
#include <vector>

namespace gptc {

enum class TokenFormat { LlmC, NanoGPT };

constexpr int32_t kLlmcShardMagic = 20240520;
constexpr int32_t kLlmcShardVersion = 1;
constexpr size_t kLlmcShardHeaderBytes = 256 * sizeof(int32_t);

struct TokenFile {
  std::vector<uint16_t> tokens;
  TokenFormat format;
};

/// Reads either layout, detected from the header; throws FormatError.
TokenFile readTokenFile(const std::string &path);

/// Writes `tokens` as an llm.c shard, atomically.
void writeTokenShard(const std::string &path,
                     const std::vector<uint16_t> &tokens);

} // namespace gptc

#endif // GPTC_FORMATS_TOKENFILE_H
