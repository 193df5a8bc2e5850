//===- Random.cpp - a portable, seedable random number generator ----------===//

#include "gptc/Train/Random.h"

#include <cmath>
#include <numbers>

namespace gptc::train {

namespace {
uint64_t splitmix64(uint64_t &x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
} // namespace

Rng::Rng(uint64_t seed, uint64_t stream) {
  // Mix the stream in through a splitmix64 step of its own, so that
  // neighbouring (seed, stream) pairs give unrelated states.
  uint64_t x = seed;
  uint64_t mixed = splitmix64(x) ^ stream;
  for (uint64_t &word : s_)
    word = splitmix64(mixed);
}

uint64_t Rng::next() {
  uint64_t result = rotl(s_[1] * 5, 7) * 9;
  uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return double(next() >> 11) * 0x1.0p-53; }

double Rng::normal() {
  if (hasSpare_) {
    hasSpare_ = false;
    return spare_;
  }
  double u1 = 1.0 - uniform(); // (0, 1]: log(u1) is finite
  double u2 = uniform();
  double r = std::sqrt(-2.0 * std::log(u1));
  double theta = 2.0 * std::numbers::pi * u2;
  spare_ = r * std::sin(theta);
  hasSpare_ = true;
  return r * std::cos(theta);
}

uint64_t Rng::below(uint64_t n) {
  // Reject the top partial copy of [0, n) so every value is equally likely.
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do
    x = next();
  while (x >= limit);
  return x % n;
}

uint64_t streamOf(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : name)
    h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

} // namespace gptc::train
