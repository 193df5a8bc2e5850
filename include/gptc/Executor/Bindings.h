//===- Bindings.h - function arguments from checkpoints and data -*- C++ -*-===//
//
// A model function's arguments are its parameters (tagged gpt.param) and its
// token batches (gpt.input): describeArguments reads them off the function;
// Arguments.h fills them from a checkpoint and a token file.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_EXECUTOR_BINDINGS_H
#define GPTC_EXECUTOR_BINDINGS_H

#include "gptc/Executor/Arguments.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace gptc::exec {

std::vector<ArgumentInfo> describeArguments(mlir::func::FuncOp func);

} // namespace gptc::exec

#endif // GPTC_EXECUTOR_BINDINGS_H
