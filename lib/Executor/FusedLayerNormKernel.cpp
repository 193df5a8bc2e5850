//===- FusedLayerNormKernel.cpp - gpt.fused_layernorm on the CPU ----------===//
//
// The prologue runs as the ScalarProgram of a gpt.fused_elementwise would
// (float32 per element), then the first value is normalised by the very
// layernorm kernel gpt.layernorm runs: the fused op computes the unfused
// pair's bits. A GPU kernel does both in one row pass (layernorm.cuh); here
// the reference keeps the two steps so that nothing about them can differ.
// The same for layernorm_grad and the epilogue that consumes its dx.
//
//===----------------------------------------------------------------------===//

#include "gptc/Executor/FusedLayerNorm.h"

#include "gptc/Executor/Kernels.h"

namespace gptc::exec {

std::vector<HostTensor> fusedLayernorm(const ScalarProgram &body,
                                       const std::vector<const HostTensor *> &inputs,
                                       const HostTensor &gamma,
                                       const HostTensor &beta,
                                       const std::vector<int64_t> &shape,
                                       float epsilon) {
  if (body.results.empty() || int(inputs.size()) != body.numArgs)
    throw KernelError("fused_layernorm: a body of " +
                      std::to_string(body.numArgs) + " arguments and " +
                      std::to_string(body.results.size()) +
                      " results does not fit " +
                      std::to_string(inputs.size()) + " inputs");
  std::vector<HostTensor> values;
  std::vector<float *> outs;
  for (size_t r = 0; r < body.results.size(); ++r)
    values.push_back(HostTensor::floats(shape));
  for (HostTensor &v : values)
    outs.push_back(v.data());
  runScalarProgram(body, {inputs}, {outs}, {shape});
  std::vector<HostTensor> results;
  results.push_back(layernorm(values[0], gamma, beta, epsilon));
  for (size_t r = 1; r < values.size(); ++r)
    results.push_back(std::move(values[r]));
  return results;
}

std::vector<HostTensor>
fusedLayernormGrad(const ScalarProgram &body, const HostTensor &x,
                   const HostTensor &gamma, const HostTensor &dy,
                   const std::vector<const HostTensor *> &inputs,
                   const std::vector<std::vector<int64_t>> &valueShapes,
                   float epsilon) {
  if (body.results.empty() || int(inputs.size()) + 1 != body.numArgs)
    throw KernelError("fused_layernorm_grad: a body of " +
                      std::to_string(body.numArgs) +
                      " arguments does not fit dx and " +
                      std::to_string(inputs.size()) + " inputs");
  if (valueShapes.size() != body.results.size())
    throw KernelError("fused_layernorm_grad: " +
                      std::to_string(valueShapes.size()) +
                      " value shapes for a body of " +
                      std::to_string(body.results.size()) + " results");
  const std::vector<int64_t> columns{x.shape.empty() ? 1 : x.shape.back()};
  for (const std::vector<int64_t> &shape : valueShapes)
    if (shape != x.shape && shape != columns)
      throw KernelError("fused_layernorm_grad: a value of shape " +
                        shapeString(shape) + " is neither x's " +
                        shapeString(x.shape) + " nor its column sums'");
  std::vector<HostTensor> grads = layernormGrad(x, gamma, dy, epsilon);
  std::vector<const HostTensor *> args{&grads[0]};
  args.insert(args.end(), inputs.begin(), inputs.end());
  std::vector<HostTensor> results;
  results.push_back(std::move(grads[1]));
  results.push_back(std::move(grads[2]));
  std::vector<float *> outs;
  for (size_t r = 0; r < body.results.size(); ++r)
    results.push_back(HostTensor::floats(x.shape));
  for (size_t r = 2; r < results.size(); ++r)
    outs.push_back(results[r].data());
  runScalarProgram(body, {args}, {outs}, {x.shape});
  for (size_t r = 0; r < valueShapes.size(); ++r)
    if (valueShapes[r] != x.shape)
      results[2 + r] = reduceSum(results[2 + r], columns);
  return results;
}

} // namespace gptc::exec
