//===- Precision.cpp - rounding to bf16 and fp16 --------------------------===//

#include "gptc/Executor/Precision.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace gptc::exec {

namespace {
uint32_t bitsOf(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
float fromBits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

/// Rounds away the low `drop` bits of the significand, ties to even. A carry
/// into the exponent is the correct next binade (or inf past the top).
float roundSignificand(float x, int drop) {
  uint32_t u = bitsOf(x);
  uint32_t half = (1u << (drop - 1)) - 1;
  u += half + ((u >> drop) & 1u);
  return fromBits(u & ~((1u << drop) - 1u));
}

/// `x`, already a bf16 value, as its bit pattern.
uint16_t bf16Bits(float x) {
  if (std::isnan(x))
    return uint16_t(((bitsOf(x) >> 16) & 0x8000u) | 0x7FC0u);
  return uint16_t(bitsOf(x) >> 16);
}

/// `x`, already an IEEE half value, as its bit pattern.
uint16_t halfBits(float x) {
  uint32_t u = bitsOf(x);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  float a = std::fabs(x);
  if (std::isnan(x))
    return sign | 0x7E00u;
  if (std::isinf(a))
    return sign | 0x7C00u;
  if (a < 0x1p-14f) // zero and subnormals: whole multiples of 2^-24
    return sign | uint16_t(a * 0x1p24f);
  uint32_t exponent = ((u >> 23) & 0xFFu) - 127 + 15;
  return sign | uint16_t(exponent << 10) | uint16_t((u >> 13) & 0x3FFu);
}
} // namespace

float roundToBF16(float x) {
  if (std::isnan(x))
    return x;
  return roundSignificand(x, 16);
}

float roundToF16(float x) {
  if (std::isnan(x) || std::isinf(x))
    return x;
  float a = std::fabs(x);
  if (a >= 65520.0f) // halfway past the largest half (65504) rounds up: inf
    return std::copysign(INFINITY, x);
  if (a < 0x1p-14f) // subnormal halves: multiples of 2^-24
    return std::copysign(std::nearbyint(a * 0x1p24f) * 0x1p-24f, x);
  return roundSignificand(x, 13);
}

void roundTo(HostTensor &t, StorageKind kind) {
  if (kind == StorageKind::F32 || t.kind != ElementKind::F32)
    return;
  float *p = t.data();
  int64_t n = static_cast<int64_t>(t.f32.size());
  if (kind == StorageKind::BF16) {
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i)
      p[i] = roundToBF16(p[i]);
  } else {
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i)
      p[i] = roundToF16(p[i]);
  }
}

uint16_t bf16BitsOf(float x) { return bf16Bits(roundToBF16(x)); }

uint16_t halfBitsOf(float x) { return halfBits(roundToF16(x)); }

bool isLeadingRows(const std::vector<int64_t> &part,
                   const std::vector<int64_t> &whole) {
  return !part.empty() && part.size() == whole.size() &&
         part[0] <= whole[0] &&
         std::equal(part.begin() + 1, part.end(), whole.begin() + 1);
}

HostTensor paramCopy(const HostTensor &param, const std::vector<int64_t> &shape,
                     StorageKind storage) {
  const std::vector<int64_t> &from = param.shape;
  if (from.size() != shape.size())
    throw std::invalid_argument("a copy of rank " +
                                std::to_string(shape.size()) +
                                " of a parameter of rank " +
                                std::to_string(from.size()));
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] < from[d])
      throw std::invalid_argument("a copy " + shapeString(shape) +
                                  " smaller than its parameter " +
                                  shapeString(from));
  HostTensor copy = HostTensor::floats(shape);
  // Row-major walk of the parameter; each element lands at the same index
  // of the larger copy.
  std::vector<int64_t> index(from.size(), 0);
  for (int64_t i = 0; i < param.numel(); ++i) {
    int64_t at = 0;
    for (size_t d = 0; d < shape.size(); ++d)
      at = at * shape[d] + index[d];
    copy.f32[size_t(at)] = param.f32[size_t(i)];
    for (size_t d = from.size(); d-- > 0;) {
      if (++index[d] < from[d])
        break;
      index[d] = 0;
    }
  }
  roundTo(copy, storage);
  return copy;
}

} // namespace gptc::exec
