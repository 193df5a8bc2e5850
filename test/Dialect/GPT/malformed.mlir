// Malformed input: one error line with the location, a non-zero exit.
// RUN: not gptc-opt %s 2>&1 | FileCheck %s
// CHECK: malformed.mlir:6:{{[0-9]+}}: error: expected ','
// CHECK-NOT: error
func.func @f(%a: tensor<8xf32>) -> tensor<8xf32> {
  %x = gpt.add %a %a : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  return %x : tensor<8xf32>
}
