// RUN: gptc-opt %s -split-input-file -gpt-recompute="ops=gelu,layernorm" -verify-diagnostics | FileCheck %s
// RUN: gptc-opt %s -split-input-file -gpt-recompute="ops=gelu" | FileCheck %s --check-prefix=GELU
// RUN: gptc-opt %s -split-input-file -gpt-recompute | FileCheck %s --check-prefix=NONE
// RUN: not gptc-opt %s -gpt-recompute="ops=gelu,softmax" 2>&1 | FileCheck %s --check-prefix=UNKNOWN

// Backward ops are those gpt-autodiff located in fused<"vjp">. Here the
// backward reads the bf16 GELU output (the weight gradient of the next
// GEMM) and the pre-activation (gelu_grad): the cast GELU is computed again
// just before the weight-gradient GEMM, from the pre-activation that
// gelu_grad keeps alive anyway, and the forward's copy is read by the
// forward GEMM alone.
// CHECK-LABEL: func.func @gelu
// CHECK-SAME: (%[[Z:[^:]+]]: tensor<4x8xf32>,
// CHECK: %[[H:.+]] = gpt.gelu %[[Z]]
// CHECK: %[[A:.+]] = gpt.cast %[[H]]
// CHECK: gpt.matmul %[[A]]
// CHECK: %[[DX:.+]] = gpt.matmul %[[DY:[^,]+]], %{{.+}} {transpose_b}
// CHECK: %[[H2:.+]] = gpt.gelu %[[Z]]
// CHECK: %[[A2:.+]] = gpt.cast %[[H2]] : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK: gpt.matmul %[[A2]], %[[DY]] {transpose_a}
// CHECK: gpt.gelu_grad %[[Z]]
// GELU-LABEL: func.func @gelu
// GELU-COUNT-2: gpt.gelu %
// NONE-LABEL: func.func @gelu
// NONE-COUNT-1: gpt.gelu %
// NONE-NOT: gpt.gelu %
// NONE-LABEL: func.func @layernorm
func.func @gelu(%z: tensor<4x8xf32>, %w: tensor<8x8xbf16>, %dy: tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<8x8xbf16>, tensor<4x8xf32>) {
  %h = gpt.gelu %z : tensor<4x8xf32>
  %a = gpt.cast %h : tensor<4x8xf32> -> tensor<4x8xbf16>
  %y = gpt.matmul %a, %w : tensor<4x8xbf16>, tensor<8x8xbf16> -> tensor<4x8xbf16>
  %dx = gpt.matmul %dy, %w {transpose_b} : tensor<4x8xbf16>, tensor<8x8xbf16> -> tensor<4x8xbf16> loc(fused<"vjp">["model.cpp":3:1])
  %dw = gpt.matmul %a, %dy {transpose_a} : tensor<4x8xbf16>, tensor<4x8xbf16> -> tensor<8x8xbf16> loc(fused<"vjp">["model.cpp":3:1])
  %dxf = gpt.cast %dx : tensor<4x8xbf16> -> tensor<4x8xf32> loc(fused<"vjp">["model.cpp":3:1])
  %dz = gpt.gelu_grad %z, %dxf : tensor<4x8xf32> loc(fused<"vjp">["model.cpp":2:1])
  return %y, %dw, %dz : tensor<4x8xbf16>, tensor<8x8xbf16>, tensor<4x8xf32>
}

// -----

// A layernorm's output, read by the backward's weight-gradient GEMM: the
// copy reads the layernorm's input, which layernorm_grad reads later, and
// the parameters. With ops=gelu alone it stays as it is.
// CHECK-LABEL: func.func @layernorm
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4x8xf32>, %[[G:[^:]+]]: tensor<8xf32>, %[[B:[^:]+]]: tensor<8xf32>,
// CHECK: %[[N:.+]] = gpt.layernorm %[[X]], %[[G]], %[[B]] {epsilon = 2.{{0+}}e-05 : f32}
// CHECK: gpt.matmul %[[N]], %{{.+}} :
// CHECK: %[[N2:.+]] = gpt.layernorm %[[X]], %[[G]], %[[B]] {epsilon = 2.{{0+}}e-05 : f32}
// CHECK: gpt.matmul %[[N2]], %{{.+}} {transpose_a}
// CHECK: gpt.layernorm_grad %[[X]]
// GELU-LABEL: func.func @layernorm
// GELU-COUNT-1: gpt.layernorm %
// GELU-NOT: gpt.layernorm %
// GELU-LABEL: func.func @input_not_kept
func.func @layernorm(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>, %w: tensor<8x8xf32>, %dy: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8x8xf32>, tensor<4x8xf32>) {
  %n = gpt.layernorm %x, %g, %b {epsilon = 2.0e-5 : f32} : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %y = gpt.matmul %n, %w : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  %dn = gpt.matmul %dy, %w {transpose_b} : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32> loc(fused<"vjp">["model.cpp":9:1])
  %dw = gpt.matmul %n, %dy {transpose_a} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<8x8xf32> loc(fused<"vjp">["model.cpp":9:1])
  %dx, %dg, %db = gpt.layernorm_grad %x, %g, %dn : tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32> loc(fused<"vjp">["model.cpp":8:1])
  return %y, %dw, %dx : tensor<4x8xf32>, tensor<8x8xf32>, tensor<4x8xf32>
}

// -----

// Declined: nothing in the backward reads the GELU's input after the GEMM
// that reads its output, so the copy would keep the input alive instead.
// CHECK-LABEL: func.func @input_not_kept
// CHECK-COUNT-1: gpt.gelu %
// CHECK-NOT: gpt.gelu %
func.func @input_not_kept(%x: tensor<4x8xf32>, %dy: tensor<4x8xf32>) -> tensor<8x8xf32> {
  %z = gpt.exp %x : tensor<4x8xf32>
  // expected-remark @+1 {{not recomputed for the backward: operand #0 is not kept until 'gpt.matmul' reads the result, and recomputing would keep it longer}}
  %h = gpt.gelu %z : tensor<4x8xf32>
  %dw = gpt.matmul %h, %dy {transpose_a} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<8x8xf32> loc(fused<"vjp">["model.cpp":5:1])
  return %dw : tensor<8x8xf32>
}

// -----

// Not recomputed: values of other ops (an exp, attention), and a GELU that
// no backward op reads (a function without a backward).
// CHECK-LABEL: func.func @others
// CHECK-COUNT-1: gpt.exp
// CHECK-NOT: gpt.exp
// CHECK-LABEL: func.func @forward_only
// CHECK-COUNT-1: gpt.gelu
// CHECK-NOT: gpt.gelu
func.func @others(%x: tensor<4x8xf32>, %dy: tensor<4x8xf32>) -> (tensor<8x8xf32>, tensor<4x8xf32>) {
  %e = gpt.exp %x : tensor<4x8xf32>
  %dw = gpt.matmul %e, %dy {transpose_a} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<8x8xf32> loc(fused<"vjp">["model.cpp":5:1])
  %dx = gpt.mul %e, %dy : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32> loc(fused<"vjp">["model.cpp":5:1])
  return %dw, %dx : tensor<8x8xf32>, tensor<4x8xf32>
}
func.func @forward_only(%z: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %h = gpt.gelu %z : tensor<4x8xf32>
  return %h : tensor<4x8xf32>
}

// UNKNOWN: error: gpt-recompute: unknown op 'softmax' (recomputable: gelu, layernorm)
