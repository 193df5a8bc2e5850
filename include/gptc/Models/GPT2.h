//===- GPT2.h - GPT-2 configurations and its graph --------------*- C++ -*-===//
#ifndef GPTC_MODELS_GPT2_H
#define GPTC_MODELS_GPT2_H

#include "gptc/Models/GPT2Config.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <optional>
#include <string>
#include <vector>

namespace gptc::models {

/// gpt2-tiny, gpt2, gpt2-medium, gpt2-large, gpt2-xl.
std::optional<GPT2Config> gpt2Preset(const std::string &name);
std::vector<std::string> gpt2PresetNames();

/// Why a configuration (with batch B and sequence length T) cannot be built,
/// or an empty string if it can.
std::string validateGPT2(const GPT2Config &config, int64_t batch, int64_t seq);

/// The forward pass on a [B, T] batch of tokens and targets, returning the
/// mean cross-entropy loss and the logits [B, T, V].
mlir::OwningOpRef<mlir::ModuleOp> buildGPT2(mlir::MLIRContext &ctx,
                                            const GPT2Config &config,
                                            int64_t batch, int64_t seq);

} // namespace gptc::models

#endif // GPTC_MODELS_GPT2_H
