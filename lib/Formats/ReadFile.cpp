//===- ReadFile.cpp - Whole-file reads for the format readers -------------===//

#include "ReadFile.h"
#include "gptc/Formats/Error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gptc {

std::vector<uint8_t> readWholeFile(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    throw FormatError(path + ": cannot open: " + std::strerror(err));
  }
  // Size the buffer from fstat so a large checkpoint is read without
  // reallocating; grow in chunks for pipes and files of unknown size.
  struct stat st;
  bool knownSize =
      ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
  std::vector<uint8_t> bytes(knownSize ? static_cast<size_t>(st.st_size) : 0);
  size_t used = 0;
  for (;;) {
    if (used == bytes.size()) {
      if (knownSize)
        break;
      bytes.resize(used + (1 << 20));
    }
    ssize_t n = ::read(fd, bytes.data() + used, bytes.size() - used);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      throw FormatError(path + ": cannot read: " + std::strerror(err));
    }
    if (n == 0)
      break;
    used += static_cast<size_t>(n);
  }
  bytes.resize(used);
  ::close(fd);
  return bytes;
}

} // namespace gptc
