//===- ParamSpec.h - a parameter's name, shape and initial values -*- C++ -*-===//
//
// Normal parameters are drawn, in row-major order, from their own stream
// Rng(seed, streamOf(name)) through Box-Muller in double precision, scaled by
// the std and rounded to float. A parameter's values therefore depend only on
// the seed, its name and its size, not on the other parameters or their
// order. No MLIR: the training program initialises parameters the same way.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TRAIN_PARAMSPEC_H
#define GPTC_TRAIN_PARAMSPEC_H

#include "gptc/Executor/HostTensor.h"

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

exec::HostTensor initParameter(const ParamSpec &spec, uint64_t seed);

std::map<std::string, exec::HostTensor>
initParameters(const std::vector<ParamSpec> &specs, uint64_t seed);

} // namespace gptc::train

#endif // GPTC_TRAIN_PARAMSPEC_H
