//===- LowerToKernels.h - the fused step as a kernel Program -*- C++ -*-===//
//
// Lowers the functions of the fused training step (gptc/Pipeline/Pipeline.h,
// stage "fused") to a gptc::rt::Program: one Launch per op, every value a
// Buffer (gptc/Runtime/Program.h states the conventions). Beyond those:
//
// - Functions are "forward", "grads" and "update", in that order; any of
//   them may be absent (gptc-opt's --gpt-print-kernels lowers what a test
//   module holds).
// - Arguments and results are bound buffers, shared by (role, binding)
//   across the functions: gpt.param -> Param, gpt.grad -> Grad, gpt.adam_m,
//   gpt.adam_v, gpt.input, gpt.hyper, gpt.output -> Output.
// - A result computed by a launch of its function is written straight into
//   its bound buffer (the launch's output is that buffer). A result that is
//   an argument, a view (gpt.reshape, a prefix gpt.slice), a constant, or a
//   value already bound to another result is copied into its bound buffer by an
//   identity fused_elementwise launch at the end of the function (float dtypes
//   only; the fused step never needs one).
// - In place: a result bound to the buffer of one of the function's
//   arguments (update's params and moments) is written over it. The
//   lowering checks that this is safe: the launch is fused_elementwise or
//   multi_tensor_elementwise, it reads that buffer only at the element it
//   writes (same shape, same tensor of a multi-tensor launch), and no later
//   launch reads the old value. Anything else is an error.
// - The function with a gpt.output = "grad_norm" result runs first the
//   launches that value depends on (normLaunches), then the rest; none of
//   the first may write in place.
// - Attributes: the op's own (IntegerAttr, BoolAttr, UnitAttr -> ints,
//   FloatAttr -> floats, integer arrays -> lists); defaulted ones are always
//   present (layernorm/layernorm_grad "epsilon", pad "value").
//   operandSegmentSizes is structure, not an attribute, and is dropped.
// - Every op outside the fused stage's kernel set, and every value that is
//   not a static tensor of f32, bf16, f16 or i32, is an error at its
//   location.
// - When there is a grads function, "grads_accumulate" follows it for
//   gradient accumulation on the device: grads' launches with each float32
//   gradient computed into a temp of its own (and every view of it read
//   through the same view of the temp), then one multi_tensor_elementwise
//   launch that adds the temps to the Grad buffers in place (grad = grad +
//   temp, in result order). The temps are planned by liveness like grads'
//   own, so accumulation needs no persistent buffers. A gradient that one
//   GEMM (matmul, matmul_bias_grad) or embedding_grad writes whole and
//   nothing reads gets no temp: with accumulateInPlace (the default) that
//   launch adds its result to the sum in place, `accumulate` = 1, the sum
//   as one more input after its operands (a GEMM's: cuBLASLt's beta = 1),
//   and the add skips it. A program whose gradients are not all float32
//   has no grads_accumulate.
// - Then, in grads alone, a tied table's gradient is written in place: an
//   embedding_grad whose addend is (the leading rows of) a matmul's
//   float32 temp that nothing else touches gets that matmul writing its
//   product straight into the Grad buffer, and becomes a scatter-add into
//   it (`accumulate` = 1, the gradient its last operand, no addend); the
//   temp and its views are erased. Where the product has more rows (a
//   padded vocabulary), the Grad buffer takes the product's shape and
//   every other launch and function reads and writes the table through a
//   view of its leading rows. Same bits; grads_accumulate keeps the addend
//   form.
// - Last, an embedding_grad whose ids fit sort_ids' keys reads them sorted
//   (sortEmbeddingIds): a sort_ids launch where the ids were last written
//   (the function's top for input ids) writes a temp of keys, which the
//   embedding_grad reads in the ids' place, with `position_bits`.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_CONVERSION_LOWERTOKERNELS_H
#define GPTC_CONVERSION_LOWERTOKERNELS_H

#include "gptc/Dialect/GPT/GPTOps.h"
#include "gptc/Pipeline/Pipeline.h"
#include "gptc/Runtime/Program.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace gptc {

/// The step's functions, found by their attributes (any may be null):
/// update has gpt.adam_m arguments, grads has gpt.grad results, forward is
/// the remaining function with a gpt.output result.
struct StepFunctions {
  mlir::func::FuncOp forward, grads, update;
};
StepFunctions findStepFunctions(mlir::ModuleOp module);

/// The launches and buffers of the given functions (meta: only "precision",
/// from the module's gpt.precision; no params); not planned.
mlir::FailureOr<rt::Program>
lowerFunctionsToKernels(const StepFunctions &fns, bool accumulateInPlace = true);

/// The whole step, with meta (model, precision, batch, seq, pad_multiple,
/// n_layer, n_head, n_embd, block_size, vocab_size, beta1, beta2, eps,
/// weight_decay, clip) and params (parameterSpecs of forward); not planned.
mlir::FailureOr<rt::Program>
lowerToKernels(const TrainingProgram &program, const models::GPT2Config &cfg,
               int64_t batch, int64_t seq, const OptimizerOptions &opts,
               int64_t padMultiple);

/// Gives each embedding_grad launch whose ids fit exec::idsSortable a
/// sort_ids launch and reads its keys in the ids' place (`position_bits`);
/// returns how many it changed (SortEmbeddingIds.cpp).
int sortEmbeddingIds(rt::Program &p);

/// A gpt.slice whose result is the first bytes of its operand: the same
/// element type, the dimensions after the first one it shortens kept
/// whole and the ones before it of size 1. GPT-2's is the lm_head's padded
/// weight gradient cut to the vocabulary, [50304, C] -> [50257, C]. The
/// lowering makes its result a view, not a launch, unless the result is
/// also a function result (then the launch writes it into its buffer).
bool isPrefixSlice(gpt::SliceOp slice);

/// Removes the results of `func` bound as gpt.output to one of `names`,
/// then every op whose results nobody reads any more; returns how many
/// results went (DropOutputs.cpp).
int dropOutputs(mlir::func::FuncOp func, llvm::ArrayRef<llvm::StringRef> names);

/// compileTrainingProgram, lowerToKernels and planMemory: what `gptc emit
/// --stage=kernels` prints and `gptc compile` builds on. The runtime reads
/// forward's loss only (validation), so forward's "logits" are dropped
/// (dropOutputs) unless `keepLogits`: no persistent [B, T, V] buffer and no
/// launches that only made them.
mlir::FailureOr<rt::Program>
compileKernelProgram(mlir::MLIRContext &ctx, const models::GPT2Config &cfg,
                     int64_t batch, int64_t seq, const OptimizerOptions &opts,
                     int64_t padMultiple = kDefaultPadMultiple,
                     bool keepLogits = false);

/// gptc-opt's --gpt-print-kernels: lowers the module's step functions,
/// plans the memory and prints the Program's text to llvm::outs().
void registerPrintKernelsPass();

} // namespace gptc

#endif // GPTC_CONVERSION_LOWERTOKERNELS_H
