// RUN: gptc-opt %s -split-input-file -gpt-autodiff -verify-diagnostics | FileCheck %s

// A linear layer with a broadcast bias: the weight gradient is one GEMM over
// the flattened rows, the bias gradient a reduce_sum of the output gradient.
// CHECK-LABEL: func.func @linear_grad
// CHECK-SAME: -> (tensor<f32> {gpt.output = "loss"}, tensor<4x8xf32> {gpt.grad = "w"}, tensor<8xf32> {gpt.grad = "b"})
// CHECK: %[[ONE:.+]] = gpt.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[DLOGITS:.+]] = gpt.cross_entropy_grad %{{.+}}, %{{.+}}, %[[ONE]]
// CHECK: %[[DB:.+]] = gpt.reduce_sum %[[DLOGITS]] : tensor<2x3x8xf32> -> tensor<8xf32>
// CHECK: %[[X2:.+]] = gpt.reshape %{{.+}} : tensor<2x3x4xf32> -> tensor<6x4xf32>
// CHECK: %[[DY2:.+]] = gpt.reshape %[[DLOGITS]] : tensor<2x3x8xf32> -> tensor<6x8xf32>
// CHECK: %[[DW:.+]] = gpt.matmul %[[X2]], %[[DY2]] {transpose_a} : tensor<6x4xf32>, tensor<6x8xf32> -> tensor<4x8xf32>
// CHECK: return %{{.+}}, %[[DW]], %[[DB]]
func.func @linear(%x: tensor<2x3x4xf32>,
                  %w: tensor<4x8xf32> {gpt.param = "w"},
                  %b: tensor<8xf32> {gpt.param = "b"},
                  %t: tensor<2x3xi32> {gpt.input = "targets"}) -> (tensor<f32> {gpt.output = "loss"}) {
  %y = gpt.matmul %x, %w : tensor<2x3x4xf32>, tensor<4x8xf32> -> tensor<2x3x8xf32>
  %z = gpt.add %y, %b : tensor<2x3x8xf32>, tensor<8xf32> -> tensor<2x3x8xf32>
  %l = gpt.cross_entropy %z, %t : tensor<2x3x8xf32>, tensor<2x3xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A tied weight used by the embedding and the lm_head: both contributions
// are summed into one gradient.
// CHECK-LABEL: func.func @tied_grad
// CHECK-DAG: %[[HEAD:.+]] = gpt.matmul %{{.+}}, %{{.+}} {transpose_a} : tensor<6x16xf32>, tensor<6x4xf32> -> tensor<16x4xf32>
// CHECK-DAG: %[[EMB:.+]] = gpt.embedding_grad %{{.+}}, %{{.+}} : tensor<2x3x4xf32>, tensor<2x3xi32> -> tensor<16x4xf32>
// CHECK: %[[SUM:.+]] = gpt.add %{{.+}}, %{{.+}} : tensor<16x4xf32>, tensor<16x4xf32> -> tensor<16x4xf32>
// CHECK: return %{{.+}}, %[[SUM]] : tensor<f32>, tensor<16x4xf32>
func.func @tied(%wte: tensor<16x4xf32> {gpt.param = "wte.weight"},
                %ids: tensor<2x3xi32> {gpt.input = "tokens"},
                %t: tensor<2x3xi32> {gpt.input = "targets"}) -> (tensor<f32> {gpt.output = "loss"}, tensor<2x3x16xf32> {gpt.output = "logits"}) {
  %x = gpt.embedding %wte, %ids : tensor<16x4xf32>, tensor<2x3xi32> -> tensor<2x3x4xf32>
  %logits = gpt.matmul %x, %wte {transpose_b} : tensor<2x3x4xf32>, tensor<16x4xf32> -> tensor<2x3x16xf32>
  %l = gpt.cross_entropy %logits, %t : tensor<2x3x16xf32>, tensor<2x3xi32> -> tensor<f32>
  return %l, %logits : tensor<f32>, tensor<2x3x16xf32>
}

// -----

// A piece of a split that does not reach the loss contributes zeros to the
// concat that is split's adjoint; a parameter that does not reach the loss
// gets a zero gradient; the forward function is left as it was.
// CHECK-LABEL: func.func @split(
// CHECK: return %{{.+}} : tensor<f32>
// CHECK-LABEL: func.func @split_grad
// CHECK-DAG: %[[ZERO:.+]] = gpt.constant dense<0.000000e+00> : tensor<2x4xf32>
// CHECK-DAG: %[[CAT:.+]] = gpt.concat %{{.+}}, %[[ZERO]] {axis = 1 : i64} : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x8xf32>
// CHECK-DAG: %[[UNUSED:.+]] = gpt.constant dense<0.000000e+00> : tensor<3xf32>
// CHECK: return %{{.+}}, %[[CAT]], %[[UNUSED]]
func.func @split(%x: tensor<2x8xf32> {gpt.param = "x"},
                 %unused: tensor<3xf32> {gpt.param = "unused"},
                 %t: tensor<2xi32> {gpt.input = "targets"}) -> (tensor<f32> {gpt.output = "loss"}) {
  %a, %b = gpt.split %x {axis = 1} : tensor<2x8xf32> -> tensor<2x4xf32>, tensor<2x4xf32>
  %l = gpt.cross_entropy %a, %t : tensor<2x4xf32>, tensor<2xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Attention's pieces: the mask's adjoint is the same mask filling zeros.
// CHECK-LABEL: func.func @attention_grad
// CHECK: %[[DP:.+]] = gpt.softmax_grad
// CHECK: gpt.causal_mask %[[DP]] {fill = 0.000000e+00 : f32}
func.func @attention(%s: tensor<2x4x4xf32> {gpt.param = "scores"},
                     %t: tensor<2x4xi32> {gpt.input = "targets"}) -> (tensor<f32> {gpt.output = "loss"}) {
  %m = gpt.causal_mask %s : tensor<2x4x4xf32>
  %p = gpt.softmax %m : tensor<2x4x4xf32>
  %l = gpt.cross_entropy %p, %t : tensor<2x4x4xf32>, tensor<2x4xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Fused attention: one flash_attention_grad takes the forward's out and lse
// and gives all three input gradients; the row terms rowsum(dout ∘ out)
// come first, from gpt.attention_row_dot, as its delta.
// CHECK-LABEL: func.func @flash_grad
// CHECK: %[[O:.+]], %[[LSE:.+]] = gpt.flash_attention %[[Q:[^,]+]], %[[K:[^,]+]], %[[V:[^ ]+]] {causal, scale = 5.000000e-01 : f32}
// CHECK: %[[DO:.+]] = gpt.cross_entropy_grad
// CHECK: %[[D:.+]] = gpt.attention_row_dot %[[O]], %[[DO]] : tensor<1x2x4x4xf32> -> tensor<1x2x4xf32>
// CHECK: %[[DQ:.+]], %[[DK:.+]], %[[DV:.+]] = gpt.flash_attention_grad %[[Q]], %[[K]], %[[V]], %[[O]], %[[LSE]], %[[DO]], %[[D]] {causal, scale = 5.000000e-01 : f32}
// CHECK: return %{{.+}}, %[[DQ]], %[[DK]], %[[DV]]
func.func @flash(%q: tensor<1x2x4x4xf32> {gpt.param = "q"},
                 %k: tensor<1x2x4x4xf32> {gpt.param = "k"},
                 %v: tensor<1x2x4x4xf32> {gpt.param = "v"},
                 %t: tensor<1x2x4xi32> {gpt.input = "targets"}) -> (tensor<f32> {gpt.output = "loss"}) {
  %o, %lse = gpt.flash_attention %q, %k, %v {causal, scale = 0.5 : f32} : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32> -> tensor<1x2x4x4xf32>, tensor<1x2x4xf32>
  %l = gpt.cross_entropy %o, %t : tensor<1x2x4x4xf32>, tensor<1x2x4xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Packed attention: its gradient is packed too, one op giving d(qkv).
// CHECK-LABEL: func.func @flash_qkv_grad
// CHECK: %[[O:.+]], %[[LSE:.+]] = gpt.flash_attention_qkv %[[X:[^ ]+]] {causal, num_heads = 2 : i64, scale = 5.000000e-01 : f32}
// CHECK: %[[DO:.+]] = gpt.cross_entropy_grad
// CHECK: %[[D:.+]] = gpt.attention_row_dot %[[O]], %[[DO]] {num_heads = 2 : i64} : tensor<1x4x8xf32> -> tensor<1x2x4xf32>
// CHECK: %[[DX:.+]] = gpt.flash_attention_qkv_grad %[[X]], %[[O]], %[[LSE]], %[[DO]], %[[D]] {causal, num_heads = 2 : i64, scale = 5.000000e-01 : f32}
// CHECK: return %{{.+}}, %[[DX]]
func.func @flash_qkv(%x: tensor<1x4x24xf32> {gpt.param = "x"},
                     %t: tensor<1x4xi32> {gpt.input = "targets"}) -> (tensor<f32> {gpt.output = "loss"}) {
  %o, %lse = gpt.flash_attention_qkv %x {causal, num_heads = 2 : i64, scale = 0.5 : f32} : tensor<1x4x24xf32> -> tensor<1x4x8xf32>, tensor<1x2x4xf32>
  %l = gpt.cross_entropy %o, %t : tensor<1x4x8xf32>, tensor<1x4xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// The logsumexp is an output for the backward pass, not a differentiable one.
func.func @flash_lse_loss(%q: tensor<1x2x4x4xf32> {gpt.param = "q"}, %t: tensor<1x2xi32> {gpt.input = "targets"}) -> (tensor<f32> {gpt.output = "loss"}) {
  // expected-error @+1 {{'gpt.flash_attention' op has no gradient rule for its lse result (the loss depends on the logsumexp); only out is differentiable}}
  %o, %lse = gpt.flash_attention %q, %q, %q {causal, scale = 0.5 : f32} : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32> -> tensor<1x2x4x4xf32>, tensor<1x2x4xf32>
  %l = gpt.cross_entropy %lse, %t : tensor<1x2x4xf32>, tensor<1x2xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

func.func @flash_qkv_lse_loss(%x: tensor<1x4x24xf32> {gpt.param = "x"}, %t: tensor<1x2xi32> {gpt.input = "targets"}) -> (tensor<f32> {gpt.output = "loss"}) {
  // expected-error @+1 {{'gpt.flash_attention_qkv' op has no gradient rule for its lse result (the loss depends on the logsumexp); only out is differentiable}}
  %o, %lse = gpt.flash_attention_qkv %x {causal, num_heads = 2 : i64, scale = 0.5 : f32} : tensor<1x4x24xf32> -> tensor<1x4x8xf32>, tensor<1x2x4xf32>
  %l = gpt.cross_entropy %lse, %t : tensor<1x2x4xf32>, tensor<1x2xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A function without a loss is not differentiated.
// CHECK-LABEL: func.func @no_loss
// CHECK-NOT: func.func @no_loss_grad
func.func @no_loss(%x: tensor<4xf32> {gpt.param = "x"}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{gpt-autodiff: the loss must be a scalar tensor<f32>}}
func.func @vector_loss(%x: tensor<4xf32> {gpt.param = "x"}) -> (tensor<4xf32> {gpt.output = "loss"}) {
  %y = gpt.exp %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @no_rule(%x: tensor<2x4xf32> {gpt.param = "x"}, %t: tensor<2xi32> {gpt.input = "targets"}) -> (tensor<f32> {gpt.output = "loss"}) {
  %c = gpt.constant dense<0.0> : tensor<f32>
  // expected-error @+1 {{'gpt.max' op has no gradient rule}}
  %y = gpt.max %x, %c : tensor<2x4xf32>, tensor<f32> -> tensor<2x4xf32>
  %l = gpt.cross_entropy %y, %t : tensor<2x4xf32>, tensor<2xi32> -> tensor<f32>
  return %l : tensor<f32>
}
