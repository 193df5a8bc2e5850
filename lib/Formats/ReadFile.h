//===- ReadFile.h - Whole-file reads for the format readers ----*- C++ -*-===//

#ifndef GPTC_LIB_FORMATS_READFILE_H
#define GPTC_LIB_FORMATS_READFILE_H

#include <cstdint>
#include <string>
#include <vector>

namespace gptc {

/// Returns the bytes of `path`; throws FormatError("PATH: cannot ...: why").
std::vector<uint8_t> readWholeFile(const std::string &path);

} // namespace gptc

#endif // GPTC_LIB_FORMATS_READFILE_H
