//===- FuseLoss.cpp - gpt-fuse-elementwise: the loss and its gradient -----===//
//
// The dedicated pattern of gpt-fuse-elementwise for softmax + cross-entropy
// + its gradient: a gpt.cross_entropy and a gpt.cross_entropy_grad of the
// same logits and targets (the gradient function's loss and its seed)
// become one gpt.cross_entropy_with_grad, which reads the [B, T, V] logits
// once instead of twice.
//
//===----------------------------------------------------------------------===//

#include "gptc/Transforms/Passes.h"

#include "gptc/Dialect/GPT/GPTOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace gptc::gpt;

void gptc::fuseCrossEntropyWithGrad(func::FuncOp func) {
  SmallVector<std::pair<CrossEntropyOp, CrossEntropyGradOp>> pairs;
  func.walk([&](CrossEntropyGradOp grad) {
    for (Operation *user : grad.getLogits().getUsers()) {
      auto loss = dyn_cast<CrossEntropyOp>(user);
      if (!loss || loss->getBlock() != grad->getBlock() ||
          loss.getTargets() != grad.getTargets() ||
          loss.getNumClassesAttr() != grad.getNumClassesAttr() ||
          loss.getIgnoreIndexAttr() != grad.getIgnoreIndexAttr())
        continue;
      // The fused op sits at the later of the two; the earlier one's
      // result must not be needed before it.
      Operation *first = loss->isBeforeInBlock(grad) ? loss.getOperation()
                                                     : grad.getOperation();
      Operation *last = first == loss.getOperation() ? grad.getOperation()
                                                     : loss.getOperation();
      if (llvm::any_of(first->getUsers(), [&](Operation *u) {
            return !last->isBeforeInBlock(u);
          }))
        continue;
      pairs.push_back({loss, grad});
      return;
    }
  });
  for (auto [loss, grad] : pairs) {
    Operation *last = loss->isBeforeInBlock(grad) ? grad.getOperation()
                                                  : loss.getOperation();
    OpBuilder b(last);
    auto fused = b.create<CrossEntropyWithGradOp>(
        b.getFusedLoc({loss.getLoc(), grad.getLoc()}),
        loss.getLoss().getType(), grad.getDlogits().getType(),
        grad.getLogits(), grad.getTargets(), grad.getDloss(),
        grad.getNumClassesAttr(), grad.getIgnoreIndexAttr());
    loss.getLoss().replaceAllUsesWith(fused.getLoss());
    grad.getDlogits().replaceAllUsesWith(fused.getDlogits());
    loss.erase();
    grad.erase();
  }
}
