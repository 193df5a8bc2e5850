// RUN: gptc-opt %s -split-input-file -gpt-mixed-precision=policy=bf16 | FileCheck %s --check-prefix=BF16
// RUN: gptc-opt %s -split-input-file -gpt-mixed-precision=policy=fp16 | FileCheck %s --check-prefix=FP16
// RUN: gptc-opt %s -split-input-file -gpt-mixed-precision=policy=tf32 | FileCheck %s --check-prefix=TF32
// RUN: gptc-opt %s -split-input-file -gpt-mixed-precision=policy=fp32 | FileCheck %s --check-prefix=FP32
// RUN: gptc-opt %s -split-input-file -gpt-mixed-precision=policy=fp16 -gpt-autodiff | FileCheck %s --check-prefix=GRAD
// RUN: not gptc-opt %s -split-input-file -gpt-mixed-precision=policy=fp8 2>&1 | FileCheck %s --check-prefix=BAD

// BAD: error: gpt-mixed-precision: unknown policy 'fp8' (expected fp32, tf32, bf16 or fp16)

// A linear layer: operands narrowed, the product in bf16, widened back for
// the bias add and the loss, which stay float32.
// BF16: module attributes {gpt.precision = "bf16"}
// BF16-LABEL: func.func @linear
// BF16-SAME: %[[X:.+]]: tensor<2x3x4xf32>, %[[W:.+]]: tensor<4x8xf32> {gpt.param = "w"}
// BF16-DAG: %[[WL:.+]] = gpt.cast %[[W]] : tensor<4x8xf32> -> tensor<4x8xbf16>
// BF16-DAG: %[[XL:.+]] = gpt.cast %[[X]] : tensor<2x3x4xf32> -> tensor<2x3x4xbf16>
// BF16: %[[Y:.+]] = gpt.matmul %[[XL]], %[[WL]] : tensor<2x3x4xbf16>, tensor<4x8xbf16> -> tensor<2x3x8xbf16>
// BF16: %[[YW:.+]] = gpt.cast %[[Y]] : tensor<2x3x8xbf16> -> tensor<2x3x8xf32>
// BF16: %[[Z:.+]] = gpt.add %[[YW]], %{{.+}} : tensor<2x3x8xf32>, tensor<8xf32>
// BF16: gpt.cross_entropy %[[Z]]
// FP16: module attributes {gpt.precision = "fp16"}
// FP16-LABEL: func.func @linear
// FP16-SAME: gpt.loss_scaling
// FP16: gpt.matmul %{{.+}}, %{{.+}} : tensor<2x3x4xf16>, tensor<4x8xf16> -> tensor<2x3x8xf16>
// TF32: module attributes {gpt.precision = "tf32"}
// TF32-LABEL: func.func @linear
// TF32-NOT: gpt.cast
// TF32: gpt.matmul %{{.+}}, %{{.+}} : tensor<2x3x4xf32>, tensor<4x8xf32> -> tensor<2x3x8xf32>
// FP32-NOT: gpt.precision
// FP32-LABEL: func.func @linear
// FP32-NOT: gpt.cast
// The fp16 gradient function takes the loss scale as its backward seed and
// returns float32 gradients through the casts.
// GRAD-LABEL: func.func @linear_grad
// GRAD-SAME: %[[S:[^:]+]]: tensor<f32> {gpt.hyper = "loss_scale"}
// GRAD-SAME: -> (tensor<f32> {gpt.output = "loss"}, tensor<4x8xf32> {gpt.grad = "w"}, tensor<8xf32> {gpt.grad = "b"})
// GRAD: gpt.cross_entropy_grad %{{.+}}, %{{.+}}, %[[S]]
// GRAD: %[[DW:.+]] = gpt.matmul {{.+}} -> tensor<4x8xf16>
// GRAD: %[[DW32:.+]] = gpt.cast %[[DW]] : tensor<4x8xf16> -> tensor<4x8xf32>
// GRAD: return %{{.+}}, %[[DW32]]
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

