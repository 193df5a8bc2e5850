//===- ScalarProgram.h - a fused body as straight-line scalar code -*- C++ -*-===//
//
// The body of gpt.fused_elementwise / gpt.multi_tensor_elementwise, compiled
// out of MLIR: registers 0..numArgs-1 are the body's arguments, every
// instruction writes one new register, and `results` name the yielded ones.
// No MLIR here: the CPU executor runs it, the CUDA emitter prints it as one
// kernel, and the training program carries it in its kernel schedule.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_EXECUTOR_SCALARPROGRAM_H
#define GPTC_EXECUTOR_SCALARPROGRAM_H

#include "gptc/Executor/HostTensor.h"

#include <string>
#include <vector>

namespace gptc::exec {

enum class Opcode {
  Add, Sub, Mul, Div, Max, Min, Neg, Exp, Log, Tanh, Sqrt, Rsqrt, Erf, Const
};

/// "add", "exp", ...: the spelling of the schedule's text form.
const char *opcodeName(Opcode op);

struct Instruction {
  Opcode op;
  int dst, a = 0, b = 0;
  float value = 0.0f; // Const
};

struct ScalarProgram {
  int numArgs = 0, numRegisters = 0;
  std::vector<Instruction> code;
  std::vector<int> results; // the register of each yielded value
};

/// Runs `p` elementwise over tensors: per tensor t, `args[t]` feed the body's
/// arguments (each of shapes[t] or broadcasting to it, numpy-style from the
/// right) and `outs[t]` receive its results, all of shapes[t]. float32
/// arithmetic per element, OpenMP over chunks; the result does not depend on
/// the thread count.
void runScalarProgram(const ScalarProgram &p,
                      const std::vector<std::vector<const HostTensor *>> &args,
                      const std::vector<std::vector<float *>> &outs,
                      const std::vector<std::vector<int64_t>> &shapes);

/// The sum over every element of every tensor of `p`'s one result, the
/// arguments as in runScalarProgram (gpt.multi_tensor_reduce). Each term is
/// float32; the sum is double: per chunk of 2048 elements in order, then
/// the chunks in tensor and element order. Independent of the thread count.
double
sumScalarProgram(const ScalarProgram &p,
                 const std::vector<std::vector<const HostTensor *>> &args,
                 const std::vector<std::vector<int64_t>> &shapes);

} // namespace gptc::exec

#endif // GPTC_EXECUTOR_SCALARPROGRAM_H
