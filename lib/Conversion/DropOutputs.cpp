//===- DropOutputs.cpp - results the runtime never reads ------------------===//
//
// The training program's forward function is the validation loss: nothing
// reads its logits, yet as a bound Output they would be a persistent buffer
// (3.29 GB for GPT-2 at B=16, T=1024) and the launches that make them (the
// slices of the padded logits) would run every evaluation. dropOutputs
// removes such results before the lowering and erases what became dead.
//
//===----------------------------------------------------------------------===//

#include "gptc/Conversion/LowerToKernels.h"

#include "gptc/Dialect/GPT/GPTOps.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/BitVector.h"

using namespace mlir;

namespace gptc {

int dropOutputs(func::FuncOp func, ArrayRef<StringRef> names) {
  if (func.isExternal())
    return 0;
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  llvm::BitVector drop(func.getNumResults());
  for (unsigned i = 0; i < func.getNumResults(); ++i)
    if (auto name = func.getResultAttrOfType<StringAttr>(i, gpt::kOutputAttr))
      if (llvm::is_contained(names, name.getValue()))
        drop.set(i);
  if (drop.none())
    return 0;
  ret->eraseOperands(drop);
  func.eraseResults(drop);
  // Pure ops whose results nobody reads any more, last first so that their
  // producers become dead in turn.
  Block &body = func.getBody().front();
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
    if (&op != ret && isOpTriviallyDead(&op))
      op.erase();
  return int(drop.count());
}

} // namespace gptc
