//===- TensorOf.h - a value's ranked tensor type, for the passes ----------===//
//
// Every gpt value is a ranked tensor (the dialect's ops say so); the passes
// ask for its type or element type often enough to share these.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_LIB_TRANSFORMS_TENSOROF_H
#define GPTC_LIB_TRANSFORMS_TENSOROF_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Value.h"

namespace gptc::gpt {

inline mlir::RankedTensorType tensorOf(mlir::Value v) {
  return mlir::cast<mlir::RankedTensorType>(v.getType());
}

inline mlir::Type elementOf(mlir::Value v) {
  return tensorOf(v).getElementType();
}

} // namespace gptc::gpt

#endif // GPTC_LIB_TRANSFORMS_TENSOROF_H
