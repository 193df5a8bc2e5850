//===- GPTOps.h - gpt dialect operations ----------------------------------===//
#ifndef GPTC_DIALECT_GPT_GPTOPS_H
#define GPTC_DIALECT_GPT_GPTOPS_H

#include "gptc/Dialect/GPT/GPTDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"

#include <limits>

#include "gptc/Dialect/GPT/GPTInterfaces.h.inc"

#define GET_OP_CLASSES
#include "gptc/Dialect/GPT/GPTOps.h.inc"

namespace gptc::gpt {
/// "4x64x128" (or "scalar"), as verifiers and remarks print shapes.
std::string shapeStr(llvm::ArrayRef<int64_t> shape);

/// The numpy broadcast of two shapes, or failure if they are incompatible.
mlir::FailureOr<llvm::SmallVector<int64_t>>
broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);
} // namespace gptc::gpt

#endif
