//===- Arguments.h - parameters and batches as arguments -------*- C++ -*-===//
//
// A model function's arguments are its parameters and its token batches.
// These helpers fill them from a safetensors file (or an llm.c model_*.bin)
// and a token file, with one-line errors that name the file and the tensor.
// No MLIR: the training program loads --init-from and its batches with them;
// Bindings.h reads the same descriptions off a compiled function.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_EXECUTOR_ARGUMENTS_H
#define GPTC_EXECUTOR_ARGUMENTS_H

#include "gptc/Executor/HostTensor.h"
#include "gptc/Executor/Precision.h"
#include "gptc/Formats/Safetensors.h"

#include <map>

namespace gptc::exec {

struct ArgumentInfo {
  /// ParamCopy: a parameter's low-precision copy (gpt-weight-copies), made
  /// from the parameter by paramCopy.
  enum class Kind { Param, Tokens, Targets, ParamCopy };
  Kind kind;
  std::string name; ///< parameter name, or "tokens" / "targets"
  std::vector<int64_t> shape;
  StorageKind storage = StorageKind::F32; ///< ParamCopy: its element type
};

/// Total number of parameter elements.
int64_t parameterCount(const std::vector<ArgumentInfo> &args);

/// Reads every parameter from `file` (names as in Hugging Face GPT-2, with
/// or without a "transformer." prefix; F32, F16 or BF16). Throws FormatError
/// for a missing tensor, a wrong shape or dtype, or a tensor that belongs to
/// no parameter.
std::map<std::string, HostTensor>
loadParameters(const std::vector<ArgumentInfo> &args,
               const SafetensorsFile &file);

/// The same from a file of either format: a safetensors file, or an llm.c
/// model_*.bin (told apart by llm.c's magic 20240326).
std::map<std::string, HostTensor>
loadParametersFromFile(const std::vector<ArgumentInfo> &args,
                       const std::string &path);

/// Inputs and next-token targets of the [B, T] window starting at `start`.
struct Batch {
  HostTensor tokens;
  HostTensor targets;
};
/// Throws FormatError (naming `source`) if the window runs past the end or
/// holds an id outside [0, vocab).
Batch batchAt(const std::vector<uint16_t> &tokens, size_t start, int64_t B,
              int64_t T, int64_t vocab, const std::string &source);

/// Arguments in function order.
std::vector<HostTensor>
bindArguments(const std::vector<ArgumentInfo> &args,
              const std::map<std::string, HostTensor> &params,
              const Batch &batch);

} // namespace gptc::exec

#endif // GPTC_EXECUTOR_ARGUMENTS_H
