//===- Bundle.h - the runtime with its Program appended -------*- C++ -*-===//
//
// `gptc compile -o OUT` writes the training program as one executable file:
//
//   [gptc-runtime, as built] [writeProgram bytes] [u64 LE length] "GPTCBNDL"
//
// The runtime finds its Program by reading the last 16 bytes of its own
// file (/proc/self/exe); a runtime run as built has no footer. The ELF
// loader ignores bytes past the sections it maps, so the file stays a valid
// executable. No MLIR: the runtime reads this.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_RUNTIME_BUNDLE_H
#define GPTC_RUNTIME_BUNDLE_H

#include "gptc/Runtime/Program.h"

#include <optional>
#include <string>

namespace gptc::rt {

inline constexpr char kBundleMagic[8] = {'G', 'P', 'T', 'C',
                                         'B', 'N', 'D', 'L'};

/// Writes `runtime` followed by `program` and the footer to `out`, all at
/// once (AtomicFile), executable (0755). Throws FormatError naming the file
/// that could not be read or written.
void writeBundle(const std::string &runtime, const Program &program,
                 const std::string &out);

/// The Program appended to the executable `path`, or nullopt if it has no
/// footer (a bare runtime). Throws FormatError if the footer is there but
/// the Program cannot be read.
std::optional<Program> readBundledProgram(const std::string &path);

} // namespace gptc::rt

#endif // GPTC_RUNTIME_BUNDLE_H
