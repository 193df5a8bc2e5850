// RUN: gptc-opt %s -split-input-file -gpt-attention-bias-grad -verify-diagnostics | FileCheck %s
// RUN: gptc-opt %s -split-input-file -gpt-attention-bias-grad -gpt-fuse-matmul-epilogue -gpt-fuse-elementwise | FileCheck %s --check-prefix=FUSED

// GPT-2's c_attn under bf16 (B=2, T=64, C=128, 4 heads), as gpt-autodiff
// leaves it: the bias gradient sums the widened dq|dk|dv. It becomes one
// gpt.attention_bias_grad of dq|dk|dv where the attention gradient wrote it
// (bf16: the op widens its terms) and dout: q's sums, zeros for k, dout's
// sums for v.
// CHECK-LABEL: func.func @packed_bf16
// CHECK: %[[G:.+]] = gpt.flash_attention_qkv_grad %arg0, %arg1, %arg2, %arg3, %arg4
// CHECK: %[[DB:.+]] = gpt.attention_bias_grad %[[G]], %arg3 : tensor<2x64x384xbf16>, tensor<2x64x128xbf16> -> tensor<384xf32>
// CHECK-NOT: gpt.reduce_sum
// CHECK-NOT: gpt.concat
// CHECK: return %[[DB]], %{{.+}} : tensor<384xf32>, tensor<128x384xf32>
// After the fusion passes the weight gradient is a plain GEMM (no BGRADA)
// and nothing else sums dq|dk|dv.
// FUSED-LABEL: func.func @packed_bf16
// FUSED-NOT: gpt.matmul_bias_grad
// FUSED: %[[G:.+]] = gpt.flash_attention_qkv_grad
// FUSED: gpt.attention_bias_grad %[[G]], %arg3 : tensor<2x64x384xbf16>, tensor<2x64x128xbf16> -> tensor<384xf32>
// FUSED-NOT: gpt.reduce_sum
// FUSED: gpt.matmul %{{.+}}, %{{.+}} {transpose_a} : tensor<128x128xbf16>, tensor<128x384xbf16> -> tensor<128x384xf32>
// FUSED-NOT: gpt.matmul_bias_grad
func.func @packed_bf16(%qkv: tensor<2x64x384xbf16>, %out: tensor<2x64x128xbf16>, %lse: tensor<2x4x64xf32>, %dout: tensor<2x64x128xbf16>, %delta: tensor<2x4x64xf32>, %x: tensor<128x128xbf16>) -> (tensor<384xf32>, tensor<128x384xf32>) {
  %g = gpt.flash_attention_qkv_grad %qkv, %out, %lse, %dout, %delta {causal, num_heads = 4 : i64, scale = 0.176776692 : f32} : tensor<2x64x384xbf16>, tensor<2x64x128xbf16>, tensor<2x4x64xf32>, tensor<2x4x64xf32>
  %w = gpt.cast %g : tensor<2x64x384xbf16> -> tensor<2x64x384xf32>
  %db = gpt.reduce_sum %w : tensor<2x64x384xf32> -> tensor<384xf32>
  %n = gpt.cast %w : tensor<2x64x384xf32> -> tensor<2x64x384xbf16>
  %b = gpt.reshape %n : tensor<2x64x384xbf16> -> tensor<128x384xbf16>
  %dwl = gpt.matmul %x, %b {transpose_a} : tensor<128x128xbf16>, tensor<128x384xbf16> -> tensor<128x384xbf16>
  %dw = gpt.cast %dwl : tensor<128x384xbf16> -> tensor<128x384xf32>
  return %db, %dw : tensor<384xf32>, tensor<128x384xf32>
}

// -----

// fp32, not causal, and dq|dk|dv summed through a reshape to rows: the
// same identities, the op reading the attention gradient itself; a second
// block's bias gradient is its own op.
// CHECK-LABEL: func.func @packed_fp32_rows
// CHECK: %[[G:.+]] = gpt.flash_attention_qkv_grad
// CHECK: gpt.attention_bias_grad %[[G]], %arg3 : tensor<1x8x96xf32>, tensor<1x8x32xf32> -> tensor<96xf32>
// CHECK: %[[G2:.+]] = gpt.flash_attention_qkv_grad
// CHECK: gpt.attention_bias_grad %[[G2]], %arg1 : tensor<1x8x96xf32>, tensor<1x8x32xf32> -> tensor<96xf32>
// CHECK-NOT: gpt.reduce_sum
func.func @packed_fp32_rows(%qkv: tensor<1x8x96xf32>, %out: tensor<1x8x32xf32>, %lse: tensor<1x2x8xf32>, %dout: tensor<1x8x32xf32>) -> (tensor<96xf32>, tensor<96xf32>) {
  %g = gpt.flash_attention_qkv_grad %qkv, %out, %lse, %dout {num_heads = 2 : i64, scale = 0.25 : f32} : tensor<1x8x96xf32>, tensor<1x8x32xf32>, tensor<1x2x8xf32>
  %rows = gpt.reshape %g : tensor<1x8x96xf32> -> tensor<8x96xf32>
  %db = gpt.reduce_sum %rows : tensor<8x96xf32> -> tensor<96xf32>
  %g2 = gpt.flash_attention_qkv_grad %qkv, %out, %lse, %out {num_heads = 2 : i64, scale = 0.25 : f32} : tensor<1x8x96xf32>, tensor<1x8x32xf32>, tensor<1x2x8xf32>
  %db2 = gpt.reduce_sum %g2 : tensor<1x8x96xf32> -> tensor<96xf32>
  return %db, %db2 : tensor<96xf32>, tensor<96xf32>
}

// -----

