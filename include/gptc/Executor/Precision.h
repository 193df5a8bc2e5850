//===- Precision.h - bf16 and fp16 values in float storage ------*- C++ -*-===//
//
// The CPU executor keeps every float tensor in float32 storage. A tensor
// whose IR type is bf16 or f16 holds only values that type can represent:
// each op's result is rounded when it is written (round to nearest, ties to
// even, as a GPU's conversion instructions do), and every kernel computes
// in float32 from those values. A matmul of bf16 operands is therefore a
// float32-accumulated product of bf16 inputs, rounded once to bf16: what
// cuBLAS does with bf16 A, B and D and a float32 compute type.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_EXECUTOR_PRECISION_H
#define GPTC_EXECUTOR_PRECISION_H

#include "gptc/Executor/HostTensor.h"

namespace gptc::exec {

enum class StorageKind { F32, BF16, F16 };

/// The nearest bfloat16 (8-bit significand), ties to even; NaN stays NaN,
/// values past bf16's range become ±inf.
float roundToBF16(float x);

/// The nearest IEEE half (11-bit significand, subnormals from 2^-24), ties
/// to even; |x| >= 65520 becomes ±inf, NaN stays NaN.
float roundToF16(float x);

/// The bf16 / IEEE half nearest `x` (as roundToBF16 / roundToF16) as its
/// 16-bit pattern: how bf16 and f16 buffers hold values outside the
/// executor (the runtime's arenas, the kernel check).
uint16_t bf16BitsOf(float x);
uint16_t halfBitsOf(float x);

/// Rounds every element of a float tensor to `kind` (F32: unchanged).
void roundTo(HostTensor &t, StorageKind kind);

/// `part` has `whole`'s shape but for a first dimension no longer than
/// whole's: the leading rows of a padded copy, which is what an update may
/// write of it.
bool isLeadingRows(const std::vector<int64_t> &part,
                   const std::vector<int64_t> &whole);

/// What a gpt.param_copy argument of this shape and element type holds:
/// `param` rounded to `storage`, zero-padded at the high end of each
/// dimension. Throws std::invalid_argument if `shape` is smaller than the
/// parameter's or of another rank.
HostTensor paramCopy(const HostTensor &param, const std::vector<int64_t> &shape,
                     StorageKind storage);

} // namespace gptc::exec

#endif // GPTC_EXECUTOR_PRECISION_H
