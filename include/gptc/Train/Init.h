//===- Init.h - parameters at the start of training -------------*- C++ -*-===//
//
// Each gpt.param argument carries how it starts: gpt.init = "normal" (with
// gpt.init_std), "zeros" or "ones"; ParamSpec.h says how values are drawn.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TRAIN_INIT_H
#define GPTC_TRAIN_INIT_H

#include "gptc/Train/ParamSpec.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <map>
#include <string>
#include <vector>

namespace gptc::train {

/// The gpt.param arguments of `func`, in argument order; fails with an error
/// at `func` if one lacks gpt.init.
mlir::FailureOr<std::vector<ParamSpec>> parameterSpecs(mlir::func::FuncOp func);

} // namespace gptc::train

#endif // GPTC_TRAIN_INIT_H
