//===- Executor.h - runs gpt dialect functions on the CPU -------*- C++ -*-===//
//
// The reference every pass and every GPU kernel is checked against: it
// interprets a func.func op by op on host tensors. A kernel failure (an id
// outside its table, say) is reported as an error at the op's location.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_EXECUTOR_EXECUTOR_H
#define GPTC_EXECUTOR_EXECUTOR_H

#include "gptc/Executor/HostTensor.h"
#include "gptc/Executor/Precision.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace gptc::exec {

/// Runs `func` on `args` (one per function argument, shapes as declared).
/// Fails with a diagnostic at the offending op.
mlir::FailureOr<std::vector<HostTensor>>
runFunction(mlir::func::FuncOp func, const std::vector<HostTensor> &args);

/// How a value of this tensor type is stored: bf16 and f16 tensors hold
/// only values of their type (see gptc/Executor/Precision.h).
StorageKind storageOf(mlir::Type type);

} // namespace gptc::exec

#endif // GPTC_EXECUTOR_EXECUTOR_H
