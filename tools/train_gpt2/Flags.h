//===- Flags.h - the training program's command line ------------*- C++ -*-===//
//
// gptc-runtime links no LLVM, so no llvm::cl: a small parser that takes
// flags as gptc does (--name=value, --name value, -name; a bare --name sets
// a bool) and reports a bad one as one line.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TOOLS_TRAIN_GPT2_FLAGS_H
#define GPTC_TOOLS_TRAIN_GPT2_FLAGS_H

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace gptc::runtime {

/// A flag the command line got wrong; the message is one line.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Flags {
public:
  enum class Kind { Bool, Value };
  struct Spec {
    std::string name;
    Kind kind;
    std::string help; ///< "" hides the flag from --help
  };

  explicit Flags(std::vector<Spec> specs) : specs_(std::move(specs)) {}

  /// Throws UsageError for an unknown flag, a missing value or a
  /// positional argument.
  void parse(int argc, char **argv);

  bool has(const std::string &name) const { return given_.count(name) != 0; }
  /// The flags given on the command line, in no particular order.
  std::vector<std::string> given() const;

  std::string text(const std::string &name, const std::string &fallback) const;
  /// Throws UsageError for a value that is not a (non-negative) integer, a
  /// number or a bool.
  int64_t integer(const std::string &name, int64_t fallback) const;
  uint64_t unsignedInteger(const std::string &name, uint64_t fallback) const;
  double real(const std::string &name, double fallback) const;
  bool boolean(const std::string &name) const;

  /// One line per visible flag.
  std::string help() const;

private:
  const Spec *find(const std::string &name) const;

  std::vector<Spec> specs_;
  std::map<std::string, std::string> given_;
};

} // namespace gptc::runtime

#endif // GPTC_TOOLS_TRAIN_GPT2_FLAGS_H
