//===- Format.cpp - how reports print counts and sizes --------------------===//

#include "gptc/Support/Format.h"

#include <cstdio>

namespace gptc {

std::string withThousands(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return out;
}

std::string mebibytes(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", double(bytes) / (1 << 20));
  return buf;
}

} // namespace gptc
