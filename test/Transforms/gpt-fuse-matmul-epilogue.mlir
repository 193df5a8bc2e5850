// RUN: gptc-opt %s -split-input-file -gpt-fuse-matmul-epilogue -verify-diagnostics | FileCheck %s

// fp32: matmul then a [N] bias add is the BIAS epilogue; the add is gone.
// CHECK-LABEL: func.func @bias
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x8x8xf32>, %[[W:[^:]+]]: tensor<8x16xf32>, %[[B:[^:]+]]: tensor<16xf32>)
// CHECK-NEXT: %[[Y:.+]] = gpt.matmul_epilogue %[[X]], %[[W]], %[[B]] : tensor<2x8x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<2x8x16xf32>
// CHECK-NEXT: return %[[Y]]
func.func @bias(%x: tensor<2x8x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<2x8x16xf32> {
  %mm = gpt.matmul %x, %w : tensor<2x8x8xf32>, tensor<8x16xf32> -> tensor<2x8x16xf32>
  %h = gpt.add %mm, %b : tensor<2x8x16xf32>, tensor<16xf32> -> tensor<2x8x16xf32>
  return %h : tensor<2x8x16xf32>
}

// -----

// bf16 autocast: the widening cast after the GEMM is seen through and
// disappears (the epilogue writes float32); bias + product in either order;
// transpose_b carries over. The residual add after it stays.
// CHECK-LABEL: func.func @bf16_bias_transposed
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x8x8xf32>, %[[W:[^:]+]]: tensor<16x8xf32>, %[[B:[^:]+]]: tensor<16xf32>, %[[R:[^:]+]]: tensor<2x8x16xf32>)
// CHECK: %[[XL:.+]] = gpt.cast %[[X]]
// CHECK: %[[WL:.+]] = gpt.cast %[[W]]
// CHECK-NEXT: %[[Y:.+]] = gpt.matmul_epilogue %[[XL]], %[[WL]], %[[B]] {transpose_b} : tensor<2x8x8xbf16>, tensor<16x8xbf16>, tensor<16xf32> -> tensor<2x8x16xf32>
// CHECK-NEXT: %[[S:.+]] = gpt.add %[[R]], %[[Y]]
// CHECK-NEXT: return %[[S]]
func.func @bf16_bias_transposed(%x: tensor<2x8x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf32>, %r: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  %xl = gpt.cast %x : tensor<2x8x8xf32> -> tensor<2x8x8xbf16>
  %wl = gpt.cast %w : tensor<16x8xf32> -> tensor<16x8xbf16>
  %mm = gpt.matmul %xl, %wl {transpose_b} : tensor<2x8x8xbf16>, tensor<16x8xbf16> -> tensor<2x8x16xbf16>
  %y = gpt.cast %mm : tensor<2x8x16xbf16> -> tensor<2x8x16xf32>
  %h = gpt.add %b, %y : tensor<16xf32>, tensor<2x8x16xf32> -> tensor<2x8x16xf32>
  %s = gpt.add %r, %h : tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<2x8x16xf32>
  return %s : tensor<2x8x16xf32>
}

// -----

// Bias and tanh GELU whose pre-activation the backward's gelu_grad reads:
// GELU_AUX_BIAS, the aux result serves the gelu_grad.
// CHECK-LABEL: func.func @gelu_aux
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x8x8xf32>, %[[W:[^:]+]]: tensor<8x16xf32>, %[[B:[^:]+]]: tensor<16xf32>, %[[DY:[^:]+]]: tensor<2x8x16xf32>)
// CHECK: %[[H:[^ ,]+]], %[[PRE:[^ ]+]] = gpt.matmul_epilogue %{{.+}}, %{{.+}}, %[[B]] {gelu} : tensor<2x8x8xbf16>, tensor<8x16xbf16>, tensor<16xf32> -> tensor<2x8x16xf32>, tensor<2x8x16xf32>
// CHECK-NOT: gpt.gelu %
// CHECK: %[[DX:.+]] = gpt.gelu_grad %[[PRE]], %[[DY]]
// CHECK: return %[[H]], %[[DX]]
func.func @gelu_aux(%x: tensor<2x8x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>, %dy: tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>) {
  %xl = gpt.cast %x : tensor<2x8x8xf32> -> tensor<2x8x8xbf16>
  %wl = gpt.cast %w : tensor<8x16xf32> -> tensor<8x16xbf16>
  %mm = gpt.matmul %xl, %wl : tensor<2x8x8xbf16>, tensor<8x16xbf16> -> tensor<2x8x16xbf16>
  %y = gpt.cast %mm : tensor<2x8x16xbf16> -> tensor<2x8x16xf32>
  %h = gpt.add %y, %b : tensor<2x8x16xf32>, tensor<16xf32> -> tensor<2x8x16xf32>
  %g = gpt.gelu %h : tensor<2x8x16xf32>
  %dx = gpt.gelu_grad %h, %dy : tensor<2x8x16xf32>
  return %g, %dx : tensor<2x8x16xf32>, tensor<2x8x16xf32>
}

