//===- Bundle.cpp - a training program: the runtime plus its Program ------===//

#include "gptc/Runtime/Bundle.h"

#include "gptc/Formats/AtomicFile.h"
#include "gptc/Formats/Error.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sys/stat.h>
#include <vector>

namespace gptc::rt {

namespace {
[[noreturn]] void ioError(const std::string &path, const std::string &what) {
  throw FormatError(path + ": " + what + ": " + std::strerror(errno));
}

std::vector<uint8_t> readAll(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    ioError(path, "cannot open");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (in.bad())
    ioError(path, "cannot read");
  return bytes;
}

/// The footer of `runtime`: a runtime that already carries a Program would
/// make a file whose first footer is not the last.
bool hasFooter(const std::vector<uint8_t> &bytes) {
  return bytes.size() >= 16 &&
         std::memcmp(bytes.data() + bytes.size() - 8, kBundleMagic, 8) == 0;
}
} // namespace

void writeBundle(const std::string &runtime, const Program &program,
                 const std::string &out) {
  std::vector<uint8_t> exe = readAll(runtime);
  if (hasFooter(exe))
    throw FormatError(runtime + ": already carries a program; expected the "
                                "bare gptc-runtime");
  std::vector<uint8_t> bytes = writeProgram(program);
  uint8_t length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = uint8_t(uint64_t(bytes.size()) >> (8 * i));
  AtomicFile file(out);
  file.write(exe.data(), exe.size());
  file.write(bytes.data(), bytes.size());
  file.write(length, sizeof length);
  file.write(kBundleMagic, sizeof kBundleMagic);
  // Executable before the rename, so OUT never exists without its mode.
  if (::chmod(file.tempPath().c_str(), 0755) != 0)
    ioError(out, "cannot make it executable");
  file.commit();
}

std::optional<Program> readBundledProgram(const std::string &path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in)
    ioError(path, "cannot open");
  uint64_t size = uint64_t(in.tellg());
  if (size < 16)
    return std::nullopt;
  uint8_t footer[16];
  in.seekg(std::streamoff(size - 16));
  if (!in.read(reinterpret_cast<char *>(footer), 16))
    ioError(path, "cannot read");
  if (std::memcmp(footer + 8, kBundleMagic, 8) != 0)
    return std::nullopt;
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i)
    length |= uint64_t(footer[i]) << (8 * i);
  if (length > size - 16)
    throw FormatError(path + ": the program's footer says " +
                      std::to_string(length) + " bytes, more than the file");
  std::vector<uint8_t> bytes(length);
  in.seekg(std::streamoff(size - 16 - length));
  if (!in.read(reinterpret_cast<char *>(bytes.data()), std::streamsize(length)))
    ioError(path, "cannot read");
  return readProgram(bytes.data(), bytes.size(), path);
}

} // namespace gptc::rt
