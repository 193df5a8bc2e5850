// RUN: gptc-opt %s -split-input-file -gpt-fuse-matmul-epilogue=gelu-bias-grads=true | FileCheck %s

// gelu-bias-grads (gptc --bias-grads=gelu): c_fc's bias gradient, the sum
// of GELU's derivative, goes to the GEMM that writes the derivative (its
// second result, in the derivative's bf16, widened after), not to the
// weight-gradient GEMM that reads the derivative's bf16 copy, which stays
// a plain GEMM (widened to float32). Without the option the same function
// is @gelu_grad_bias_to_weight_grad in gpt-fuse-matmul-epilogue.mlir.
// CHECK-LABEL: func.func @gelu_grad_bias_to_gelu_grad
// CHECK-SAME: (%[[DY:[^:]+]]: tensor<2x8x16xbf16>, %[[W:[^:]+]]: tensor<32x16xbf16>, %[[PRE:[^:]+]]: tensor<2x8x32xbf16>, %[[X:[^:]+]]: tensor<16x8xbf16>)
// CHECK-NEXT: %[[DP:[^ ,]+]], %[[DBL:[^ ]+]] = gpt.matmul_gelu_grad %[[DY]], %[[W]], %[[PRE]] {transpose_b} : tensor<2x8x16xbf16>, tensor<32x16xbf16>, tensor<2x8x32xbf16> -> tensor<2x8x32xbf16>, tensor<32xbf16>
// CHECK-NEXT: %[[DB:.+]] = gpt.cast %[[DBL]] : tensor<32xbf16> -> tensor<32xf32>
// CHECK-NEXT: %[[DP2:.+]] = gpt.reshape %[[DP]] : tensor<2x8x32xbf16> -> tensor<16x32xbf16>
// CHECK-NEXT: %[[DW:.+]] = gpt.matmul %[[X]], %[[DP2]] {transpose_a} : tensor<16x8xbf16>, tensor<16x32xbf16> -> tensor<8x32xf32>
// CHECK-NEXT: return %[[DP]], %[[DW]], %[[DB]]
// CHECK-NOT: gpt.matmul_bias_grad
func.func @gelu_grad_bias_to_gelu_grad(%dy: tensor<2x8x16xbf16>, %w: tensor<32x16xbf16>, %prel: tensor<2x8x32xbf16>, %x: tensor<16x8xbf16>) -> (tensor<2x8x32xbf16>, tensor<8x32xf32>, tensor<32xf32>) {
  %pre = gpt.cast %prel : tensor<2x8x32xbf16> -> tensor<2x8x32xf32>
  %mm = gpt.matmul %dy, %w {transpose_b} : tensor<2x8x16xbf16>, tensor<32x16xbf16> -> tensor<2x8x32xbf16>
  %dh = gpt.cast %mm : tensor<2x8x32xbf16> -> tensor<2x8x32xf32>
  %dp = gpt.gelu_grad %pre, %dh : tensor<2x8x32xf32>
  %db = gpt.reduce_sum %dp : tensor<2x8x32xf32> -> tensor<32xf32>
  %l = gpt.cast %dp : tensor<2x8x32xf32> -> tensor<2x8x32xbf16>
  %l2 = gpt.reshape %l : tensor<2x8x32xbf16> -> tensor<16x32xbf16>
  %dwl = gpt.matmul %x, %l2 {transpose_a} : tensor<16x8xbf16>, tensor<16x32xbf16> -> tensor<8x32xbf16>
  %dw = gpt.cast %dwl : tensor<8x32xbf16> -> tensor<8x32xf32>
  return %l, %dw, %db : tensor<2x8x32xbf16>, tensor<8x32xf32>, tensor<32xf32>
}

// -----

// Only GELU's derivative's sum moves: a bias gradient of any other dy
// (an output projection's, under --bias-grads=gemm) still goes to its
// weight-gradient GEMM (BGRADA).
// CHECK-LABEL: func.func @other_bias_grad_stays
// CHECK: gpt.matmul_bias_grad
// CHECK-NOT: gpt.reduce_sum
func.func @other_bias_grad_stays(%dy: tensor<16x32xf32>, %x: tensor<16x8xbf16>) -> (tensor<8x32xf32>, tensor<32xf32>) {
  %db = gpt.reduce_sum %dy : tensor<16x32xf32> -> tensor<32xf32>
  %l = gpt.cast %dy : tensor<16x32xf32> -> tensor<16x32xbf16>
  %dwl = gpt.matmul %x, %l {transpose_a} : tensor<16x8xbf16>, tensor<16x32xbf16> -> tensor<8x32xbf16>
  %dw = gpt.cast %dwl : tensor<8x32xbf16> -> tensor<8x32xf32>
  return %dw, %db : tensor<8x32xf32>, tensor<32xf32>
}

// -----

// An erf GELU's derivative has no epilogue: its sum is left to the weight
// gradient's GEMM as without the option.
// CHECK-LABEL: func.func @erf_gelu_grad_bias
// CHECK: gpt.gelu_grad
// CHECK: gpt.matmul_bias_grad
func.func @erf_gelu_grad_bias(%dh: tensor<16x32xf32>, %pre: tensor<16x32xf32>, %x: tensor<16x8xbf16>) -> (tensor<8x32xf32>, tensor<32xf32>) {
  %dp = gpt.gelu_grad %pre, %dh {approximate = "none"} : tensor<16x32xf32>
  %db = gpt.reduce_sum %dp : tensor<16x32xf32> -> tensor<32xf32>
  %l = gpt.cast %dp : tensor<16x32xf32> -> tensor<16x32xbf16>
  %dwl = gpt.matmul %x, %l {transpose_a} : tensor<16x8xbf16>, tensor<16x32xbf16> -> tensor<8x32xbf16>
  %dw = gpt.cast %dwl : tensor<8x32xbf16> -> tensor<8x32xf32>
  return %dw, %db : tensor<8x32xf32>, tensor<32xf32>
}
