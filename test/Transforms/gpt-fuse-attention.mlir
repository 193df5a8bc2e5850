// RUN: gptc-opt %s -split-input-file -gpt-fuse-attention -verify-diagnostics | FileCheck %s

// GPT-2's spelling (models/gpt2.cpp): q, k and v split from c_attn's
// [B, T, 3C] output, heads split by reshape + transpose, q·kᵀ as
// transpose_b, times 1/√d, gpt.causal_mask, softmax, ·v, heads merged
// again. All of it becomes one op on the packed tensor: the split, the head
// transposes, the merge and the constant go.
// CHECK-LABEL: func.func @gpt2
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x4x24xf32>)
// CHECK-NEXT: %[[Y:.+]], %{{.+}} = gpt.flash_attention_qkv %[[X]] {causal, num_heads = 2 : i64, scale = 5.000000e-01 : f32} : tensor<2x4x24xf32> -> tensor<2x4x8xf32>, tensor<2x2x4xf32>
// CHECK-NEXT: return %[[Y]]
func.func @gpt2(%x: tensor<2x4x24xf32>) -> tensor<2x4x8xf32> {
  %q0, %k0, %v0 = gpt.split %x {axis = 2} : tensor<2x4x24xf32> -> tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  %q1 = gpt.reshape %q0 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %q = gpt.transpose %q1 [0, 2, 1, 3] : tensor<2x4x2x4xf32> -> tensor<2x2x4x4xf32>
  %k1 = gpt.reshape %k0 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %k = gpt.transpose %k1 [0, 2, 1, 3] : tensor<2x4x2x4xf32> -> tensor<2x2x4x4xf32>
  %v1 = gpt.reshape %v0 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %v = gpt.transpose %v1 [0, 2, 1, 3] : tensor<2x4x2x4xf32> -> tensor<2x2x4x4xf32>
  %s = gpt.matmul %q, %k {transpose_b} : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32> -> tensor<2x2x4x4xf32>
  %c = gpt.constant dense<0.5> : tensor<f32>
  %ss = gpt.mul %s, %c : tensor<2x2x4x4xf32>, tensor<f32> -> tensor<2x2x4x4xf32>
  %m = gpt.causal_mask %ss : tensor<2x2x4x4xf32>
  %p = gpt.softmax %m : tensor<2x2x4x4xf32>
  %o = gpt.matmul %p, %v : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32> -> tensor<2x2x4x4xf32>
  %ot = gpt.transpose %o [0, 2, 1, 3] : tensor<2x2x4x4xf32> -> tensor<2x4x2x4xf32>
  %y = gpt.reshape %ot : tensor<2x4x2x4xf32> -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// k and q swapped in the split: still attention, on the [B, H, T, D] heads
// as they are.
// CHECK-LABEL: func.func @packed_wrong_order
// CHECK: gpt.split
// CHECK: %[[O:.+]], %{{.+}} = gpt.flash_attention %{{.+}}, %{{.+}}, %{{.+}} {causal, scale = 5.000000e-01 : f32}
// CHECK: gpt.transpose %[[O]] [0, 2, 1, 3]
// CHECK-NOT: gpt.flash_attention_qkv
func.func @packed_wrong_order(%x: tensor<2x4x24xf32>) -> tensor<2x4x8xf32> {
  %q0, %k0, %v0 = gpt.split %x {axis = 2} : tensor<2x4x24xf32> -> tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  %q1 = gpt.reshape %k0 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %q = gpt.transpose %q1 [0, 2, 1, 3] : tensor<2x4x2x4xf32> -> tensor<2x2x4x4xf32>
  %k1 = gpt.reshape %q0 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %k = gpt.transpose %k1 [0, 2, 1, 3] : tensor<2x4x2x4xf32> -> tensor<2x2x4x4xf32>
  %v1 = gpt.reshape %v0 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %v = gpt.transpose %v1 [0, 2, 1, 3] : tensor<2x4x2x4xf32> -> tensor<2x2x4x4xf32>
  %s = gpt.matmul %q, %k {transpose_b} : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32> -> tensor<2x2x4x4xf32>
  %c = gpt.constant dense<0.5> : tensor<f32>
  %ss = gpt.mul %s, %c : tensor<2x2x4x4xf32>, tensor<f32> -> tensor<2x2x4x4xf32>
  %m = gpt.causal_mask %ss : tensor<2x2x4x4xf32>
  // expected-remark @+1 {{did not pack attention: q, k and v are parts #1, #0 and #2 of the split, not #0, #1 and #2}}
  %p = gpt.softmax %m : tensor<2x2x4x4xf32>
  %o = gpt.matmul %p, %v : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32> -> tensor<2x2x4x4xf32>
  %ot = gpt.transpose %o [0, 2, 1, 3] : tensor<2x2x4x4xf32> -> tensor<2x4x2x4xf32>
  %y = gpt.reshape %ot : tensor<2x4x2x4xf32> -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// Heads taken with another permutation ([H, B, T, D], batch and heads
// swapped): attention over the same positions, but not the packed layout.
// CHECK-LABEL: func.func @packed_other_permutation
// CHECK: gpt.flash_attention %{{.+}}, %{{.+}}, %{{.+}} {causal, scale = 5.000000e-01 : f32}
// CHECK-NOT: gpt.flash_attention_qkv
func.func @packed_other_permutation(%x: tensor<2x4x24xf32>) -> tensor<2x4x8xf32> {
  %q0, %k0, %v0 = gpt.split %x {axis = 2} : tensor<2x4x24xf32> -> tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  %q1 = gpt.reshape %q0 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %q = gpt.transpose %q1 [2, 0, 1, 3] : tensor<2x4x2x4xf32> -> tensor<2x2x4x4xf32>
  %k1 = gpt.reshape %k0 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %k = gpt.transpose %k1 [2, 0, 1, 3] : tensor<2x4x2x4xf32> -> tensor<2x2x4x4xf32>
  %v1 = gpt.reshape %v0 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %v = gpt.transpose %v1 [2, 0, 1, 3] : tensor<2x4x2x4xf32> -> tensor<2x2x4x4xf32>
  %s = gpt.matmul %q, %k {transpose_b} : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32> -> tensor<2x2x4x4xf32>
  %c = gpt.constant dense<0.5> : tensor<f32>
  %ss = gpt.mul %s, %c : tensor<2x2x4x4xf32>, tensor<f32> -> tensor<2x2x4x4xf32>
  %m = gpt.causal_mask %ss : tensor<2x2x4x4xf32>
  // expected-remark @+1 {{did not pack attention: q's heads are permuted by [2, 0, 1, 3], not [0, 2, 1, 3]}}
  %p = gpt.softmax %m : tensor<2x2x4x4xf32>
  %o = gpt.matmul %p, %v : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32> -> tensor<2x2x4x4xf32>
  %ot = gpt.transpose %o [1, 2, 0, 3] : tensor<2x2x4x4xf32> -> tensor<2x4x2x4xf32>
  %y = gpt.reshape %ot : tensor<2x4x2x4xf32> -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// q, k and v split along the batch axis, not the channels.
// CHECK-LABEL: func.func @packed_split_axis
// CHECK: gpt.flash_attention %{{.+}}, %{{.+}}, %{{.+}} {causal, scale = 5.000000e-01 : f32}
// CHECK-NOT: gpt.flash_attention_qkv
func.func @packed_split_axis(%x: tensor<6x4x8xf32>) -> tensor<2x4x8xf32> {
  %q0, %k0, %v0 = gpt.split %x {axis = 0} : tensor<6x4x8xf32> -> tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  %q1 = gpt.reshape %q0 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %q = gpt.transpose %q1 [0, 2, 1, 3] : tensor<2x4x2x4xf32> -> tensor<2x2x4x4xf32>
  %k1 = gpt.reshape %k0 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %k = gpt.transpose %k1 [0, 2, 1, 3] : tensor<2x4x2x4xf32> -> tensor<2x2x4x4xf32>
  %v1 = gpt.reshape %v0 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %v = gpt.transpose %v1 [0, 2, 1, 3] : tensor<2x4x2x4xf32> -> tensor<2x2x4x4xf32>
  %s = gpt.matmul %q, %k {transpose_b} : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32> -> tensor<2x2x4x4xf32>
  %c = gpt.constant dense<0.5> : tensor<f32>
  %ss = gpt.mul %s, %c : tensor<2x2x4x4xf32>, tensor<f32> -> tensor<2x2x4x4xf32>
  %m = gpt.causal_mask %ss : tensor<2x2x4x4xf32>
  // expected-remark @+1 {{did not pack attention: q, k and v are split along axis 0 of a rank-3 tensor, not the last axis of [B, T, 3C]}}
  %p = gpt.softmax %m : tensor<2x2x4x4xf32>
  %o = gpt.matmul %p, %v : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32> -> tensor<2x2x4x4xf32>
  %ot = gpt.transpose %o [0, 2, 1, 3] : tensor<2x2x4x4xf32> -> tensor<2x4x2x4xf32>
  %y = gpt.reshape %ot : tensor<2x4x2x4xf32> -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// q and k from one split, v from another.
// CHECK-LABEL: func.func @packed_two_splits
// CHECK: gpt.flash_attention %{{.+}}, %{{.+}}, %{{.+}} {causal, scale = 5.000000e-01 : f32}
// CHECK-NOT: gpt.flash_attention_qkv
func.func @packed_two_splits(%x: tensor<2x4x24xf32>, %w: tensor<2x4x24xf32>) -> tensor<2x4x8xf32> {
  %q0, %k0, %v0 = gpt.split %x {axis = 2} : tensor<2x4x24xf32> -> tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  %a0, %b0, %c0 = gpt.split %w {axis = 2} : tensor<2x4x24xf32> -> tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  %q1 = gpt.reshape %q0 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %q = gpt.transpose %q1 [0, 2, 1, 3] : tensor<2x4x2x4xf32> -> tensor<2x2x4x4xf32>
  %k1 = gpt.reshape %k0 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %k = gpt.transpose %k1 [0, 2, 1, 3] : tensor<2x4x2x4xf32> -> tensor<2x2x4x4xf32>
  %v1 = gpt.reshape %c0 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %v = gpt.transpose %v1 [0, 2, 1, 3] : tensor<2x4x2x4xf32> -> tensor<2x2x4x4xf32>
  %s = gpt.matmul %q, %k {transpose_b} : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32> -> tensor<2x2x4x4xf32>
  %c = gpt.constant dense<0.5> : tensor<f32>
  %ss = gpt.mul %s, %c : tensor<2x2x4x4xf32>, tensor<f32> -> tensor<2x2x4x4xf32>
  %m = gpt.causal_mask %ss : tensor<2x2x4x4xf32>
  // expected-remark @+1 {{did not pack attention: q, k and v come from different gpt.split ops}}
  %p = gpt.softmax %m : tensor<2x2x4x4xf32>
  %o = gpt.matmul %p, %v : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32> -> tensor<2x2x4x4xf32>
  %ot = gpt.transpose %o [0, 2, 1, 3] : tensor<2x2x4x4xf32> -> tensor<2x4x2x4xf32>
  %y = gpt.reshape %ot : tensor<2x4x2x4xf32> -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// The output stays [B, H, T, D] (returned as it is): the op must produce
// that layout, so it is the [B, H, T, D] one.
// CHECK-LABEL: func.func @packed_output_not_merged
// CHECK: %[[O:.+]], %{{.+}} = gpt.flash_attention %{{.+}}, %{{.+}}, %{{.+}} {causal, scale = 5.000000e-01 : f32}
// CHECK-NEXT: return %[[O]]
func.func @packed_output_not_merged(%x: tensor<2x4x24xf32>) -> tensor<2x2x4x4xf32> {
  %q0, %k0, %v0 = gpt.split %x {axis = 2} : tensor<2x4x24xf32> -> tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  %q1 = gpt.reshape %q0 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %q = gpt.transpose %q1 [0, 2, 1, 3] : tensor<2x4x2x4xf32> -> tensor<2x2x4x4xf32>
  %k1 = gpt.reshape %k0 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %k = gpt.transpose %k1 [0, 2, 1, 3] : tensor<2x4x2x4xf32> -> tensor<2x2x4x4xf32>
  %v1 = gpt.reshape %v0 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
  %v = gpt.transpose %v1 [0, 2, 1, 3] : tensor<2x4x2x4xf32> -> tensor<2x2x4x4xf32>
  %s = gpt.matmul %q, %k {transpose_b} : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32> -> tensor<2x2x4x4xf32>
  %c = gpt.constant dense<0.5> : tensor<f32>
  %ss = gpt.mul %s, %c : tensor<2x2x4x4xf32>, tensor<f32> -> tensor<2x2x4x4xf32>
  %m = gpt.causal_mask %ss : tensor<2x2x4x4xf32>
  // expected-remark @+1 {{did not pack attention: the output is not merged back into [B, T, C] by transpose [0, 2, 1, 3] and reshape, and nothing else}}
  %p = gpt.softmax %m : tensor<2x2x4x4xf32>
  %o = gpt.matmul %p, %v : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32> -> tensor<2x2x4x4xf32>
  return %o : tensor<2x2x4x4xf32>
}

// -----

// The scale on q before the matmul (a constant on the left of the mul).
// CHECK-LABEL: func.func @scale_on_q
// CHECK-SAME: (%[[Q:[^:]+]]: tensor<2x2x4x4xf32>, %[[K:[^:]+]]: tensor<2x2x4x4xf32>, %[[V:[^:]+]]: tensor<2x2x4x4xf32>)
// CHECK-NEXT: %[[O:.+]], %{{.+}} = gpt.flash_attention %[[Q]], %[[K]], %[[V]] {causal, scale = 5.000000e-01 : f32}
// CHECK-NEXT: return %[[O]]
func.func @scale_on_q(%q: tensor<2x2x4x4xf32>, %k: tensor<2x2x4x4xf32>, %v: tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32> {
  %c = gpt.constant dense<0.5> : tensor<f32>
  %qs = gpt.mul %c, %q : tensor<f32>, tensor<2x2x4x4xf32> -> tensor<2x2x4x4xf32>
  %s = gpt.matmul %qs, %k {transpose_b} : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32> -> tensor<2x2x4x4xf32>
  %m = gpt.causal_mask %s : tensor<2x2x4x4xf32>
  %p = gpt.softmax %m : tensor<2x2x4x4xf32>
  %o = gpt.matmul %p, %v : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32> -> tensor<2x2x4x4xf32>
  return %o : tensor<2x2x4x4xf32>
}

// -----

// Divided by √d, after the mask; k transposed explicitly; head size 8.
// CHECK-LABEL: func.func @div_after_mask_explicit_transpose
// CHECK-SAME: (%[[Q:[^:]+]]: tensor<2x2x4x8xf32>, %[[K:[^:]+]]: tensor<2x2x4x8xf32>, %[[V:[^:]+]]: tensor<2x2x4x8xf32>)
// CHECK-NEXT: %[[O:.+]], %{{.+}} = gpt.flash_attention %[[Q]], %[[K]], %[[V]] {causal, scale = 0.353553385 : f32}
// CHECK-NEXT: return %[[O]]
func.func @div_after_mask_explicit_transpose(%q: tensor<2x2x4x8xf32>, %k: tensor<2x2x4x8xf32>, %v: tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32> {
  %kt = gpt.transpose %k [0, 1, 3, 2] : tensor<2x2x4x8xf32> -> tensor<2x2x8x4xf32>
  %s = gpt.matmul %q, %kt : tensor<2x2x4x8xf32>, tensor<2x2x8x4xf32> -> tensor<2x2x4x4xf32>
  %m = gpt.causal_mask %s : tensor<2x2x4x4xf32>
  %sqrt_d = gpt.constant dense<2.82842712> : tensor<f32>
  %ms = gpt.div %m, %sqrt_d : tensor<2x2x4x4xf32>, tensor<f32> -> tensor<2x2x4x4xf32>
  %p = gpt.softmax %ms : tensor<2x2x4x4xf32>
  %o = gpt.matmul %p, %v : tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32> -> tensor<2x2x4x8xf32>
  return %o : tensor<2x2x4x8xf32>
}

// -----

// d^-1/4 on q and on kᵀ (the factors multiply), and the causal mask as an
// additive constant, broadcast over batch and heads.
// CHECK-LABEL: func.func @additive_mask_split_scale
// CHECK-SAME: (%[[Q:[^:]+]]: tensor<2x2x4x4xf32>, %[[K:[^:]+]]: tensor<2x2x4x4xf32>, %[[V:[^:]+]]: tensor<2x2x4x4xf32>)
// The scale is the product of the factors, 0.707106769² in float.
// CHECK-NEXT: %[[O:.+]], %{{.+}} = gpt.flash_attention %[[Q]], %[[K]], %[[V]] {causal, scale = 0.49999997 : f32}
// CHECK-NEXT: return %[[O]]
func.func @additive_mask_split_scale(%q: tensor<2x2x4x4xf32>, %k: tensor<2x2x4x4xf32>, %v: tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32> {
  %c = gpt.constant dense<0.707106769> : tensor<f32>
  %qs = gpt.mul %q, %c : tensor<2x2x4x4xf32>, tensor<f32> -> tensor<2x2x4x4xf32>
  %kt = gpt.transpose %k [0, 1, 3, 2] : tensor<2x2x4x4xf32> -> tensor<2x2x4x4xf32>
  %kts = gpt.mul %kt, %c : tensor<2x2x4x4xf32>, tensor<f32> -> tensor<2x2x4x4xf32>
  %s = gpt.matmul %qs, %kts : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32> -> tensor<2x2x4x4xf32>
  %mask = gpt.constant dense<[[0.0, 0xFF800000, 0xFF800000, 0xFF800000],
                              [0.0, 0.0, 0xFF800000, 0xFF800000],
                              [0.0, 0.0, 0.0, 0xFF800000],
                              [0.0, 0.0, 0.0, 0.0]]> : tensor<4x4xf32>
  %m = gpt.add %s, %mask : tensor<2x2x4x4xf32>, tensor<4x4xf32> -> tensor<2x2x4x4xf32>
  %p = gpt.softmax %m : tensor<2x2x4x4xf32>
  %o = gpt.matmul %p, %v : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32> -> tensor<2x2x4x4xf32>
  return %o : tensor<2x2x4x4xf32>
}

// -----

// No mask: still exactly attention, with causal = false; here cross
// attention, 3 queries against 6 keys.
// CHECK-LABEL: func.func @no_mask
// CHECK-SAME: (%[[Q:[^:]+]]: tensor<2x2x3x4xf32>, %[[K:[^:]+]]: tensor<2x2x6x4xf32>, %[[V:[^:]+]]: tensor<2x2x6x4xf32>)
// CHECK-NEXT: %[[O:.+]], %{{.+}} = gpt.flash_attention %[[Q]], %[[K]], %[[V]] {scale = 5.000000e-01 : f32} : tensor<2x2x3x4xf32>, tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32> -> tensor<2x2x3x4xf32>, tensor<2x2x3xf32>
// CHECK-NEXT: return %[[O]]
func.func @no_mask(%q: tensor<2x2x3x4xf32>, %k: tensor<2x2x6x4xf32>, %v: tensor<2x2x6x4xf32>) -> tensor<2x2x3x4xf32> {
  %s = gpt.matmul %q, %k {transpose_b} : tensor<2x2x3x4xf32>, tensor<2x2x6x4xf32> -> tensor<2x2x3x6xf32>
  %c = gpt.constant dense<0.5> : tensor<f32>
  %ss = gpt.mul %s, %c : tensor<2x2x3x6xf32>, tensor<f32> -> tensor<2x2x3x6xf32>
  %p = gpt.softmax %ss : tensor<2x2x3x6xf32>
  %o = gpt.matmul %p, %v : tensor<2x2x3x6xf32>, tensor<2x2x6x4xf32> -> tensor<2x2x3x4xf32>
  return %o : tensor<2x2x3x4xf32>
}

// -----

// Heads folded into the batch ([B·H, T, D]) by a reshape of [B, H, T, D]
// tensors: the op takes those tensors, and its output is folded back.
// CHECK-LABEL: func.func @folded_heads
// CHECK-SAME: (%[[Q:[^:]+]]: tensor<2x3x4x4xf32>, %[[K:[^:]+]]: tensor<2x3x4x4xf32>, %[[V:[^:]+]]: tensor<2x3x4x4xf32>)
// CHECK-NEXT: %[[O:.+]], %{{.+}} = gpt.flash_attention %[[Q]], %[[K]], %[[V]] {causal, scale = 5.000000e-01 : f32} : tensor<2x3x4x4xf32>
// CHECK-NEXT: %[[Y:.+]] = gpt.reshape %[[O]] : tensor<2x3x4x4xf32> -> tensor<6x4x4xf32>
// CHECK-NEXT: return %[[Y]]
func.func @folded_heads(%q4: tensor<2x3x4x4xf32>, %k4: tensor<2x3x4x4xf32>, %v4: tensor<2x3x4x4xf32>) -> tensor<6x4x4xf32> {
  %q = gpt.reshape %q4 : tensor<2x3x4x4xf32> -> tensor<6x4x4xf32>
  %k = gpt.reshape %k4 : tensor<2x3x4x4xf32> -> tensor<6x4x4xf32>
  %v = gpt.reshape %v4 : tensor<2x3x4x4xf32> -> tensor<6x4x4xf32>
  %s = gpt.matmul %q, %k {transpose_b} : tensor<6x4x4xf32>, tensor<6x4x4xf32> -> tensor<6x4x4xf32>
  %c = gpt.constant dense<0.5> : tensor<f32>
  %ss = gpt.mul %s, %c : tensor<6x4x4xf32>, tensor<f32> -> tensor<6x4x4xf32>
  %m = gpt.causal_mask %ss : tensor<6x4x4xf32>
  %p = gpt.softmax %m : tensor<6x4x4xf32>
  %o = gpt.matmul %p, %v : tensor<6x4x4xf32>, tensor<6x4x4xf32> -> tensor<6x4x4xf32>
  return %o : tensor<6x4x4xf32>
}

// -----

// [B·H, T, D] with nothing to look through: reshaped to [1, B·H, T, D].
// CHECK-LABEL: func.func @batched_3d
// CHECK-SAME: (%[[Q:[^:]+]]: tensor<6x4x4xf32>, %[[K:[^:]+]]: tensor<6x4x4xf32>, %[[V:[^:]+]]: tensor<6x4x4xf32>)
// CHECK-DAG: %[[Q4:.+]] = gpt.reshape %[[Q]] : tensor<6x4x4xf32> -> tensor<1x6x4x4xf32>
// CHECK-DAG: %[[K4:.+]] = gpt.reshape %[[K]] : tensor<6x4x4xf32> -> tensor<1x6x4x4xf32>
// CHECK-DAG: %[[V4:.+]] = gpt.reshape %[[V]] : tensor<6x4x4xf32> -> tensor<1x6x4x4xf32>
// CHECK: %[[O:.+]], %{{.+}} = gpt.flash_attention %[[Q4]], %[[K4]], %[[V4]] {causal, scale = 5.000000e-01 : f32}
// CHECK-NEXT: %[[Y:.+]] = gpt.reshape %[[O]] : tensor<1x6x4x4xf32> -> tensor<6x4x4xf32>
// CHECK-NEXT: return %[[Y]]
func.func @batched_3d(%q: tensor<6x4x4xf32>, %k: tensor<6x4x4xf32>, %v: tensor<6x4x4xf32>) -> tensor<6x4x4xf32> {
  %s = gpt.matmul %q, %k {transpose_b} : tensor<6x4x4xf32>, tensor<6x4x4xf32> -> tensor<6x4x4xf32>
  %c = gpt.constant dense<0.5> : tensor<f32>
  %ss = gpt.mul %s, %c : tensor<6x4x4xf32>, tensor<f32> -> tensor<6x4x4xf32>
  %m = gpt.causal_mask %ss : tensor<6x4x4xf32>
  %p = gpt.softmax %m : tensor<6x4x4xf32>
  %o = gpt.matmul %p, %v : tensor<6x4x4xf32>, tensor<6x4x4xf32> -> tensor<6x4x4xf32>
  return %o : tensor<6x4x4xf32>
}

// -----

// A scale that is not 1/√d.
// CHECK-LABEL: func.func @wrong_scale
// CHECK: gpt.softmax
// CHECK-NOT: gpt.flash_attention
func.func @wrong_scale(%q: tensor<2x2x4x4xf32>, %k: tensor<2x2x4x4xf32>, %v: tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32> {
  %s = gpt.matmul %q, %k {transpose_b} : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32> -> tensor<2x2x4x4xf32>
  %c = gpt.constant dense<0.25> : tensor<f32>
  %ss = gpt.mul %s, %c : tensor<2x2x4x4xf32>, tensor<f32> -> tensor<2x2x4x4xf32>
  %m = gpt.causal_mask %ss : tensor<2x2x4x4xf32>
  // expected-remark @+1 {{did not fuse attention: the scores are scaled by 2.500000e-01, not 1/sqrt(4) = 5.000000e-01}}
  %p = gpt.softmax %m : tensor<2x2x4x4xf32>
  %o = gpt.matmul %p, %v : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32> -> tensor<2x2x4x4xf32>
  return %o : tensor<2x2x4x4xf32>
}

// -----

// An additive mask that is not causal (the last key of row 0 is visible).
// CHECK-LABEL: func.func @not_causal_mask
// CHECK: gpt.softmax
// CHECK-NOT: gpt.flash_attention
func.func @not_causal_mask(%q: tensor<1x1x4x4xf32>, %k: tensor<1x1x4x4xf32>, %v: tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32> {
  %s = gpt.matmul %q, %k {transpose_b} : tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32> -> tensor<1x1x4x4xf32>
  %c = gpt.constant dense<0.5> : tensor<f32>
  %ss = gpt.mul %s, %c : tensor<1x1x4x4xf32>, tensor<f32> -> tensor<1x1x4x4xf32>
  %mask = gpt.constant dense<[[0.0, 0xFF800000, 0xFF800000, 0.0],
                              [0.0, 0.0, 0xFF800000, 0xFF800000],
                              [0.0, 0.0, 0.0, 0xFF800000],
                              [0.0, 0.0, 0.0, 0.0]]> : tensor<4x4xf32>
  %m = gpt.add %ss, %mask : tensor<1x1x4x4xf32>, tensor<4x4xf32> -> tensor<1x1x4x4xf32>
  // expected-remark @+1 {{did not fuse attention: the mask added to the scores is not causal (0 on and below the diagonal, -inf above)}}
  %p = gpt.softmax %m : tensor<1x1x4x4xf32>
  %o = gpt.matmul %p, %v : tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32> -> tensor<1x1x4x4xf32>
  return %o : tensor<1x1x4x4xf32>
}

// -----

// A causal mask that fills with a finite value is not exactly attention.
// CHECK-LABEL: func.func @finite_fill
// CHECK-NOT: gpt.flash_attention
func.func @finite_fill(%q: tensor<1x1x4x4xf32>, %k: tensor<1x1x4x4xf32>, %v: tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32> {
  %s = gpt.matmul %q, %k {transpose_b} : tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32> -> tensor<1x1x4x4xf32>
  %c = gpt.constant dense<0.5> : tensor<f32>
  %ss = gpt.mul %s, %c : tensor<1x1x4x4xf32>, tensor<f32> -> tensor<1x1x4x4xf32>
  %m = gpt.causal_mask %ss {fill = -1.0e4 : f32} : tensor<1x1x4x4xf32>
  // expected-remark @+1 {{did not fuse attention: the causal mask fills with -1.000000e+04, not -inf}}
  %p = gpt.softmax %m : tensor<1x1x4x4xf32>
  %o = gpt.matmul %p, %v : tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32> -> tensor<1x1x4x4xf32>
  return %o : tensor<1x1x4x4xf32>
}

// -----

// The probabilities are returned too (as if for visualisation).
// CHECK-LABEL: func.func @probabilities_used_twice
// CHECK-NOT: gpt.flash_attention
func.func @probabilities_used_twice(%q: tensor<1x1x4x4xf32>, %k: tensor<1x1x4x4xf32>, %v: tensor<1x1x4x4xf32>) -> (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) {
  %s = gpt.matmul %q, %k {transpose_b} : tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32> -> tensor<1x1x4x4xf32>
  %c = gpt.constant dense<0.5> : tensor<f32>
  %ss = gpt.mul %s, %c : tensor<1x1x4x4xf32>, tensor<f32> -> tensor<1x1x4x4xf32>
  %m = gpt.causal_mask %ss : tensor<1x1x4x4xf32>
  // expected-remark @+1 {{did not fuse attention: the probabilities are also used by another op}}
  %p = gpt.softmax %m : tensor<1x1x4x4xf32>
  %o = gpt.matmul %p, %v : tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32> -> tensor<1x1x4x4xf32>
  return %o, %p : tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>
}

// -----

// The scaled scores feed something else as well.
// CHECK-LABEL: func.func @scores_used_elsewhere
// CHECK-NOT: gpt.flash_attention
func.func @scores_used_elsewhere(%q: tensor<1x1x4x4xf32>, %k: tensor<1x1x4x4xf32>, %v: tensor<1x1x4x4xf32>) -> (tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>) {
  %s = gpt.matmul %q, %k {transpose_b} : tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32> -> tensor<1x1x4x4xf32>
  %c = gpt.constant dense<0.5> : tensor<f32>
  %ss = gpt.mul %s, %c : tensor<1x1x4x4xf32>, tensor<f32> -> tensor<1x1x4x4xf32>
  %e = gpt.exp %ss : tensor<1x1x4x4xf32>
  %m = gpt.causal_mask %ss : tensor<1x1x4x4xf32>
  // expected-remark @+1 {{did not fuse attention: the scores are also used by another op}}
  %p = gpt.softmax %m : tensor<1x1x4x4xf32>
  %o = gpt.matmul %p, %v : tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32> -> tensor<1x1x4x4xf32>
  return %o, %e : tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32>
}

// -----

// Scores multiplied by a tensor (a learned temperature per key, say).
// CHECK-LABEL: func.func @scaled_by_tensor
// CHECK-NOT: gpt.flash_attention
func.func @scaled_by_tensor(%q: tensor<1x1x4x4xf32>, %k: tensor<1x1x4x4xf32>, %v: tensor<1x1x4x4xf32>, %t: tensor<4xf32>) -> tensor<1x1x4x4xf32> {
  %s = gpt.matmul %q, %k {transpose_b} : tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32> -> tensor<1x1x4x4xf32>
  %ss = gpt.mul %s, %t : tensor<1x1x4x4xf32>, tensor<4xf32> -> tensor<1x1x4x4xf32>
  // expected-remark @+1 {{did not fuse attention: the scores are multiplied or divided by something other than a scalar constant}}
  %p = gpt.softmax %ss : tensor<1x1x4x4xf32>
  %o = gpt.matmul %p, %v : tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32> -> tensor<1x1x4x4xf32>
  return %o : tensor<1x1x4x4xf32>
}

// -----

// q·k with k untransposed is not q·kᵀ.
// CHECK-LABEL: func.func @k_not_transposed
// CHECK-NOT: gpt.flash_attention
func.func @k_not_transposed(%q: tensor<1x1x4x4xf32>, %k: tensor<1x1x4x4xf32>, %v: tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32> {
  %s = gpt.matmul %q, %k : tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32> -> tensor<1x1x4x4xf32>
  %c = gpt.constant dense<0.5> : tensor<f32>
  %ss = gpt.mul %s, %c : tensor<1x1x4x4xf32>, tensor<f32> -> tensor<1x1x4x4xf32>
  // expected-remark @+1 {{did not fuse attention: the scores multiply q by k, not by k transposed}}
  %p = gpt.softmax %ss : tensor<1x1x4x4xf32>
  %o = gpt.matmul %p, %v : tensor<1x1x4x4xf32>, tensor<1x1x4x4xf32> -> tensor<1x1x4x4xf32>
  return %o : tensor<1x1x4x4xf32>
}

// -----

// Not attention at all: a softmax of an input times a weight. No remark.
// CHECK-LABEL: func.func @not_attention
// CHECK: gpt.softmax
// CHECK: gpt.matmul
func.func @not_attention(%x: tensor<4x8xf32>, %w: tensor<8x3xf32>) -> tensor<4x3xf32> {
  %p = gpt.softmax %x : tensor<4x8xf32>
  %y = gpt.matmul %p, %w : tensor<4x8xf32>, tensor<8x3xf32> -> tensor<4x3xf32>
  return %y : tensor<4x3xf32>
}