// Not a bias gradient (the sums over the batch only, per position), and a
// sum of something that is not an attention gradient: left alone.
// CHECK-LABEL: func.func @not_bias_gradients
// CHECK: gpt.reduce_sum %{{.+}} : tensor<2x8x96xf32> -> tensor<8x96xf32>
// CHECK: gpt.reduce_sum %arg4 : tensor<2x8x96xf32> -> tensor<96xf32>
// CHECK-NOT: gpt.attention_bias_grad
func.func @not_bias_gradients(%qkv: tensor<2x8x96xf32>, %out: tensor<2x8x32xf32>, %lse: tensor<2x2x8xf32>, %dout: tensor<2x8x32xf32>, %other: tensor<2x8x96xf32>) -> (tensor<8x96xf32>, tensor<96xf32>) {
  %g = gpt.flash_attention_qkv_grad %qkv, %out, %lse, %dout {causal, num_heads = 2 : i64, scale = 0.25 : f32} : tensor<2x8x96xf32>, tensor<2x8x32xf32>, tensor<2x2x8xf32>
  %perPosition = gpt.reduce_sum %g : tensor<2x8x96xf32> -> tensor<8x96xf32>
  %db = gpt.reduce_sum %other : tensor<2x8x96xf32> -> tensor<96xf32>
  return %perPosition, %db : tensor<8x96xf32>, tensor<96xf32>
}

// -----

// Sums of a narrowed (or same-width: bf16 to f16) copy of dq|dk|dv are
// not its sums: left alone.
// CHECK-LABEL: func.func @rounded_copies
// CHECK: gpt.reduce_sum %{{.+}} : tensor<1x8x96xbf16> -> tensor<96xbf16>
// CHECK: gpt.reduce_sum %{{.+}} : tensor<1x8x96xf16> -> tensor<96xf16>
// CHECK-NOT: gpt.attention_bias_grad
func.func @rounded_copies(%qkv: tensor<1x8x96xf32>, %out: tensor<1x8x32xf32>, %lse: tensor<1x2x8xf32>, %dout: tensor<1x8x32xf32>, %qkv16: tensor<1x8x96xbf16>, %out16: tensor<1x8x32xbf16>, %dout16: tensor<1x8x32xbf16>) -> (tensor<96xbf16>, tensor<96xf16>) {
  %g = gpt.flash_attention_qkv_grad %qkv, %out, %lse, %dout {causal, num_heads = 2 : i64, scale = 0.25 : f32} : tensor<1x8x96xf32>, tensor<1x8x32xf32>, tensor<1x2x8xf32>
  %n = gpt.cast %g : tensor<1x8x96xf32> -> tensor<1x8x96xbf16>
  %db = gpt.reduce_sum %n : tensor<1x8x96xbf16> -> tensor<96xbf16>
  %g16 = gpt.flash_attention_qkv_grad %qkv16, %out16, %lse, %dout16 {causal, num_heads = 2 : i64, scale = 0.25 : f32} : tensor<1x8x96xbf16>, tensor<1x8x32xbf16>, tensor<1x2x8xf32>
  %h = gpt.cast %g16 : tensor<1x8x96xbf16> -> tensor<1x8x96xf16>
  %dh = gpt.reduce_sum %h : tensor<1x8x96xf16> -> tensor<96xf16>
  return %db, %dh : tensor<96xbf16>, tensor<96xf16>
}

// -----

// GPT-2's dout is c_proj's output gradient times its weight, a GEMM's
// product: the op reads it where that GEMM wrote it (c_proj's bias
// gradient, dy's sums, is its own reduction).
// CHECK-LABEL: func.func @through_projection
// CHECK: %[[CB:.+]] = gpt.reduce_sum %arg4 : tensor<2x64x128xf32> -> tensor<128xf32>
// CHECK: %[[DOUT:.+]] = gpt.matmul
// CHECK: %[[G:.+]] = gpt.flash_attention_qkv_grad %arg0, %arg1, %arg2, %[[DOUT]], %arg3
// CHECK: gpt.attention_bias_grad %[[G]], %[[DOUT]] : tensor<2x64x384xbf16>, tensor<2x64x128xbf16> -> tensor<384xf32>
// CHECK-NOT: gpt.reduce_sum
func.func @through_projection(%qkv: tensor<2x64x384xbf16>, %out: tensor<2x64x128xbf16>, %lse: tensor<2x4x64xf32>, %delta: tensor<2x4x64xf32>, %dy: tensor<2x64x128xf32>, %w: tensor<128x128xf32>) -> (tensor<128xf32>, tensor<384xf32>) {
  %cb = gpt.reduce_sum %dy : tensor<2x64x128xf32> -> tensor<128xf32>
  %dy16 = gpt.cast %dy : tensor<2x64x128xf32> -> tensor<2x64x128xbf16>
  %w16 = gpt.cast %w : tensor<128x128xf32> -> tensor<128x128xbf16>
  %dout = gpt.matmul %dy16, %w16 {transpose_b} : tensor<2x64x128xbf16>, tensor<128x128xbf16> -> tensor<2x64x128xbf16>
  %g = gpt.flash_attention_qkv_grad %qkv, %out, %lse, %dout, %delta {causal, num_heads = 4 : i64, scale = 0.176776692 : f32} : tensor<2x64x384xbf16>, tensor<2x64x128xbf16>, tensor<2x4x64xf32>, tensor<2x4x64xf32>
  %wg = gpt.cast %g : tensor<2x64x384xbf16> -> tensor<2x64x384xf32>
  %db = gpt.reduce_sum %wg : tensor<2x64x384xf32> -> tensor<384xf32>
  return %cb, %db : tensor<128xf32>, tensor<384xf32>
}
