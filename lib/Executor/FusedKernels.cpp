//===- FusedKernels.cpp - fused elementwise bodies as register programs ---===//
//
// The body of a fused op becomes a ScalarProgram (ScalarProgram.h), which
// runs as float32 per element, as the unfused kernels do
// (ElementwiseKernels.cpp), so a fused chain gives the same bits as the ops
// it replaced.
//
//===----------------------------------------------------------------------===//

#include "gptc/Executor/FusedKernels.h"
#include "gptc/Executor/ScalarProgram.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <cmath>
#include <cstring>

using namespace mlir;

namespace gptc::exec {

ScalarProgram compileBody(Block &body) {
  ScalarProgram p;
  DenseMap<Value, int> reg;
  for (BlockArgument arg : body.getArguments())
    reg[arg] = p.numRegisters++;
  p.numArgs = p.numRegisters;
  for (Operation &op : body.without_terminator()) {
    // Registers are float32 and loads widen, so widening is no instruction
    // (a body that reads bf16 gradients to yield them as f32).
    if (auto ext = dyn_cast<arith::ExtFOp>(op)) {
      reg[ext.getResult()] = reg.lookup(ext.getIn());
      continue;
    }
    Instruction in{Opcode::Const, p.numRegisters};
    auto binary = [&](Opcode code) {
      in.op = code;
      in.a = reg.lookup(op.getOperand(0));
      in.b = reg.lookup(op.getOperand(1));
      return true;
    };
    auto unary = [&](Opcode code) {
      in.op = code;
      in.a = reg.lookup(op.getOperand(0));
      return true;
    };
    bool known =
        llvm::TypeSwitch<Operation *, bool>(&op)
            .Case([&](arith::AddFOp) { return binary(Opcode::Add); })
            .Case([&](arith::SubFOp) { return binary(Opcode::Sub); })
            .Case([&](arith::MulFOp) { return binary(Opcode::Mul); })
            .Case([&](arith::DivFOp) { return binary(Opcode::Div); })
            .Case<arith::MaximumFOp, arith::MaxNumFOp>(
                [&](Operation *) { return binary(Opcode::Max); })
            .Case<arith::MinimumFOp, arith::MinNumFOp>(
                [&](Operation *) { return binary(Opcode::Min); })
            .Case([&](arith::NegFOp) { return unary(Opcode::Neg); })
            .Case([&](math::ExpOp) { return unary(Opcode::Exp); })
            .Case([&](math::LogOp) { return unary(Opcode::Log); })
            .Case([&](math::TanhOp) { return unary(Opcode::Tanh); })
            .Case([&](math::SqrtOp) { return unary(Opcode::Sqrt); })
            .Case([&](math::RsqrtOp) { return unary(Opcode::Rsqrt); })
            .Case([&](math::ErfOp) { return unary(Opcode::Erf); })
            .Case([&](arith::ConstantOp c) {
              auto f = dyn_cast<FloatAttr>(c.getValue());
              in.value = f ? float(f.getValueAsDouble()) : 0.0f;
              return bool(f);
            })
            .Default([](Operation *) { return false; });
    if (!known)
      throw KernelError("the CPU executor cannot run '" +
                        op.getName().getStringRef().str() +
                        "' in a fused body");
    reg[op.getResult(0)] = p.numRegisters++;
    p.code.push_back(in);
  }
  for (Value v : body.getTerminator()->getOperands())
    p.results.push_back(reg.lookup(v));
  return p;
}

namespace {

std::vector<int64_t> shapeOf(Value v) {
  auto shape = cast<RankedTensorType>(v.getType()).getShape();
  return {shape.begin(), shape.end()};
}

} // namespace

std::vector<HostTensor>
fusedElementwise(gpt::FusedElementwiseOp op,
                 const std::vector<const HostTensor *> &in) {
  ScalarProgram p = compileBody(op.getBody().front());
  std::vector<int64_t> shape = shapeOf(op.getResult(0));
  std::vector<HostTensor> results;
  std::vector<float *> outs;
  for (size_t r = 0; r < op.getNumResults(); ++r)
    results.push_back(HostTensor::floats(shape));
  for (HostTensor &r : results)
    outs.push_back(r.data());
  runScalarProgram(p, {in}, {outs}, {shape});
  return results;
}

std::vector<HostTensor>
multiTensorElementwise(gpt::MultiTensorElementwiseOp op,
                       const std::vector<const HostTensor *> &in) {
  ScalarProgram p = compileBody(op.getBody().front());
  size_t n = op.getNumTensors();
  size_t perTensor = op.getTensors().size() / n;
  size_t perResult = op.getNumResults() / n;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<const HostTensor *>> sources(n);
  std::vector<HostTensor> results(op.getNumResults());
  std::vector<std::vector<float *>> outs(n);
  // Per-tensor constants are rank-0 arguments of their tensor.
  std::vector<HostTensor> constants;
  if (std::optional<ArrayRef<float>> values = op.getPerTensor())
    for (float v : *values)
      constants.push_back(HostTensor::floats({}, v));
  size_t perConstant = constants.size() / n;
  for (size_t t = 0; t < n; ++t) {
    shapes.push_back(shapeOf(op.getResult(t)));
    for (size_t j = 0; j < perTensor; ++j)
      sources[t].push_back(in[j * n + t]);
    for (size_t k = 0; k < perConstant; ++k)
      sources[t].push_back(&constants[k * n + t]);
    for (size_t s = op.getTensors().size(); s < in.size(); ++s)
      sources[t].push_back(in[s]);
    for (size_t r = 0; r < perResult; ++r) {
      results[r * n + t] = HostTensor::floats(shapes[t]);
      outs[t].push_back(results[r * n + t].data());
    }
  }
  runScalarProgram(p, sources, outs, shapes);
  return results;
}

} // namespace gptc::exec
