//===- gptc-opt.cpp - mlir-opt for the gpt dialect and gptc's passes -------===//

#include "gptc/Conversion/LowerToKernels.h"
#include "gptc/Dialect/GPT/GPTDialect.h"
#include "gptc/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<gptc::gpt::GPTDialect, mlir::func::FuncDialect>();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  gptc::registerGPTCPasses();
  gptc::registerPrintKernelsPass();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "gptc optimizer driver\n", registry));
}
