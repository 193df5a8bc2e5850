// RUN: not gptc-opt %s -gpt-autodiff -gpt-optimizer="beta1=1.0" 2>&1 | FileCheck %s
// CHECK: error: gpt-optimizer: need 0 <= beta < 1, eps > 0, weight-decay >= 0 and clip >= 0
func.func @f(%x: tensor<2x4xf32> {gpt.param = "x"}, %t: tensor<2xi32> {gpt.input = "targets"}) -> (tensor<f32> {gpt.output = "loss"}) {
  %l = gpt.cross_entropy %x, %t : tensor<2x4xf32>, tensor<2xi32> -> tensor<f32>
  return %l : tensor<f32>
}
