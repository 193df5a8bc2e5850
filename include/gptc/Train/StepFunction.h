//===- StepFunction.h - run a step function by its attributes ---*- C++ -*-===//
//
// The compiled step functions (see gptc/Pipeline/Pipeline.h) say what each
// argument and result is with an attribute: gpt.param, gpt.grad, gpt.adam_m,
// gpt.adam_v (each naming a parameter), gpt.hyper ("lr", "step",
// "grad_scale"), gpt.input ("tokens", "targets") and gpt.output ("loss",
// "logits", "grad_norm") and gpt.param_copy (a parameter's low-precision
// copy). The trainer binds by these, never by position, so
// a pass may reorder or add arguments without breaking it.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TRAIN_STEPFUNCTION_H
#define GPTC_TRAIN_STEPFUNCTION_H

#include "gptc/Executor/HostTensor.h"
#include "gptc/Executor/Precision.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/STLFunctionalExtras.h"

#include <string>
#include <vector>

namespace gptc::train {

/// One argument or result.
struct Slot {
  enum class Role {
    Param,
    Grad,
    AdamM,
    AdamV,
    Hyper,
    Input,
    Output,
    ParamCopy
  };
  Role role;
  std::string name; ///< the attribute's value
  std::vector<int64_t> shape;
  exec::StorageKind storage = exec::StorageKind::F32; ///< its element type
};

class StepFunction {
public:
  /// Fails with an error at `func` if an argument or result has no role.
  static mlir::FailureOr<StepFunction> get(mlir::func::FuncOp func);

  mlir::func::FuncOp func() const { return func_; }
  const std::vector<Slot> &args() const { return args_; }
  const std::vector<Slot> &results() const { return results_; }
  /// The index of the result with this role and name, or -1.
  int resultIndex(Slot::Role role, const std::string &name) const;

  /// Runs the function with each argument taken from `lookup`.
  mlir::FailureOr<std::vector<exec::HostTensor>>
  run(llvm::function_ref<const exec::HostTensor &(const Slot &)> lookup) const;

private:
  mlir::func::FuncOp func_;
  std::vector<Slot> args_, results_;
};

} // namespace gptc::train

#endif // GPTC_TRAIN_STEPFUNCTION_H
