// RUN: gptc-opt %s -split-input-file -verify-diagnostics | FileCheck %s
// gpt.matmul_epilogue, gpt.matmul_gelu_grad, gpt.matmul_bias_grad: round
// trips, then one case per verifier rule.

// CHECK-LABEL: func.func @round_trip
// CHECK: gpt.matmul_epilogue %{{.+}}, %{{.+}}, %{{.+}} {gelu} : tensor<2x8x8xbf16>, tensor<8x16xbf16>, tensor<16xf32> -> tensor<2x8x16xf32>, tensor<2x8x16xf32>
// CHECK: gpt.matmul_epilogue %{{.+}}, %{{.+}}, %{{.+}} {transpose_b} : tensor<2x8x8xf32>, tensor<16x8xf32>, tensor<16xbf16> -> tensor<2x8x16xbf16>
// CHECK: gpt.matmul_epilogue %{{.+}}, %{{.+}}, %{{.+}} {gelu} : tensor<2x8x8xbf16>, tensor<8x16xbf16>, tensor<16xbf16> -> tensor<2x8x16xbf16>, tensor<2x8x16xbf16>
func.func @round_trip(%x: tensor<2x8x8xbf16>, %w: tensor<8x16xbf16>, %b: tensor<16xf32>, %xf: tensor<2x8x8xf32>, %wt: tensor<16x8xf32>, %bb: tensor<16xbf16>) {
  %h, %pre = gpt.matmul_epilogue %x, %w, %b {gelu} : tensor<2x8x8xbf16>, tensor<8x16xbf16>, tensor<16xf32> -> tensor<2x8x16xf32>, tensor<2x8x16xf32>
  %y = gpt.matmul_epilogue %xf, %wt, %bb {transpose_b} : tensor<2x8x8xf32>, tensor<16x8xf32>, tensor<16xbf16> -> tensor<2x8x16xbf16>
  %h2, %pre2 = gpt.matmul_epilogue %x, %w, %bb {gelu} : tensor<2x8x8xbf16>, tensor<8x16xbf16>, tensor<16xbf16> -> tensor<2x8x16xbf16>, tensor<2x8x16xbf16>
  return
}

// -----

func.func @bias_length(%x: tensor<8x8xf32>, %w: tensor<8x16xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{bias must be [16] of the result's element type 'f32'}}
  %y = gpt.matmul_epilogue %x, %w, %b : tensor<8x8xf32>, tensor<8x16xf32>, tensor<8xf32> -> tensor<8x16xf32>
  return
}

// -----

// cuBLASLt reads the bias in D's type.
func.func @bias_type(%x: tensor<8x8xbf16>, %w: tensor<8x16xbf16>, %b: tensor<16xf32>) {
  // expected-error @+1 {{bias must be [16] of the result's element type 'bf16'}}
  %y = gpt.matmul_epilogue %x, %w, %b : tensor<8x8xbf16>, tensor<8x16xbf16>, tensor<16xf32> -> tensor<8x16xbf16>
  return
}

// -----

// ... and writes the GELU aux matrix in D's type.
func.func @pre_type(%x: tensor<8x8xbf16>, %w: tensor<8x16xbf16>, %b: tensor<16xbf16>) {
  // expected-error @+1 {{the pre-activation is 'f32', the result 'bf16'; cuBLASLt keeps the GELU input in D's type}}
  %y, %p = gpt.matmul_epilogue %x, %w, %b {gelu} : tensor<8x8xbf16>, tensor<8x16xbf16>, tensor<16xbf16> -> tensor<8x16xbf16>, tensor<8x16xf32>
  return
}

// -----

func.func @pre_without_gelu(%x: tensor<8x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{the pre-activation result needs 'gelu'}}
  %y, %p = gpt.matmul_epilogue %x, %w, %b : tensor<8x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<8x16xf32>, tensor<8x16xf32>
  return
}

// -----

func.func @batched_weight(%x: tensor<2x8x8xf32>, %w: tensor<2x8x16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{takes a [batch..., M, K] operand and a 2-D right operand}}
  %y = gpt.matmul_epilogue %x, %w, %b : tensor<2x8x8xf32>, tensor<2x8x16xf32>, tensor<16xf32> -> tensor<2x8x16xf32>
  return
}

// -----

func.func @contraction(%x: tensor<8x4xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{contraction dimensions differ: a has K=4, b has K=8}}
  %y = gpt.matmul_epilogue %x, %w, %b : tensor<8x4xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<8x16xf32>
  return
}

// -----

func.func @batched_transposed(%x: tensor<2x8x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{a batched, transposed left operand is several GEMMs; the epilogue belongs to one}}
  %y = gpt.matmul_epilogue %x, %w, %b {transpose_a} : tensor<2x8x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<2x8x16xf32>
  return
}

// -----

