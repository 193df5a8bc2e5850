//===- Sha256Test.cpp - SHA-256 against published test vectors -----------===//

#include "gptc/Support/Sha256.h"

#include <gtest/gtest.h>

using gptc::Sha256;
using gptc::sha256Hex;

namespace {

// FIPS 180-4 examples and the boundaries of the padding (55, 56, 63, 64 and
// 119 bytes); values from Python's hashlib.
TEST(Sha256, KnownDigests) {
  EXPECT_EQ(sha256Hex(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(
      sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256Hex(std::string(55, 'a')),
            "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(sha256Hex(std::string(56, 'a')),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(sha256Hex(std::string(63, 'a')),
            "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34");
  EXPECT_EQ(sha256Hex(std::string(64, 'a')),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
  EXPECT_EQ(sha256Hex(std::string(119, 'a')),
            "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb");
}

TEST(Sha256, PiecewiseUpdatesMatchOneUpdate) {
  // A million 'a's, fed in uneven pieces that straddle block boundaries.
  std::string million(1000000, 'a');
  Sha256 hash;
  for (size_t done = 0, step = 1; done < million.size();
       step = step * 3 % 997 + 1) {
    size_t take = std::min(step, million.size() - done);
    hash.update(million.data() + done, take);
    done += take;
  }
  std::array<uint8_t, 32> digest = hash.digest();
  std::string hex;
  for (uint8_t byte : digest) {
    hex += "0123456789abcdef"[byte >> 4];
    hex += "0123456789abcdef"[byte & 15];
  }
  EXPECT_EQ(hex,
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_EQ(sha256Hex(million), hex);
}

} // namespace
