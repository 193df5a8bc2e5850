//===- GPTInterfaces.td - gpt dialect op interfaces --------*- tablegen -*-===//

#ifndef GPTC_DIALECT_GPT_GPTINTERFACES_TD
#define GPTC_DIALECT_GPT_GPTINTERFACES_TD

include "mlir/IR/OpBase.td"

def GPT_DifferentiableOpInterface : OpInterface<"DifferentiableOpInterface"> {
  let cppNamespace = "::gptc::gpt";
  let description = [{
    An op that knows its vector-Jacobian product. gpt-autodiff walks the
    forward graph backwards and asks each op for the gradients of its
    operands given the gradients of its results, so a new op brings its own
    rule and the pass never changes.
  }];
  let methods = [
    InterfaceMethod<[{
        Builds, at the builder's insertion point, the gradients of the
        operands from `resultGrads` (one per result; a null value for a
        result that does not reach the loss). Fills `operandGrads` with one
        value per operand, null where an operand has no gradient (integer
        ids, say).
      }],
      "::mlir::LogicalResult", "buildVJP",
      (ins "::mlir::OpBuilder &":$builder,
           "::mlir::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>
  ];
}

#endif // GPTC_DIALECT_GPT_GPTINTERFACES_TD
