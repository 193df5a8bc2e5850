//===- ParamSpec.cpp - parameters at the start of training ----------------===//

#include "gptc/Train/ParamSpec.h"

#include "gptc/Train/Random.h"

namespace gptc::train {

exec::HostTensor initParameter(const ParamSpec &spec, uint64_t seed) {
  switch (spec.init) {
  case ParamSpec::Init::Zeros:
    return exec::HostTensor::floats(spec.shape, 0.0f);
  case ParamSpec::Init::Ones:
    return exec::HostTensor::floats(spec.shape, 1.0f);
  case ParamSpec::Init::Normal:
    break;
  }
  exec::HostTensor t = exec::HostTensor::floats(spec.shape);
  Rng rng(seed, streamOf(spec.name));
  for (float &x : t.f32)
    x = float(rng.normal() * spec.std);
  return t;
}

std::map<std::string, exec::HostTensor>
initParameters(const std::vector<ParamSpec> &specs, uint64_t seed) {
  std::map<std::string, exec::HostTensor> params;
  for (const ParamSpec &spec : specs)
    params.emplace(spec.name, initParameter(spec, seed));
  return params;
}

} // namespace gptc::train