// -----

// GELU with no other reader of the pre-activation: GELU_BIAS, one result.
// CHECK-LABEL: func.func @gelu_no_aux
// CHECK-NEXT: %[[G:.+]] = gpt.matmul_epilogue %{{.+}}, %{{.+}}, %{{.+}} {gelu} : tensor<16x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<16x16xf32>
// CHECK-NEXT: return %[[G]]
func.func @gelu_no_aux(%x: tensor<16x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<16x16xf32> {
  %mm = gpt.matmul %x, %w : tensor<16x8xf32>, tensor<8x16xf32> -> tensor<16x16xf32>
  %h = gpt.add %mm, %b : tensor<16x16xf32>, tensor<16xf32> -> tensor<16x16xf32>
  %g = gpt.gelu %h {approximate = "tanh"} : tensor<16x16xf32>
  return %g : tensor<16x16xf32>
}

// -----

// The erf GELU is not cuBLASLt's: only the bias is fused.
// CHECK-LABEL: func.func @erf_gelu
// CHECK-NEXT: %[[Y:.+]] = gpt.matmul_epilogue
// CHECK-NOT: gelu}
// CHECK-NEXT: %[[G:.+]] = gpt.gelu %[[Y]] {approximate = "none"}
// CHECK-NEXT: return %[[G]]
func.func @erf_gelu(%x: tensor<16x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<16x16xf32> {
  %mm = gpt.matmul %x, %w : tensor<16x8xf32>, tensor<8x16xf32> -> tensor<16x16xf32>
  %h = gpt.add %mm, %b : tensor<16x16xf32>, tensor<16xf32> -> tensor<16x16xf32>
  // expected-remark @+1 {{did not fuse into the matmul epilogue: the GELU is the erf form (approximate = "none"); the epilogue's, as cuBLASLt's, is the tanh form; only the bias is fused}}
  %g = gpt.gelu %h {approximate = "none"} : tensor<16x16xf32>
  return %g : tensor<16x16xf32>
}

// -----

// A full-shape addend (a residual) is no bias at all: nothing to explain.
// CHECK-LABEL: func.func @not_a_bias
// CHECK: gpt.matmul %
// CHECK-NOT: gpt.matmul_epilogue
func.func @not_a_bias(%x: tensor<16x8xf32>, %w: tensor<8x16xf32>, %r: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %mm = gpt.matmul %x, %w : tensor<16x8xf32>, tensor<8x16xf32> -> tensor<16x16xf32>
  %h = gpt.add %mm, %r : tensor<16x16xf32>, tensor<16x16xf32> -> tensor<16x16xf32>
  return %h : tensor<16x16xf32>
}

// -----

// A bias along the rows ([M, 1]) is not the epilogue's either.
// CHECK-LABEL: func.func @row_bias
// CHECK-NOT: gpt.matmul_epilogue
func.func @row_bias(%x: tensor<16x8xf32>, %w: tensor<8x32xf32>, %b: tensor<16x1xf32>) -> tensor<16x32xf32> {
  %mm = gpt.matmul %x, %w : tensor<16x8xf32>, tensor<8x32xf32> -> tensor<16x32xf32>
  // expected-remark @+1 {{did not fuse into the matmul epilogue: the addend 'tensor<16x1xf32>' is not a float32 [32] bias broadcast along the last dimension}}
  %h = gpt.add %mm, %b : tensor<16x32xf32>, tensor<16x1xf32> -> tensor<16x32xf32>
  return %h : tensor<16x32xf32>
}

// -----

// The product without its bias is also read: the epilogue cannot serve it.
// CHECK-LABEL: func.func @product_used_twice
// CHECK-NOT: gpt.matmul_epilogue
func.func @product_used_twice(%x: tensor<16x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> (tensor<16x16xf32>, tensor<16x16xf32>) {
  %xl = gpt.cast %x : tensor<16x8xf32> -> tensor<16x8xbf16>
  %wl = gpt.cast %w : tensor<8x16xf32> -> tensor<8x16xbf16>
  %mm = gpt.matmul %xl, %wl : tensor<16x8xbf16>, tensor<8x16xbf16> -> tensor<16x16xbf16>
  %y = gpt.cast %mm : tensor<16x16xbf16> -> tensor<16x16xf32>
  // expected-remark @+1 {{did not fuse into the matmul epilogue: the product before its bias add is also used elsewhere, and the epilogue writes only the biased value}}
  %h = gpt.add %y, %b : tensor<16x16xf32>, tensor<16xf32> -> tensor<16x16xf32>
  return %h, %y : tensor<16x16xf32>, tensor<16x16xf32>
}

// -----

// A batched right operand is not a projection by a weight.
// CHECK-LABEL: func.func @batched_weight
// CHECK-NOT: gpt.matmul_epilogue
func.func @batched_weight(%x: tensor<2x16x8xf32>, %w: tensor<2x8x16xf32>, %b: tensor<16xf32>) -> tensor<2x16x16xf32> {
  %mm = gpt.matmul %x, %w : tensor<2x16x8xf32>, tensor<2x8x16xf32> -> tensor<2x16x16xf32>
  // expected-remark @+1 {{did not fuse into the matmul epilogue: the right operand is batched (rank 3); the epilogue's bias belongs to a 2-D weight}}
  %h = gpt.add %mm, %b : tensor<2x16x16xf32>, tensor<16xf32> -> tensor<2x16x16xf32>
  return %h : tensor<2x16x16xf32>
}

// -----

// A batched left operand read transposed is one GEMM per batch.
// CHECK-LABEL: func.func @batched_transposed
// CHECK-NOT: gpt.matmul_epilogue
func.func @batched_transposed(%x: tensor<2x8x16xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<2x16x16xf32> {
  %mm = gpt.matmul %x, %w {transpose_a} : tensor<2x8x16xf32>, tensor<8x16xf32> -> tensor<2x16x16xf32>
  // expected-remark @+1 {{did not fuse into the matmul epilogue: the left operand is batched and transposed, one GEMM per batch (the epilogue belongs to one GEMM)}}
  %h = gpt.add %mm, %b : tensor<2x16x16xf32>, tensor<16xf32> -> tensor<2x16x16xf32>
  return %h : tensor<2x16x16xf32>
}

// -----

// gpt-pad-dims padded N and slices the product back before the bias: the
// epilogue would need a padded bias. Declined, with a word.
// CHECK-LABEL: func.func @padded_n
// CHECK-NOT: gpt.matmul_epilogue
func.func @padded_n(%x: tensor<16x64xbf16>, %w: tensor<64x64xbf16>, %b: tensor<48xf32>) -> tensor<16x48xf32> {
  %mm = gpt.matmul %x, %w : tensor<16x64xbf16>, tensor<64x64xbf16> -> tensor<16x64xbf16>
  %y = gpt.cast %mm : tensor<16x64xbf16> -> tensor<16x64xf32>
  %s = gpt.slice %y : tensor<16x64xf32> -> tensor<16x48xf32>
  // expected-remark @+1 {{did not fuse into the matmul epilogue: the product is sliced back from dimensions gpt-pad-dims padded before its bias add (the epilogue would need the bias padded too)}}
  %h = gpt.add %s, %b : tensor<16x48xf32>, tensor<48xf32> -> tensor<16x48xf32>
  return %h : tensor<16x48xf32>
}
