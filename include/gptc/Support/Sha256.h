//===- Sha256.h - SHA-256 digests for checking data files -------*- C++ -*-===//
//
// A small FIPS 180-4 SHA-256, so that verifying the pinned data files needs
// no crypto library (the runtime shares this code and must stay small).
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_SUPPORT_SHA256_H
#define GPTC_SUPPORT_SHA256_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gptc {

/// Incremental SHA-256: update() any number of times, then digest() once.
class Sha256 {
public:
  Sha256();
  void update(const void *data, size_t size);
  void update(std::string_view data) { update(data.data(), data.size()); }
  std::array<uint8_t, 32> digest();
  /// digest() as 64 lower-case hex digits.
  std::string hexDigest();

private:
  void compress(const uint8_t *block);

  std::array<uint32_t, 8> state;
  std::array<uint8_t, 64> buffer;
  size_t buffered = 0;
  uint64_t totalBytes = 0;
};

/// The SHA-256 of `data` as 64 lower-case hex digits.
std::string sha256Hex(std::string_view data);

} // namespace gptc

#endif // GPTC_SUPPORT_SHA256_H
