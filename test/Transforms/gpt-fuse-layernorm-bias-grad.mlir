// RUN: gptc-opt %s -split-input-file -gpt-fuse-elementwise -verify-diagnostics | FileCheck %s
// RUN: gptc-opt %s -split-input-file -gpt-fuse-elementwise=layernorm-bias-grads=false | FileCheck %s --check-prefix=OFF

// GPT-2's output projection under bf16: the residual gradient that the
// layernorm gradient writes (float32 for the next block, bf16 for the
// GEMMs) is the projection's output gradient. Its bias gradient becomes a
// third value of the layernorm gradient, the column sums of the float32
// scalar the body yields; the weight-gradient GEMM is a plain one.
// CHECK-LABEL: func.func @projection_bias
// CHECK: %[[DG:[^,]+]], %[[DB:[^,]+]], %[[V:[^ ]+]]:3 = gpt.fused_layernorm_grad {{.+}} -> tensor<8xf32>, tensor<8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xbf16>, tensor<8xf32> {
// CHECK-NEXT: ^bb0(%[[DX:.+]]: f32, %[[R:.+]]: f32):
// CHECK-NEXT: %[[S:.+]] = arith.addf %[[R]], %[[DX]] : f32
// CHECK-NEXT: gpt.yield %[[S]], %[[S]], %[[S]] : f32, f32, f32
// CHECK: %[[B:.+]] = gpt.reshape %[[V]]#1 : tensor<2x4x8xbf16> -> tensor<8x8xbf16>
// CHECK: %[[W:.+]] = gpt.matmul %{{.+}}, %[[B]] {transpose_a} : tensor<8x16xbf16>, tensor<8x8xbf16> -> tensor<16x8xf32>
// CHECK-NOT: gpt.matmul_bias_grad
// CHECK: return %[[V]]#0, %[[W]], %[[V]]#2
// OFF-LABEL: func.func @projection_bias
// OFF: gpt.fused_layernorm_grad {{.+}} -> tensor<8xf32>, tensor<8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xbf16> {
// OFF: gpt.matmul_bias_grad
func.func @projection_bias(%x: tensor<2x4x8xf32>, %g: tensor<8xf32>, %dy: tensor<2x4x8xbf16>, %r: tensor<2x4x8xf32>, %h: tensor<8x16xbf16>) -> (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<8xf32>) {
  %dg, %db, %v:2 = gpt.fused_layernorm_grad %x, %g, %dy : tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xbf16> epilogue(%r : tensor<2x4x8xf32>) -> tensor<8xf32>, tensor<8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xbf16> {
  ^bb0(%dx: f32, %a: f32):
    %s = arith.addf %a, %dx : f32
    gpt.yield %s, %s : f32, f32
  }
  %b = gpt.reshape %v#1 : tensor<2x4x8xbf16> -> tensor<8x8xbf16>
  %dw, %dbias = gpt.matmul_bias_grad %h, %b {transpose_a} : tensor<8x16xbf16>, tensor<8x8xbf16> -> tensor<16x8xf32>, tensor<8xf32>
  return %v#0, %dw, %dbias : tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<8xf32>
}

// -----

// Under fp32 ln_f's gradient is a plain gpt.layernorm_grad (its dx read by
// the lm head's GEMMs and the last projection): it becomes a fused one
// whose body yields dx, written and summed.
// CHECK-LABEL: func.func @plain_layernorm_grad
// CHECK: %[[DG:[^,]+]], %[[DB:[^,]+]], %[[V:[^ ]+]]:2 = gpt.fused_layernorm_grad %{{.+}}, %{{.+}}, %{{.+}} : tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32> epilogue() -> tensor<8xf32>, tensor<8xf32>, tensor<2x4x8xf32>, tensor<8xf32> {
// CHECK-NEXT: ^bb0(%[[DX:.+]]: f32):
// CHECK-NEXT: gpt.yield %[[DX]], %[[DX]] : f32, f32
// CHECK: %[[B:.+]] = gpt.reshape %[[V]]#0
// CHECK: %[[W:.+]] = gpt.matmul %{{.+}}, %[[B]] {transpose_a}
// CHECK: return %[[DG]], %[[W]], %[[V]]#1
// OFF-LABEL: func.func @plain_layernorm_grad
// OFF: gpt.layernorm_grad
// OFF: gpt.matmul_bias_grad
func.func @plain_layernorm_grad(%x: tensor<2x4x8xf32>, %g: tensor<8xf32>, %dy: tensor<2x4x8xf32>, %h: tensor<8x16xf32>) -> (tensor<8xf32>, tensor<16x8xf32>, tensor<8xf32>) {
  %dx, %dg, %db = gpt.layernorm_grad %x, %g, %dy : tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>
  %b = gpt.reshape %dx : tensor<2x4x8xf32> -> tensor<8x8xf32>
  %dw, %dbias = gpt.matmul_bias_grad %h, %b {transpose_a} : tensor<8x16xf32>, tensor<8x8xf32> -> tensor<16x8xf32>, tensor<8xf32>
  return %dg, %dw, %dbias : tensor<8xf32>, tensor<16x8xf32>, tensor<8xf32>
}

