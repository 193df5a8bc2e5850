//===- AtomicFile.cpp - Replace a file all at once ------------------------===//

#include "gptc/Formats/AtomicFile.h"
#include "gptc/Formats/Error.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <unistd.h>

namespace gptc {

static int createTemp(const std::string &tempPath) {
  int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
  int fd = ::open(tempPath.c_str(), flags, 0666);
  // A leftover from a crashed process that had our pid: it is ours to reuse.
  // O_EXCL plus unlink also avoids writing through a planted symlink.
  if (fd < 0 && errno == EEXIST && ::unlink(tempPath.c_str()) == 0)
    fd = ::open(tempPath.c_str(), flags, 0666);
  return fd;
}

AtomicFile::AtomicFile(std::string path)
    : path_(std::move(path)),
      tempPath_(path_ + ".tmp." + std::to_string(::getpid())) {
  fd_ = createTemp(tempPath_);
  if (fd_ < 0) {
    int err = errno;
    throw FormatError(path_ + ": cannot create " + tempPath_ + ": " +
                      std::strerror(err));
  }
  ownsTemp_ = true;
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() {
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
  if (ownsTemp_)
    ::unlink(tempPath_.c_str());
  ownsTemp_ = false;
}

void AtomicFile::fail(const std::string &what, int err) {
  discard();
  throw FormatError(path_ + ": " + what + ": " + std::strerror(err));
}

void AtomicFile::write(const void *data, size_t size) {
  if (!ownsTemp_)
    throw FormatError(path_ + ": write after the file was committed or failed");
  const char *p = static_cast<const char *>(data);
  while (size > 0) {
    ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      int err = errno; // before anything else can overwrite it
      fail("cannot write", err);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  if (!ownsTemp_)
    throw FormatError(path_ +
                      ": commit after the file was committed or failed");
  if (::fsync(fd_) != 0) {
    int err = errno;
    fail("cannot sync", err);
  }
  // close() can report a deferred write error (NFS, quotas).
  int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) {
    int err = errno;
    fail("cannot close", err);
  }
  if (::rename(tempPath_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    fail("cannot rename " + tempPath_ + " over it", err);
  }
  ownsTemp_ = false;

  // Make the rename itself durable. Some file systems cannot sync a
  // directory (EINVAL); the data is already safe there.
  std::filesystem::path parent = std::filesystem::path(path_).parent_path();
  std::string dir = parent.empty() ? std::string(".") : parent.string();
  int dirFd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirFd < 0 || (::fsync(dirFd) != 0 && errno != EINVAL)) {
    int err = errno;
    if (dirFd >= 0)
      ::close(dirFd);
    throw FormatError(path_ + ": written, but syncing directory " + dir +
                      " failed: " + std::strerror(err));
  }
  ::close(dirFd);
}

void writeFileAtomically(const std::string &path, const void *data,
                         size_t size) {
  AtomicFile file(path);
  file.write(data, size);
  file.commit();
}

} // namespace gptc
