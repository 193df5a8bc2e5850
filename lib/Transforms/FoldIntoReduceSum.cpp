//===- FoldIntoReduceSum.cpp - a reduction reads its operand where it lies ===//
//
// Part of gpt-fuse-elementwise, after the casts are folded into the layout
// ops and before the chains are fused. A gpt.reduce_sum of a leading-corner
// gpt.slice, or of a widening gpt.cast, reads the slice's or the cast's
// operand instead:
//
//   %r = gpt.reshape %dqkv : tensor<2x64x384xbf16> -> tensor<128x3x128xbf16>
//   %q = gpt.slice %r : tensor<128x3x128xbf16> -> tensor<128x1x128xf32>
//   %s = gpt.reduce_sum %q : tensor<128x1x128xf32> -> tensor<128xf32>
//
// becomes
//
//   %s = gpt.reduce_sum %r {corner = array<i64: 128, 1, 128>}
//       : tensor<128x3x128xbf16> -> tensor<128xf32>
//
// so the slice (a strided copy, not a view: LowerToKernels.cpp) and the
// widened copy are never written. The sums are the same: the terms are
// the same values (a widening conversion is exact), added in the same
// order. A slice that narrows (f32 to bf16) rounds its terms and stays.
//
//===----------------------------------------------------------------------===//

#include "gptc/Transforms/Passes.h"

#include "gptc/Dialect/GPT/GPTOps.h"

#include "TensorOf.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace gptc::gpt;

namespace {

/// One fold of `rs`'s operand; the new reduction, or null if none applies.
ReduceSumOp foldOnce(ReduceSumOp rs, bool casts) {
  Value x = rs.getX();
  Type sum = elementOf(rs.getResult());
  std::optional<ArrayRef<int64_t>> corner = rs.getCorner();
  Value source;
  SmallVector<int64_t> newCorner;
  if (auto slice = x.getDefiningOp<SliceOp>()) {
    source = slice.getX();
    if (!gptc::isExactConversion(elementOf(source), elementOf(x)))
      return {};
    // A corner of a corner is the smaller one: the reduction's own.
    ArrayRef<int64_t> shape = corner ? *corner : tensorOf(x).getShape();
    newCorner.assign(shape.begin(), shape.end());
  } else if (auto widen = x.getDefiningOp<CastOp>(); widen && casts) {
    source = widen.getX();
    if (!gptc::isExactConversion(elementOf(source), elementOf(x)))
      return {};
    if (corner)
      newCorner.assign(corner->begin(), corner->end());
  } else {
    return {};
  }
  if (!gptc::isExactConversion(elementOf(source), sum))
    return {};
  OpBuilder b(rs);
  // A corner that is the whole operand is no corner.
  DenseI64ArrayAttr cornerAttr;
  if (!newCorner.empty() &&
      ArrayRef<int64_t>(newCorner) != tensorOf(source).getShape())
    cornerAttr = b.getDenseI64ArrayAttr(newCorner);
  auto folded = b.create<ReduceSumOp>(
      b.getFusedLoc({x.getDefiningOp()->getLoc(), rs.getLoc()}),
      rs.getResult().getType(), source, cornerAttr);
  rs.getResult().replaceAllUsesWith(folded.getResult());
  Operation *def = x.getDefiningOp();
  rs->erase();
  if (def->use_empty())
    def->erase();
  return folded;
}

} // namespace

void gptc::foldIntoReduceSums(func::FuncOp func, bool casts) {
  SmallVector<ReduceSumOp> sums;
  func.walk([&](ReduceSumOp rs) { sums.push_back(rs); });
  for (ReduceSumOp rs : sums)
    while (ReduceSumOp folded = foldOnce(rs, casts))
      rs = folded;
}
