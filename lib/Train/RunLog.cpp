//===- RunLog.cpp - progress lines on stdout and in log.txt ---------------===//

#include "gptc/Train/RunLog.h"

#include "gptc/Formats/Error.h"

#include <cerrno>
#include <cstring>

namespace gptc::train {

RunLog::RunLog(const std::string &path) {
  if (path.empty())
    return;
  file_ = std::fopen(path.c_str(), "a");
  if (!file_)
    throw FormatError(path +
                      ": cannot open for appending: " + std::strerror(errno));
}

RunLog::~RunLog() {
  if (file_)
    std::fclose(file_);
}

// The file first: whoever saw a line on stdout finds it in the log too, even
// if the process dies right after printing it.
void RunLog::line(const std::string &text) {
  if (file_) {
    std::fprintf(file_, "%s\n", text.c_str());
    std::fflush(file_);
  }
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

} // namespace gptc::train
