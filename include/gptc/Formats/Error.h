//===- Error.h - Errors from reading and writing files ----------*- C++ -*-===//
//
// Every format reader and writer reports problems as a FormatError whose
// message is one user-facing line that starts with the file path:
// "PATH: what is wrong".
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_FORMATS_ERROR_H
#define GPTC_FORMATS_ERROR_H

#include <stdexcept>

namespace gptc {

struct FormatError : std::runtime_error {
  using runtime_error::runtime_error;
};

} // namespace gptc

#endif // GPTC_FORMATS_ERROR_H