// CHECK-LABEL: func.func @backward_round_trip
// CHECK: gpt.matmul_gelu_grad %{{.+}}, %{{.+}}, %{{.+}} {transpose_b} : tensor<2x8x16xbf16>, tensor<32x16xbf16>, tensor<2x8x32xf32> -> tensor<2x8x32xf32>, tensor<32xf32>
// CHECK: gpt.matmul_gelu_grad %{{.+}}, %{{.+}}, %{{.+}} : tensor<2x8x16xf32>, tensor<16x32xf32>, tensor<2x8x32xf32> -> tensor<2x8x32xf32>{{$}}
// CHECK: gpt.matmul_gelu_grad %{{.+}}, %{{.+}}, %{{.+}} {transpose_b} : tensor<2x8x16xbf16>, tensor<32x16xbf16>, tensor<2x8x32xbf16> -> tensor<2x8x32xbf16>, tensor<32xbf16>
// CHECK: gpt.matmul_bias_grad %{{.+}}, %{{.+}} {transpose_a} : tensor<16x8xbf16>, tensor<16x32xbf16> -> tensor<8x32xf32>, tensor<32xf32>
// CHECK: gpt.matmul_bias_grad %{{.+}}, %{{.+}} {transpose_a} : tensor<16x8xbf16>, tensor<16x32xbf16> -> tensor<8x32xbf16>, tensor<32xbf16>
func.func @backward_round_trip(%dy: tensor<2x8x16xbf16>, %w: tensor<32x16xbf16>, %pre: tensor<2x8x32xf32>, %dyf: tensor<2x8x16xf32>, %wf: tensor<16x32xf32>, %x: tensor<16x8xbf16>, %g: tensor<16x32xbf16>, %prel: tensor<2x8x32xbf16>) {
  %dp, %db = gpt.matmul_gelu_grad %dy, %w, %pre {transpose_b} : tensor<2x8x16xbf16>, tensor<32x16xbf16>, tensor<2x8x32xf32> -> tensor<2x8x32xf32>, tensor<32xf32>
  %dp2 = gpt.matmul_gelu_grad %dyf, %wf, %pre : tensor<2x8x16xf32>, tensor<16x32xf32>, tensor<2x8x32xf32> -> tensor<2x8x32xf32>
  %dp3, %db3 = gpt.matmul_gelu_grad %dy, %w, %prel {transpose_b} : tensor<2x8x16xbf16>, tensor<32x16xbf16>, tensor<2x8x32xbf16> -> tensor<2x8x32xbf16>, tensor<32xbf16>
  %dw, %db2 = gpt.matmul_bias_grad %x, %g {transpose_a} : tensor<16x8xbf16>, tensor<16x32xbf16> -> tensor<8x32xf32>, tensor<32xf32>
  %dw4, %db4 = gpt.matmul_bias_grad %x, %g {transpose_a} : tensor<16x8xbf16>, tensor<16x32xbf16> -> tensor<8x32xbf16>, tensor<32xbf16>
  return
}

// -----

func.func @gelu_grad_pre_shape(%dy: tensor<8x16xf32>, %w: tensor<16x32xf32>, %pre: tensor<8x16xf32>) {
  // expected-error @+1 {{the pre-activation must have the result's shape}}
  %dp = gpt.matmul_gelu_grad %dy, %w, %pre : tensor<8x16xf32>, tensor<16x32xf32>, tensor<8x16xf32> -> tensor<8x32xf32>
  return
}

// -----

func.func @gelu_grad_bf16_result(%dy: tensor<8x16xbf16>, %w: tensor<16x32xbf16>, %pre: tensor<8x32xf32>) {
  // expected-error @+1 {{the pre-activation is 'f32', the result 'bf16'; cuBLASLt keeps the GELU input in D's type}}
  %dp = gpt.matmul_gelu_grad %dy, %w, %pre : tensor<8x16xbf16>, tensor<16x32xbf16>, tensor<8x32xf32> -> tensor<8x32xbf16>
  return
}

// -----

func.func @gelu_grad_bias_length(%dy: tensor<8x16xf32>, %w: tensor<16x32xf32>, %pre: tensor<8x32xf32>) {
  // expected-error @+1 {{the bias gradient must be [32] of the result's element type 'f32'}}
  %dp, %db = gpt.matmul_gelu_grad %dy, %w, %pre : tensor<8x16xf32>, tensor<16x32xf32>, tensor<8x32xf32> -> tensor<8x32xf32>, tensor<16xf32>
  return
}

// -----

func.func @bias_grad_batched(%x: tensor<2x16x8xf32>, %g: tensor<16x32xf32>) {
  // expected-error @+1 {{takes 2-D operands (the weight gradient of a flattened batch)}}
  %dw, %db = gpt.matmul_bias_grad %x, %g {transpose_a} : tensor<2x16x8xf32>, tensor<16x32xf32> -> tensor<2x8x32xf32>, tensor<32xf32>
  return
}

// -----

func.func @bias_grad_contraction(%x: tensor<12x8xf32>, %g: tensor<16x32xf32>) {
  // expected-error @+1 {{contraction dimensions differ: a has K=12, b has K=16}}
  %dw, %db = gpt.matmul_bias_grad %x, %g {transpose_a} : tensor<12x8xf32>, tensor<16x32xf32> -> tensor<8x32xf32>, tensor<32xf32>
  return
}

// -----

// cuBLASLt writes the bias gradient in D's type.
func.func @bias_grad_type(%x: tensor<16x8xbf16>, %g: tensor<16x32xbf16>) {
  // expected-error @+1 {{the bias gradient must be [32] of the result's element type 'bf16'}}
  %dw, %db = gpt.matmul_bias_grad %x, %g {transpose_a} : tensor<16x8xbf16>, tensor<16x32xbf16> -> tensor<8x32xbf16>, tensor<32xf32>
  return
}