// -----

// A reshape that changes the last dimension: the GEMM's column sums are
// not the layernorm's columns. Nothing moves.
// CHECK-LABEL: func.func @columns_regrouped
// CHECK: gpt.fused_layernorm_grad {{.+}} -> tensor<8xf32>, tensor<8xf32>, tensor<2x4x8xbf16> {
// CHECK: gpt.matmul_bias_grad
func.func @columns_regrouped(%x: tensor<2x4x8xf32>, %g: tensor<8xf32>, %dy: tensor<2x4x8xbf16>, %h: tensor<4x16xbf16>) -> (tensor<16x16xf32>, tensor<16xf32>) {
  %dg, %db, %v = gpt.fused_layernorm_grad %x, %g, %dy : tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xbf16> epilogue() -> tensor<8xf32>, tensor<8xf32>, tensor<2x4x8xbf16> {
  ^bb0(%dx: f32):
    gpt.yield %dx : f32
  }
  %b = gpt.reshape %v : tensor<2x4x8xbf16> -> tensor<4x16xbf16>
  %dw, %dbias = gpt.matmul_bias_grad %h, %b {transpose_a} : tensor<4x16xbf16>, tensor<4x16xbf16> -> tensor<16x16xf32>, tensor<16xf32>
  return %dw, %dbias : tensor<16x16xf32>, tensor<16xf32>
}

// -----

// A bias gradient in bf16 (a weight gradient not widened): the layernorm
// gradient sums in float32 only, so the GEMM keeps it, with a remark.
// CHECK-LABEL: func.func @narrow_bias_gradient
// CHECK: gpt.fused_layernorm_grad {{.+}} -> tensor<8xf32>, tensor<8xf32>, tensor<2x4x8xbf16> {
// CHECK: gpt.matmul_bias_grad
func.func @narrow_bias_gradient(%x: tensor<2x4x8xf32>, %g: tensor<8xf32>, %dy: tensor<2x4x8xbf16>, %h: tensor<8x16xbf16>) -> (tensor<16x8xbf16>, tensor<8xbf16>) {
  %dg, %db, %v = gpt.fused_layernorm_grad %x, %g, %dy : tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xbf16> epilogue() -> tensor<8xf32>, tensor<8xf32>, tensor<2x4x8xbf16> {
  ^bb0(%dx: f32):
    gpt.yield %dx : f32
  }
  %b = gpt.reshape %v : tensor<2x4x8xbf16> -> tensor<8x8xbf16>
  // expected-remark @+1 {{did not take the bias gradient from the layernorm gradient that writes its right operand: the bias gradient is 'bf16', the layernorm gradient sums in float32}}
  %dw, %dbias = gpt.matmul_bias_grad %h, %b {transpose_a} : tensor<8x16xbf16>, tensor<8x8xbf16> -> tensor<16x8xbf16>, tensor<8xbf16>
  return %dw, %dbias : tensor<16x8xbf16>, tensor<8xbf16>
}

// -----

// An output gradient that no layernorm gradient writes (c_fc's, from the
// DGELU GEMM): the GEMM keeps its bias gradient, quietly.
// CHECK-LABEL: func.func @not_a_layernorm_value
// CHECK: gpt.matmul_bias_grad
func.func @not_a_layernorm_value(%dy: tensor<8x8xbf16>, %h: tensor<8x16xbf16>) -> (tensor<16x8xf32>, tensor<8xf32>) {
  %dw, %dbias = gpt.matmul_bias_grad %h, %dy {transpose_a} : tensor<8x16xbf16>, tensor<8x8xbf16> -> tensor<16x8xf32>, tensor<8xf32>
  return %dw, %dbias : tensor<16x8xf32>, tensor<8xf32>
}

// -----

// The same from a plain layernorm gradient: it stays plain (nothing to
// sum), with the remark.
// CHECK-LABEL: func.func @plain_narrow_bias_gradient
// CHECK: gpt.layernorm_grad
// CHECK-NOT: gpt.fused_layernorm_grad
// CHECK: gpt.matmul_bias_grad
func.func @plain_narrow_bias_gradient(%x: tensor<2x4x8xf32>, %g: tensor<8xf32>, %dy: tensor<2x4x8xf32>, %h: tensor<8x16xf32>) -> (tensor<8xf32>, tensor<16x8xf16>, tensor<8xf16>) {
  %dx, %dg, %db = gpt.layernorm_grad %x, %g, %dy : tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>
  %b = gpt.reshape %dx : tensor<2x4x8xf32> -> tensor<8x8xf32>
  // expected-remark @+1 {{did not take the bias gradient from the layernorm gradient that writes its right operand: the bias gradient is 'f16', the layernorm gradient sums in float32}}
  %dw, %dbias = gpt.matmul_bias_grad %h, %b {transpose_a} : tensor<8x16xf32>, tensor<8x8xf32> -> tensor<16x8xf16>, tensor<8xf16>
  return %dg, %dw, %dbias : tensor<8xf32>, tensor<16x8xf16>, tensor<8xf16>
}
