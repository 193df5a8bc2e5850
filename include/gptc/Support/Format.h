//===- Format.h - how reports print counts and sizes ------------*- C++ -*-===//
//
// One spelling for every report (memory report, memory plan, the training
// program's memory line). No MLIR: the runtime prints them too.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_SUPPORT_FORMAT_H
#define GPTC_SUPPORT_FORMAT_H

#include <cstdint>
#include <string>

namespace gptc {

/// 124439808 -> "124,439,808".
std::string withThousands(int64_t n);

/// 1572864 -> "1.5 MiB".
std::string mebibytes(int64_t bytes);

} // namespace gptc

#endif // GPTC_SUPPORT_FORMAT_H
