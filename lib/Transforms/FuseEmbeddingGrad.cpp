//===- FuseEmbeddingGrad.cpp - gpt-fuse-elementwise: tied table gradients -===//
//
// Tied embeddings (GPT-2's wte is also the lm_head) get two gradients, the
// lm_head GEMM's and the embedding's scatter-add, and gpt-autodiff sums
// them with a gpt.add of two [V, C] float32 tensors: a kernel that reads
// both and writes the sum, 3 · 4 · V · C bytes (0.46 GB for GPT-2). When
// the scatter-add's result feeds nothing else, the add becomes its addend
// (`gpt.embedding_grad %dy, %ids, %other`): the kernel that writes the
// table anyway reads the other gradient as it does, 4 · V · C bytes.
//
//===----------------------------------------------------------------------===//

#include "gptc/Transforms/Passes.h"

#include "gptc/Dialect/GPT/GPTOps.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace gptc::gpt;

void gptc::fuseEmbeddingGradAddends(func::FuncOp func) {
  SmallVector<std::pair<AddOp, EmbeddingGradOp>> sums;
  func.walk([&](AddOp add) {
    for (Value v : add->getOperands()) {
      auto grad = v.getDefiningOp<EmbeddingGradOp>();
      // Float32 throughout: the add then rounds exactly as the fused op.
      if (grad && !grad.getAddend() && grad->hasOneUse() &&
          add.getLhs().getType() == add.getRhs().getType() &&
          add.getType() == grad.getType() &&
          grad.getType().getElementType().isF32()) {
        sums.push_back({add, grad});
        return;
      }
    }
  });
  for (auto [add, grad] : sums) {
    Value other = add.getLhs() == grad.getResult() ? add.getRhs()
                                                   : add.getLhs();
    OpBuilder b(add);
    auto fused = b.create<EmbeddingGradOp>(
        b.getFusedLoc({grad.getLoc(), add.getLoc()}), grad.getType(),
        grad.getDy(), grad.getIds(), other);
    add.getResult().replaceAllUsesWith(fused.getResult());
    add.erase();
    grad.erase();
  }
}
