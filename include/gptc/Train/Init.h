//===- Init.h - parameters at the start of training -------------*- C++ -*-===//
//
// Each gpt.param argument carries how it starts: gpt.init = "normal" (with
// gpt.init_std), "zeros" or "ones". Normal parameters are drawn, in
// row-major order, from their own stream Rng(seed, streamOf(name)) through
// Box-Muller in double precision, scaled by the std and rounded to float. A
// parameter's values therefore depend only on the seed, its name and its
// size, not on the other parameters or their order.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TRAIN_INIT_H
#define GPTC_TRAIN_INIT_H

#include "gptc/Executor/HostTensor.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <map>
#include <string>
#include <vector>

namespace gptc::train {

struct ParamSpec {
  enum class Init { Normal, Zeros, Ones };
  std::string name;
  std::vector<int64_t> shape;
  Init init = Init::Zeros;
  double std = 0.0; ///< for Normal
};

/// The gpt.param arguments of `func`, in argument order; fails with an error
/// at `func` if one lacks gpt.init.
mlir::FailureOr<std::vector<ParamSpec>> parameterSpecs(mlir::func::FuncOp func);

exec::HostTensor initParameter(const ParamSpec &spec, uint64_t seed);

std::map<std::string, exec::HostTensor>
initParameters(const std::vector<ParamSpec> &specs, uint64_t seed);

} // namespace gptc::train

#endif // GPTC_TRAIN_INIT_H
