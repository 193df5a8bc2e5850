//===- FusedLayerNorm.h - gpt.fused_layernorm on the CPU --------*- C++ -*-===//
//
// A layernorm with a fused elementwise prologue and a layernorm_grad with a
// fused elementwise epilogue (GPTFusedOps.td), without MLIR: the executor and the CPU backend of the runtime share it, so both
// give the bits of the unfused pairs with gpt.fused_elementwise.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_EXECUTOR_FUSEDLAYERNORM_H
#define GPTC_EXECUTOR_FUSEDLAYERNORM_H

#include "gptc/Executor/HostTensor.h"
#include "gptc/Executor/ScalarProgram.h"

#include <vector>

namespace gptc::exec {

/// Runs `body` over `inputs` (each of `shape` or broadcasting to it), then
/// normalises its first result as layernorm() does. Returns the normalised
/// tensor, then the body's other results, all of `shape`, float32 (the
/// caller rounds each to its type on write).
std::vector<HostTensor> fusedLayernorm(const ScalarProgram &body,
                                       const std::vector<const HostTensor *> &inputs,
                                       const HostTensor &gamma,
                                       const HostTensor &beta,
                                       const std::vector<int64_t> &shape,
                                       float epsilon);

/// gpt.fused_layernorm_grad: layernormGrad()'s dx (float32) fed to `body`
/// as its first argument, then `inputs` (each of x's shape or broadcasting
/// to it). Returns dgamma, dbeta, then the body's results (float32), each
/// of `valueShapes` (one a result): x's shape, or [C] for the column sums
/// of that result over the rows (reduceSum's, in double).
std::vector<HostTensor>
fusedLayernormGrad(const ScalarProgram &body, const HostTensor &x,
                   const HostTensor &gamma, const HostTensor &dy,
                   const std::vector<const HostTensor *> &inputs,
                   const std::vector<std::vector<int64_t>> &valueShapes,
                   float epsilon);

} // namespace gptc::exec

#endif // GPTC_EXECUTOR_FUSEDLAYERNORM_H