// Attention: q, k, v narrowed once each, out widened, lse stays float32. A
// value read by two matmuls gets one bf16 copy.
// BF16-LABEL: func.func @attention
// BF16-SAME: %[[Q:[^:]+]]: tensor<1x2x8x4xf32>
// BF16: %[[QL:.+]] = gpt.cast %[[Q]] : tensor<1x2x8x4xf32> -> tensor<1x2x8x4xbf16>
// BF16-NOT: gpt.cast %[[Q]]
// BF16: %[[O:.+]], %[[LSE:.+]] = gpt.flash_attention %[[QL]], %[[QL]], %[[QL]] {causal, scale = 5.000000e-01 : f32} : tensor<1x2x8x4xbf16>, tensor<1x2x8x4xbf16>, tensor<1x2x8x4xbf16> -> tensor<1x2x8x4xbf16>, tensor<1x2x8xf32>
// BF16: gpt.cast %[[O]] : tensor<1x2x8x4xbf16> -> tensor<1x2x8x4xf32>
func.func @attention(%q: tensor<1x2x8x4xf32> {gpt.param = "q"}, %t: tensor<1x2x8xi32> {gpt.input = "targets"}) -> (tensor<f32> {gpt.output = "loss"}, tensor<1x2x8xf32>) {
  %o, %lse = gpt.flash_attention %q, %q, %q {causal, scale = 0.5 : f32} : tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32> -> tensor<1x2x8x4xf32>, tensor<1x2x8xf32>
  %l = gpt.cross_entropy %o, %t : tensor<1x2x8x4xf32>, tensor<1x2x8xi32> -> tensor<f32>
  return %l, %lse : tensor<f32>, tensor<1x2x8xf32>
}

// -----

// Packed attention: one cast on the [B, T, 3C] input, out bf16 and widened,
// lse float32.
// BF16-LABEL: func.func @attention_qkv
// BF16-SAME: %[[X:[^:]+]]: tensor<1x8x24xf32>
// BF16: %[[XL:.+]] = gpt.cast %[[X]] : tensor<1x8x24xf32> -> tensor<1x8x24xbf16>
// BF16-NOT: gpt.cast %[[X]]
// BF16: %[[O:.+]], %[[LSE:.+]] = gpt.flash_attention_qkv %[[XL]] {causal, num_heads = 2 : i64, scale = 5.000000e-01 : f32} : tensor<1x8x24xbf16> -> tensor<1x8x8xbf16>, tensor<1x2x8xf32>
// BF16: gpt.cast %[[O]] : tensor<1x8x8xbf16> -> tensor<1x8x8xf32>
// BF16: return %{{.+}}, %[[LSE]]
func.func @attention_qkv(%x: tensor<1x8x24xf32> {gpt.param = "x"}, %t: tensor<1x8xi32> {gpt.input = "targets"}) -> (tensor<f32> {gpt.output = "loss"}, tensor<1x2x8xf32>) {
  %o, %lse = gpt.flash_attention_qkv %x {causal, num_heads = 2 : i64, scale = 0.5 : f32} : tensor<1x8x24xf32> -> tensor<1x8x8xf32>, tensor<1x2x8xf32>
  %l = gpt.cross_entropy %o, %t : tensor<1x8x8xf32>, tensor<1x8xi32> -> tensor<f32>
  return %l, %lse : tensor<f32>, tensor<1x2x8xf32>
}

// -----

// Functions without a loss (the update, helpers) and matmuls that are
// already low-precision are left alone.
// BF16-LABEL: func.func @no_loss
// BF16-NOT: gpt.cast
// BF16: return
// BF16-LABEL: func.func @already_bf16
// BF16-NOT: gpt.cast
// BF16: gpt.matmul %{{.+}}, %{{.+}} : tensor<2x2xbf16>, tensor<2x2xbf16> -> tensor<2x2xf32>
func.func @no_loss(%a: tensor<2x2xf32>) -> tensor<2x2xf32> {
  %y = gpt.matmul %a, %a : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<2x2xf32>
  return %y : tensor<2x2xf32>
}
func.func @already_bf16(%a: tensor<2x2xbf16>, %t: tensor<2xi32> {gpt.input = "targets"}) -> (tensor<f32> {gpt.output = "loss"}) {
  %y = gpt.matmul %a, %a : tensor<2x2xbf16>, tensor<2x2xbf16> -> tensor<2x2xf32>
  %l = gpt.cross_entropy %y, %t : tensor<2x2xf32>, tensor<2xi32> -> tensor<f32>
  return %l : tensor<f32>
}
