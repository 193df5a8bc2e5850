//===- FusedKernels.h - the fused elementwise ops on the CPU ----*- C++ -*-===//
//
// A fused op's body is compiled once per evaluation into a ScalarProgram: a
// list of instructions over registers, each register a chunk of elements.
// Running it is a tight loop per instruction per chunk (which vectorises),
// with OpenMP over chunks. Elementwise, so the result does not depend on
// the thread count.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_EXECUTOR_FUSEDKERNELS_H
#define GPTC_EXECUTOR_FUSEDKERNELS_H

#include "gptc/Dialect/GPT/GPTOps.h"
#include "gptc/Executor/HostTensor.h"
#include "gptc/Executor/ScalarProgram.h"

namespace gptc::exec {

/// The body of a fused op as a ScalarProgram; throws KernelError for an op
/// the scalar code has no instruction for.
ScalarProgram compileBody(mlir::Block &body);

/// gpt.fused_elementwise: `in` are its operands in order.
std::vector<HostTensor>
fusedElementwise(gpt::FusedElementwiseOp op,
                 const std::vector<const HostTensor *> &in);

/// gpt.multi_tensor_elementwise: `in` are its tensors, then its scalars.
std::vector<HostTensor>
multiTensorElementwise(gpt::MultiTensorElementwiseOp op,
                       const std::vector<const HostTensor *> &in);

/// gpt.multi_tensor_reduce: `in` are its tensors, then its scalars
/// (MultiTensorKernels.cpp).
HostTensor multiTensorReduce(gpt::MultiTensorReduceOp op,
                             const std::vector<const HostTensor *> &in);

} // namespace gptc::exec

#endif // GPTC_EXECUTOR_FUSEDKERNELS_H
