//===- PrintKernelsPass.cpp - gptc-opt --gpt-print-kernels ----------------===//
//
// A test pass: lowers the module's step functions (found by their
// attributes, LowerToKernels.h) to a kernel-level Program, plans its memory
// and prints its text to stdout. The module is left as it was. Lowering
// failures are errors at the op that caused them, so lit tests check them
// with -verify-diagnostics.
//
//===----------------------------------------------------------------------===//

#include "gptc/Conversion/LowerToKernels.h"

#include "gptc/Dialect/GPT/GPTDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Pass/Pass.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace gptc {

namespace {

struct PrintKernelsPass
    : public PassWrapper<PrintKernelsPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(PrintKernelsPass)

  StringRef getArgument() const final { return "gpt-print-kernels"; }
  StringRef getDescription() const final {
    return "Lowers the step functions to a kernel-level Program, plans its "
           "memory and prints it (the text of gptc emit --stage=kernels)";
  }
  void getDependentDialects(DialectRegistry &registry) const override {
    registry.insert<gpt::GPTDialect, arith::ArithDialect, math::MathDialect>();
  }

  void runOnOperation() override {
    StepFunctions fns = findStepFunctions(getOperation());
    if (!fns.forward && !fns.grads && !fns.update) {
      getOperation().emitError(
          "no step function to lower (a function with gpt.output or "
          "gpt.grad results, or gpt.adam_m arguments)");
      return signalPassFailure();
    }
    FailureOr<rt::Program> program = lowerFunctionsToKernels(fns);
    if (failed(program))
      return signalPassFailure();
    rt::planMemory(*program);
    llvm::outs() << rt::printProgram(*program);
    markAllAnalysesPreserved();
  }
};

} // namespace

void registerPrintKernelsPass() { PassRegistration<PrintKernelsPass>(); }

} // namespace gptc
