// RUN: gptc-opt %s -split-input-file -verify-diagnostics | FileCheck %s
// gpt.matmul_epilogue: round trip, then one case per verifier rule.

// CHECK-LABEL: func.func @round_trip
// CHECK: gpt.matmul_epilogue %{{.+}}, %{{.+}}, %{{.+}} {gelu} : tensor<2x8x8xbf16>, tensor<8x16xbf16>, tensor<16xf32> -> tensor<2x8x16xf32>, tensor<2x8x16xf32>
// CHECK: gpt.matmul_epilogue %{{.+}}, %{{.+}}, %{{.+}} {transpose_b} : tensor<2x8x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<2x8x16xbf16>
func.func @round_trip(%x: tensor<2x8x8xbf16>, %w: tensor<8x16xbf16>, %b: tensor<16xf32>, %xf: tensor<2x8x8xf32>, %wt: tensor<16x8xf32>) {
  %h, %pre = gpt.matmul_epilogue %x, %w, %b {gelu} : tensor<2x8x8xbf16>, tensor<8x16xbf16>, tensor<16xf32> -> tensor<2x8x16xf32>, tensor<2x8x16xf32>
  %y = gpt.matmul_epilogue %xf, %wt, %b {transpose_b} : tensor<2x8x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<2x8x16xbf16>
  return
}

// -----

func.func @bias_length(%x: tensor<8x8xf32>, %w: tensor<8x16xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{bias must be a float32 [16]}}
  %y = gpt.matmul_epilogue %x, %w, %b : tensor<8x8xf32>, tensor<8x16xf32>, tensor<8xf32> -> tensor<8x16xf32>
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
  // expected-error @+1 {{takes a [batch..., M, K] operand and a 2-D weight}}
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
