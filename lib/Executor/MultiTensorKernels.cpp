//===- MultiTensorKernels.cpp - gpt.multi_tensor_reduce on the CPU --------===//
//
// The body runs as a ScalarProgram over every tensor (float32 per element,
// as the elementwise kernels), and the terms are summed in double in a fixed
// order (sumScalarProgram), rounded to float32 once: deterministic, and
// closer to the exact sum than the per-tensor float32 partials it replaces.
//
//===----------------------------------------------------------------------===//

#include "gptc/Executor/FusedKernels.h"

using namespace mlir;

namespace gptc::exec {

HostTensor multiTensorReduce(gpt::MultiTensorReduceOp op,
                             const std::vector<const HostTensor *> &in) {
  ScalarProgram p = compileBody(op.getBody().front());
  size_t n = op.getNumTensors();
  size_t numTensors = op.getTensors().size(), perTensor = numTensors / n;
  std::vector<std::vector<const HostTensor *>> sources(n);
  std::vector<std::vector<int64_t>> shapes;
  for (size_t t = 0; t < n; ++t) {
    shapes.push_back(in[t]->shape);
    for (size_t j = 0; j < perTensor; ++j)
      sources[t].push_back(in[j * n + t]);
    for (size_t s = numTensors; s < in.size(); ++s)
      sources[t].push_back(in[s]);
  }
  return HostTensor::floats({}, float(sumScalarProgram(p, sources, shapes)));
}

} // namespace gptc::exec
