//===- Random.h - a portable, seedable random number generator --*- C++ -*-===//
//
// Training must reproduce bit for bit on any machine, so gptc does not use
// <random>'s distributions (their algorithms are implementation-defined).
// Rng is xoshiro256** (Blackman & Vigna) seeded through splitmix64; normals
// come from the Box-Muller transform. A (seed, stream) pair names an
// independent sequence, so each consumer (a parameter's initialisation, an
// epoch's shuffle) draws from its own stream and does not depend on how much
// another consumer drew.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TRAIN_RANDOM_H
#define GPTC_TRAIN_RANDOM_H

#include <cstdint>
#include <string_view>

namespace gptc::train {

class Rng {
public:
  explicit Rng(uint64_t seed, uint64_t stream = 0);

  uint64_t next();
  /// Uniform in [0, 1), 53 random bits.
  double uniform();
  /// Standard normal: Box-Muller on two uniforms, both outputs used.
  double normal();
  /// Uniform integer in [0, n), unbiased (rejection sampling); n > 0.
  uint64_t below(uint64_t n);

private:
  uint64_t s_[4];
  double spare_ = 0.0;
  bool hasSpare_ = false;
};

/// FNV-1a, 64 bits: a stream number from a name (a parameter's, say).
uint64_t streamOf(std::string_view name);

} // namespace gptc::train

#endif // GPTC_TRAIN_RANDOM_H
