//===- RunLog.h - progress lines on stdout and in log.txt -------*- C++ -*-===//

#ifndef GPTC_TRAIN_RUNLOG_H
#define GPTC_TRAIN_RUNLOG_H

#include <cstdio>
#include <string>

namespace gptc::train {

/// Prints each line to stdout and appends it to a log file, both flushed at
/// once so a killed run keeps every line it printed.
class RunLog {
public:
  /// `path` == "": stdout only. Throws FormatError if it cannot be opened.
  explicit RunLog(const std::string &path);
  ~RunLog();
  RunLog(const RunLog &) = delete;
  RunLog &operator=(const RunLog &) = delete;

  void line(const std::string &text);

private:
  std::FILE *file_ = nullptr;
};

} // namespace gptc::train

#endif // GPTC_TRAIN_RUNLOG_H
