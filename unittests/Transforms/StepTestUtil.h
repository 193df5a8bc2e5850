//===- StepTestUtil.h - shared scaffolding of the step tests ----*- C++ -*-===//
//
// What the whole-step tests of the fusion and padding passes share: gpt2-tiny
// compiled through two pipelines, random arguments bound to a function, both
// functions run on the CPU executor, and the metrics their results are
// compared with. Each test keeps its own seeds, values and tolerances.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_UNITTESTS_TRANSFORMS_STEPTESTUTIL_H
#define GPTC_UNITTESTS_TRANSFORMS_STEPTESTUTIL_H

#include "gptc/Executor/HostTensor.h"
#include "gptc/Pipeline/Pipeline.h"
#include "gptc/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/STLFunctionalExtras.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace gptc::test {

/// gpt2-tiny for `batch` x `seq` tokens, with `nLayer` blocks (0 keeps the
/// preset's).
mlir::OwningOpRef<mlir::ModuleOp> buildTiny(mlir::MLIRContext &ctx,
                                            int64_t batch, int64_t seq,
                                            int64_t nLayer = 0);

/// gpt2-tiny with two blocks, batch 2 and sequence 16, through the optimizer
/// stage with `options` (and gpt-fuse-attention's pack-qkv =
/// `packAttention`), then the passes `addPasses` adds; null on failure.
mlir::OwningOpRef<mlir::ModuleOp>
compileTinyStep(mlir::MLIRContext &ctx, const OptimizerOptions &options,
                llvm::function_ref<void(mlir::PassManager &)> addPasses,
                bool packAttention = true);

/// compileTinyStep under `precision`, then gpt-fuse-matmul-epilogue and
/// gpt-fuse-elementwise with the options `configure` sets: the step a
/// fusion test compiles with one of gpt-fuse-elementwise's switches on and
/// off.
mlir::OwningOpRef<mlir::ModuleOp> compileFusedTinyStep(
    mlir::MLIRContext &ctx, const std::string &precision,
    llvm::function_ref<void(GPTFuseElementwiseOptions &)> configure,
    bool packAttention = true);

/// How many `opName` ops the body of `func` holds, not counting nested ones.
int64_t countTopLevel(mlir::func::FuncOp func, llvm::StringRef opName);

/// How many `opName` ops `func` holds, nested ones included.
int64_t countNested(mlir::func::FuncOp func, llvm::StringRef opName);

/// max|got - want| / max|want|. Where `want` is all zero, the absolute
/// difference if `absoluteIfZero`, else the quotient as it falls (NaN or
/// infinity).
double infNormRelativeError(const exec::HostTensor &got,
                            const exec::HostTensor &want,
                            bool absoluteIfZero = true);

/// Fills the float argument `arg` of a function from `gen`.
using FloatFiller = llvm::function_ref<void(
    unsigned arg, std::vector<float> &values, std::mt19937 &gen)>;

/// Weights uniform in [-0.3, 0.3].
void uniformWeights(unsigned arg, std::vector<float> &values,
                    std::mt19937 &gen);

/// A value for every argument of `func`, in order, from one generator seeded
/// with `seed`: int32 ones are token ids uniform in [0, 50256], float ones
/// what `fill` writes.
std::vector<exec::HostTensor>
randomArguments(mlir::func::FuncOp func, unsigned seed,
                FloatFiller fill = uniformWeights);

/// The results of two functions run on the same arguments.
struct BothResults {
  mlir::FailureOr<std::vector<exec::HostTensor>> want, got;
};
BothResults runBoth(mlir::func::FuncOp unfused, mlir::func::FuncOp fused,
                    const std::vector<exec::HostTensor> &args);

/// Runs both on `args` and expects every result to agree bit for bit (a
/// failure names the function and the result).
void expectSameBits(mlir::func::FuncOp unfused, mlir::func::FuncOp fused,
                    const std::vector<exec::HostTensor> &args);

/// Op-count checks of one step function before and after a change.
using StepCheck = llvm::function_ref<void(
    mlir::func::FuncOp before, mlir::func::FuncOp after, bool grad)>;

/// For gpt2_forward and gpt2_forward_grad of both modules: `check` (grad
/// says which), then expectSameBits on arguments drawn from `fill` with
/// `seed`.
void expectSameStepBits(mlir::ModuleOp before, mlir::ModuleOp after,
                        unsigned seed, StepCheck check,
                        FloatFiller fill = uniformWeights);

} // namespace gptc::test

#endif // GPTC_UNITTESTS_TRANSFORMS_STEPTESTUTIL_H
