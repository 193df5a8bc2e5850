//===- TokenFile.cpp - Tokenized training data files ----------------------===//

#include "gptc/Formats/TokenFile.h"
#include "ReadFile.h"
#include "gptc/Formats/AtomicFile.h"
#include "gptc/Formats/Error.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <limits>

static_assert(std::endian::native == std::endian::little,
              "gptcFormats assumes a little-endian host");

namespace gptc {

namespace {

std::vector<uint16_t> tokensFrom(const uint8_t *bytes, size_t count) {
  std::vector<uint16_t> tokens(count);
  std::copy_n(bytes, count * sizeof(uint16_t),
              reinterpret_cast<uint8_t *>(tokens.data()));
  return tokens;
}

TokenFile readLlmcShard(const std::string &path,
                        const std::vector<uint8_t> &bytes) {
  if (bytes.size() < kLlmcShardHeaderBytes)
    throw FormatError(path + ": truncated llm.c shard: the header needs " +
                      std::to_string(kLlmcShardHeaderBytes) +
                      " bytes, file has " + std::to_string(bytes.size()));
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof(header));
  if (header[1] != kLlmcShardVersion)
    throw FormatError(path + ": unsupported llm.c shard version " +
                      std::to_string(header[1]) + " (expected 1)");
  size_t tokenBytes = bytes.size() - kLlmcShardHeaderBytes;
  if (header[2] < 0 || 2 * size_t(header[2]) != tokenBytes)
    throw FormatError(path + ": length mismatch: header says " +
                      std::to_string(header[2]) + " tokens, file holds " +
                      std::to_string(tokenBytes) + " bytes of tokens");
  return {tokensFrom(bytes.data() + kLlmcShardHeaderBytes, header[2]),
          TokenFormat::LlmC};
}

/// An llm.c header with a damaged magic: version 1 and either a token count
/// that fits the file or the all-zero padding llm.c writes after the count.
/// Raw tokens are most unlikely to look like this, so reading the file as
/// nanoGPT data would only hide the damage.
bool looksLikeLlmcHeader(const std::vector<uint8_t> &bytes) {
  if (bytes.size() < kLlmcShardHeaderBytes)
    return false;
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof(header));
  if (header[1] != kLlmcShardVersion)
    return false;
  if (int64_t(kLlmcShardHeaderBytes) + 2 * int64_t(header[2]) ==
      int64_t(bytes.size()))
    return true;
  return header[2] > 0 && std::all_of(bytes.begin() + sizeof(header),
                                      bytes.begin() + kLlmcShardHeaderBytes,
                                      [](uint8_t b) { return b == 0; });
}

} // namespace

TokenFile readTokenFile(const std::string &path) {
  std::vector<uint8_t> bytes = readWholeFile(path);
  if (bytes.empty())
    throw FormatError(path + ": empty token file");

  int32_t magic = 0;
  if (bytes.size() >= sizeof(magic))
    std::memcpy(&magic, bytes.data(), sizeof(magic));
  if (magic == kLlmcShardMagic)
    return readLlmcShard(path, bytes);
  if (looksLikeLlmcHeader(bytes)) {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "0x%08x", uint32_t(magic));
    throw FormatError(path + ": bad magic " + hex +
                      " (expected 20240520 for an llm.c shard)");
  }
  if (bytes.size() % 2 != 0)
    throw FormatError(path + ": odd size " + std::to_string(bytes.size()) +
                      " bytes: not an llm.c shard (no magic 20240520) nor "
                      "nanoGPT uint16 tokens");
  return {tokensFrom(bytes.data(), bytes.size() / 2), TokenFormat::NanoGPT};
}

void writeTokenShard(const std::string &path,
                     const std::vector<uint16_t> &tokens) {
  if (tokens.size() > size_t(std::numeric_limits<int32_t>::max()))
    throw FormatError(path + ": " + std::to_string(tokens.size()) +
                      " tokens are too many for one llm.c shard (its count "
                      "is an int32)");
  int32_t header[256] = {kLlmcShardMagic, kLlmcShardVersion,
                         int32_t(tokens.size())};
  static_assert(sizeof(header) == kLlmcShardHeaderBytes);
  AtomicFile file(path);
  file.write(header, sizeof(header));
  file.write(tokens.data(), tokens.size() * sizeof(uint16_t));
  file.commit();
}

} // namespace gptc
