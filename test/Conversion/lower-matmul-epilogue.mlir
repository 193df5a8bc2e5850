// RUN: gptc-opt %s --gpt-print-kernels -o /dev/null | FileCheck %s

// gpt.matmul_epilogue is one launch (cuBLASLt on the GPU) with its inputs
// a, b, bias and its outputs result, pre-activation in order; its unit
// attributes (gelu, transpose_b) reach the launch as 1s by the generic
// attribute copy, which is all the backends read.
// (grad_norm's launches run first: the order is the lowering's, not ours.)
// CHECK-LABEL: func forward: 4 launches
// CHECK-DAG: %[[Y:[0-9]+]] = matmul_epilogue(%0, %3, %2) {transpose_b=1} : f32[2x4x16] @
// CHECK-DAG: %4, %[[PRE:[0-9]+]] = matmul_epilogue(%0, %1, %2) {gelu=1} : f32[2x4x16], f32[2x4x16] @
// CHECK-DAG: %5 = reduce_sum(%[[PRE]])
// CHECK-DAG: %6 = reduce_sum(%[[Y]])
func.func @fwd(%x: tensor<2x4x8xbf16> {gpt.param = "x"}, %w: tensor<8x16xbf16> {gpt.param = "w"},
               %b: tensor<16xf32> {gpt.param = "b"}, %wt: tensor<16x8xbf16> {gpt.param = "wt"})
    -> (tensor<2x4x16xf32> {gpt.output = "logits"}, tensor<f32> {gpt.output = "loss"},
        tensor<f32> {gpt.output = "grad_norm"}) {
  %h, %pre = gpt.matmul_epilogue %x, %w, %b {gelu} : tensor<2x4x8xbf16>, tensor<8x16xbf16>, tensor<16xf32> -> tensor<2x4x16xf32>, tensor<2x4x16xf32>
  %y = gpt.matmul_epilogue %x, %wt, %b {transpose_b} : tensor<2x4x8xbf16>, tensor<16x8xbf16>, tensor<16xf32> -> tensor<2x4x16xf32>
  %s = gpt.reduce_sum %pre : tensor<2x4x16xf32> -> tensor<f32>
  %t = gpt.reduce_sum %y : tensor<2x4x16xf32> -> tensor<f32>
  return %h, %s, %t : tensor<2x4x16xf32>, tensor<f32>, tensor<f32>
}
