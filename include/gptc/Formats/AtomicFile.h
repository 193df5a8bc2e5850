//===- AtomicFile.h - Replace a file all at once ----------------*- C++ -*-===//
//
// Readers of PATH see either its old contents or the complete new ones, never
// a half-written file: the data goes to PATH.tmp.<pid> in the same directory,
// is synced, and is then renamed over PATH (rename is atomic within one file
// system); the directory is synced so the rename survives a crash.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_FORMATS_ATOMICFILE_H
#define GPTC_FORMATS_ATOMICFILE_H

#include <cstddef>
#include <string>

namespace gptc {

/// Streams data into a temporary file and renames it over the target on
/// commit(). On any failure, and when destroyed without commit(), the
/// temporary file is removed and an existing target is left untouched.
/// Errors are FormatError with the system's reason (strerror text).
class AtomicFile {
public:
  /// Creates the temporary file next to `path`.
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile &) = delete;
  AtomicFile &operator=(const AtomicFile &) = delete;

  void write(const void *data, size_t size);
  /// Syncs the data, renames it over the target, syncs the directory.
  void commit();

  const std::string &path() const { return path_; }
  const std::string &tempPath() const { return tempPath_; }

private:
  /// Removes the temporary file and throws "PATH: what: strerror(err)".
  [[noreturn]] void fail(const std::string &what, int err);
  void discard();

  std::string path_;
  std::string tempPath_;
  int fd_ = -1;
  bool ownsTemp_ = false; // the temporary file exists and is ours to remove
};

/// Writes `size` bytes to `path` atomically.
void writeFileAtomically(const std::string &path, const void *data,
                         size_t size);

} // namespace gptc

#endif // GPTC_FORMATS_ATOMICFILE_H
