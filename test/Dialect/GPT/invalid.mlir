// RUN: gptc-opt %s -split-input-file -verify-diagnostics
// One case per verifier rule of the gpt dialect.

func.func @embedding_table_rank(%t: tensor<64xf32>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{table must be 2-D [vocab, channels], got 64}}
  %x = gpt.embedding %t, %ids : tensor<64xf32>, tensor<2x8xi32> -> tensor<2x8x16xf32>
  return
}

// -----

func.func @embedding_result_shape(%t: tensor<64x16xf32>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{result has shape 2x8x32, expected 2x8x16}}
  %x = gpt.embedding %t, %ids : tensor<64x16xf32>, tensor<2x8xi32> -> tensor<2x8x32xf32>
  return
}

// -----

func.func @embedding_result_type(%t: tensor<64x16xf32>, %ids: tensor<2x8xi32>) {
  // expected-error @+1 {{result element type must match the table's}}
  %x = gpt.embedding %t, %ids : tensor<64x16xf32>, tensor<2x8xi32> -> tensor<2x8x16xbf16>
  return
}

// -----

func.func @embedding_float_ids(%t: tensor<64x16xf32>, %ids: tensor<2x8xf32>) {
  // expected-error @+1 {{operand #1 must be ranked tensor of 32-bit signless integer values}}
  %x = gpt.embedding %t, %ids : tensor<64x16xf32>, tensor<2x8xf32> -> tensor<2x8x16xf32>
  return
}

// -----

func.func @matmul_rank(%a: tensor<16xf32>, %b: tensor<16x32xf32>) {
  // expected-error @+1 {{operand a must have rank >= 2, got 16}}
  %x = gpt.matmul %a, %b : tensor<16xf32>, tensor<16x32xf32> -> tensor<32xf32>
  return
}

// -----

func.func @matmul_b_rank(%a: tensor<2x4x8x16xf32>, %b: tensor<4x16x32xf32>) {
  // expected-error @+1 {{operand b must be 2-D or have the rank of a (4), got 4x16x32}}
  %x = gpt.matmul %a, %b : tensor<2x4x8x16xf32>, tensor<4x16x32xf32> -> tensor<2x4x8x32xf32>
  return
}

// -----

func.func @matmul_element_types(%a: tensor<8x16xf32>, %b: tensor<16x32xbf16>) {
  // expected-error @+1 {{operands a and b must have the same element type}}
  %x = gpt.matmul %a, %b : tensor<8x16xf32>, tensor<16x32xbf16> -> tensor<8x32xf32>
  return
}

// -----

func.func @matmul_contraction(%a: tensor<8x16xf32>, %b: tensor<32x16xf32>) {
  // expected-error @+1 {{contraction dimensions differ: a has K=16, b has K=32}}
  %x = gpt.matmul %a, %b : tensor<8x16xf32>, tensor<32x16xf32> -> tensor<8x16xf32>
  return
}

// -----

func.func @matmul_batch(%a: tensor<2x8x16xf32>, %b: tensor<3x16x8xf32>) {
  // expected-error @+1 {{batch dimensions differ: 2 vs 3}}
  %x = gpt.matmul %a, %b : tensor<2x8x16xf32>, tensor<3x16x8xf32> -> tensor<2x8x8xf32>
  return
}

// -----

func.func @matmul_result(%a: tensor<8x16xf32>, %b: tensor<16x32xf32>) {
  // expected-error @+1 {{result has shape 8x16, expected 8x32}}
  %x = gpt.matmul %a, %b : tensor<8x16xf32>, tensor<16x32xf32> -> tensor<8x16xf32>
  return
}

// -----

func.func @layernorm_scalar(%x: tensor<f32>, %g: tensor<16xf32>) {
  // expected-error @+1 {{input must have rank >= 1}}
  %y = gpt.layernorm %x, %g, %g : tensor<f32>, tensor<16xf32>, tensor<16xf32>
  return
}

// -----

func.func @layernorm_gamma(%x: tensor<2x16xf32>, %g: tensor<8xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{gamma has shape 8, expected 16}}
  %y = gpt.layernorm %x, %g, %b : tensor<2x16xf32>, tensor<8xf32>, tensor<16xf32>
  return
}

// -----

func.func @layernorm_beta(%x: tensor<2x16xf32>, %g: tensor<16xf32>, %b: tensor<2x16xf32>) {
  // expected-error @+1 {{beta has shape 2x16, expected 16}}
  %y = gpt.layernorm %x, %g, %b : tensor<2x16xf32>, tensor<16xf32>, tensor<2x16xf32>
  return
}

// -----

func.func @layernorm_epsilon(%x: tensor<2x16xf32>, %g: tensor<16xf32>) {
  // expected-error @+1 {{epsilon must be positive}}
  %y = gpt.layernorm %x, %g, %g {epsilon = 0.0 : f32} : tensor<2x16xf32>, tensor<16xf32>, tensor<16xf32>
  return
}

// -----

func.func @causal_mask_rank(%x: tensor<8xf32>) {
  // expected-error @+1 {{input must have rank >= 2 [..., queries, keys], got 8}}
  %y = gpt.causal_mask %x : tensor<8xf32>
  return
}

// -----

func.func @causal_mask_square(%x: tensor<2x8x4xf32>) {
  // expected-error @+1 {{needs as many keys as queries, got 8 queries and 4 keys}}
  %y = gpt.causal_mask %x : tensor<2x8x4xf32>
  return
}

// -----

func.func @attention_q_rank(%q: tensor<8x16xf32>, %k: tensor<8x16xf32>) {
  // expected-error @+1 {{q must be [batch, heads, queries, head_dim], got 8x16}}
  %o, %l = gpt.flash_attention %q, %k, %k {scale = 0.25 : f32} : tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32> -> tensor<8x16xf32>, tensor<8xf32>
  return
}

// -----

func.func @attention_k_head_dim(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x8xf32>) {
  // expected-error @+1 {{k has shape 2x4x8x8, expected 2x4xSx16 (S keys)}}
  %o, %l = gpt.flash_attention %q, %k, %k {scale = 0.25 : f32} : tensor<2x4x8x16xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32> -> tensor<2x4x8x16xf32>, tensor<2x4x8xf32>
  return
}

// -----

func.func @attention_v_shape(%q: tensor<2x4x8x16xf32>, %v: tensor<2x4x6x16xf32>) {
  // expected-error @+1 {{v has shape 2x4x6x16, expected 2x4x8x16}}
  %o, %l = gpt.flash_attention %q, %q, %v {scale = 0.25 : f32} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x6x16xf32> -> tensor<2x4x8x16xf32>, tensor<2x4x8xf32>
  return
}

// -----

func.func @attention_element_types(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xbf16>) {
  // expected-error @+1 {{q, k and v must have the same element type}}
  %o, %l = gpt.flash_attention %q, %k, %k {scale = 0.25 : f32} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16> -> tensor<2x4x8x16xf32>, tensor<2x4x8xf32>
  return
}

// -----

func.func @attention_out_shape(%q: tensor<2x4x8x16xf32>) {
  // expected-error @+1 {{out has shape 2x4x8x8, expected 2x4x8x16}}
  %o, %l = gpt.flash_attention %q, %q, %q {scale = 0.25 : f32} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32> -> tensor<2x4x8x8xf32>, tensor<2x4x8xf32>
  return
}

// -----

func.func @attention_lse_shape(%q: tensor<2x4x8x16xf32>) {
  // expected-error @+1 {{lse has shape 2x4x16, expected 2x4x8}}
  %o, %l = gpt.flash_attention %q, %q, %q {scale = 0.25 : f32} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32> -> tensor<2x4x8x16xf32>, tensor<2x4x16xf32>
  return
}

// -----

func.func @attention_causal_square(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x5x16xf32>) {
  // expected-error @+1 {{causal attention needs as many keys as queries, got 8 queries and 5 keys}}
  %o, %l = gpt.flash_attention %q, %k, %k {causal, scale = 0.25 : f32} : tensor<2x4x8x16xf32>, tensor<2x4x5x16xf32>, tensor<2x4x5x16xf32> -> tensor<2x4x8x16xf32>, tensor<2x4x8xf32>
  return
}

// -----

func.func @attention_scale(%q: tensor<2x4x8x16xf32>) {
  // expected-error @+1 {{scale must be a positive finite number}}
  %o, %l = gpt.flash_attention %q, %q, %q {scale = 0.0 : f32} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32> -> tensor<2x4x8x16xf32>, tensor<2x4x8xf32>
  return
}

// -----

func.func @attention_grad_lse_shape(%q: tensor<2x4x8x16xf32>, %lse: tensor<2x4x16xf32>) {
  // expected-error @+1 {{lse has shape 2x4x16, expected 2x4x8}}
  %dq, %dk, %dv = gpt.flash_attention_grad %q, %q, %q, %q, %lse, %q {scale = 0.25 : f32} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x16xf32>
  return
}

// -----

func.func @attention_qkv_rank(%qkv: tensor<2x4x8x48xf32>) {
  // expected-error @+1 {{qkv must be [batch, positions, 3 * channels], got 2x4x8x48}}
  %o, %l = gpt.flash_attention_qkv %qkv {num_heads = 4 : i64, scale = 0.5 : f32} : tensor<2x4x8x48xf32> -> tensor<2x8x16xf32>, tensor<2x4x8xf32>
  return
}

// -----

func.func @attention_qkv_heads(%qkv: tensor<2x8x48xf32>) {
  // expected-error @+1 {{num_heads must be positive, got 0}}
  %o, %l = gpt.flash_attention_qkv %qkv {num_heads = 0 : i64, scale = 0.5 : f32} : tensor<2x8x48xf32> -> tensor<2x8x16xf32>, tensor<2x0x8xf32>
  return
}

// -----

func.func @attention_qkv_not_divisible(%qkv: tensor<2x8x48xf32>) {
  // expected-error @+1 {{qkv's last dimension 48 is not 3 x num_heads (5) x a head size}}
  %o, %l = gpt.flash_attention_qkv %qkv {num_heads = 5 : i64, scale = 0.5 : f32} : tensor<2x8x48xf32> -> tensor<2x8x16xf32>, tensor<2x5x8xf32>
  return
}

// -----

func.func @attention_qkv_out_shape(%qkv: tensor<2x8x48xf32>) {
  // expected-error @+1 {{out has shape 2x8x48, expected 2x8x16}}
  %o, %l = gpt.flash_attention_qkv %qkv {num_heads = 4 : i64, scale = 0.5 : f32} : tensor<2x8x48xf32> -> tensor<2x8x48xf32>, tensor<2x4x8xf32>
  return
}

// -----

func.func @attention_qkv_out_type(%qkv: tensor<2x8x48xf32>) {
  // expected-error @+1 {{out must have the element type of qkv}}
  %o, %l = gpt.flash_attention_qkv %qkv {num_heads = 4 : i64, scale = 0.5 : f32} : tensor<2x8x48xf32> -> tensor<2x8x16xbf16>, tensor<2x4x8xf32>
  return
}

// -----

func.func @attention_qkv_lse_shape(%qkv: tensor<2x8x48xf32>) {
  // expected-error @+1 {{lse has shape 2x8x4, expected 2x4x8}}
  %o, %l = gpt.flash_attention_qkv %qkv {num_heads = 4 : i64, scale = 0.5 : f32} : tensor<2x8x48xf32> -> tensor<2x8x16xf32>, tensor<2x8x4xf32>
  return
}

// -----

func.func @attention_qkv_scale(%qkv: tensor<2x8x48xf32>) {
  // expected-error @+1 {{scale must be a positive finite number}}
  %o, %l = gpt.flash_attention_qkv %qkv {num_heads = 4 : i64, scale = -0.5 : f32} : tensor<2x8x48xf32> -> tensor<2x8x16xf32>, tensor<2x4x8xf32>
  return
}

// -----

func.func @attention_qkv_grad_dout(%qkv: tensor<2x8x48xf32>, %o: tensor<2x8x16xf32>, %l: tensor<2x4x8xf32>, %do: tensor<2x8x16xbf16>) {
  // expected-error @+1 {{all of {out, dout} have same type}}
  %d = "gpt.flash_attention_qkv_grad"(%qkv, %o, %l, %do) {num_heads = 4 : i64, scale = 0.5 : f32} : (tensor<2x8x48xf32>, tensor<2x8x16xf32>, tensor<2x4x8xf32>, tensor<2x8x16xbf16>) -> tensor<2x8x48xf32>
  return
}

// -----

func.func @attention_qkv_grad_lse(%qkv: tensor<2x8x48xf32>, %o: tensor<2x8x16xf32>, %l: tensor<2x4x4xf32>) {
  // expected-error @+1 {{lse has shape 2x4x4, expected 2x4x8}}
  %d = gpt.flash_attention_qkv_grad %qkv, %o, %l, %o {num_heads = 4 : i64, scale = 0.5 : f32} : tensor<2x8x48xf32>, tensor<2x8x16xf32>, tensor<2x4x4xf32>
  return
}

// -----

func.func @attention_qkv_grad_delta(%qkv: tensor<2x8x48xf32>, %o: tensor<2x8x16xf32>, %l: tensor<2x4x8xf32>, %d: tensor<2x8x4xf32>) {
  // expected-error @+1 {{delta has shape 2x8x4, expected 2x4x8}}
  %g = gpt.flash_attention_qkv_grad %qkv, %o, %l, %o, %d {num_heads = 4 : i64, scale = 0.5 : f32} : tensor<2x8x48xf32>, tensor<2x8x16xf32>, tensor<2x4x8xf32>, tensor<2x8x4xf32>
  return
}

// -----

func.func @attention_grad_delta(%q: tensor<2x4x8x16xf32>, %lse: tensor<2x4x8xf32>, %d: tensor<2x4x16xf32>) {
  // expected-error @+1 {{delta has shape 2x4x16, expected 2x4x8}}
  %dq, %dk, %dv = gpt.flash_attention_grad %q, %q, %q, %q, %lse, %q, %d {scale = 0.25 : f32} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8xf32>, tensor<2x4x16xf32>
  return
}

// -----

func.func @attention_grad_delta_type(%q: tensor<2x4x8x16xf32>, %lse: tensor<2x4x8xf32>, %d: tensor<2x4x8xbf16>) {
  // expected-error @+1 {{operand #6 must be ranked tensor of 32-bit float values}}
  %dq, %dk, %dv = gpt.flash_attention_grad %q, %q, %q, %q, %lse, %q, %d {scale = 0.25 : f32} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xbf16>
  return
}

// -----

func.func @attention_bias_grad_thirds(%g: tensor<2x8x90xbf16>, %o: tensor<2x8x32xbf16>) {
  // expected-error @+1 {{dqkv's last dimension must be 3 times dout's (96), got 90}}
  %d = gpt.attention_bias_grad %g, %o : tensor<2x8x90xbf16>, tensor<2x8x32xbf16> -> tensor<96xf32>
  return
}

// -----

func.func @attention_bias_grad_rows(%g: tensor<2x8x96xbf16>, %o: tensor<2x4x32xbf16>) {
  // expected-error @+1 {{dqkv 2x8x96 and dout 2x4x32 must have as many rows}}
  %d = gpt.attention_bias_grad %g, %o : tensor<2x8x96xbf16>, tensor<2x4x32xbf16> -> tensor<96xf32>
  return
}

// -----

func.func @attention_bias_grad_result(%g: tensor<2x8x96xbf16>, %o: tensor<2x8x32xbf16>) {
  // expected-error @+1 {{result has shape 32, expected 96}}
  %d = gpt.attention_bias_grad %g, %o : tensor<2x8x96xbf16>, tensor<2x8x32xbf16> -> tensor<32xf32>
  return
}

// -----

func.func @attention_row_dot_heads(%o: tensor<2x8x16xbf16>) {
  // expected-error @+1 {{num_heads 3 does not divide out's last dimension 16}}
  %d = gpt.attention_row_dot %o, %o {num_heads = 3 : i64} : tensor<2x8x16xbf16> -> tensor<2x3x8xf32>
  return
}

// -----

func.func @attention_row_dot_packed_without_heads(%o: tensor<2x8x16xbf16>) {
  // expected-error @+1 {{out must be [batch, heads, positions, head_dim], or [batch, positions, channels] with num_heads; got 2x8x16 without num_heads}}
  %d = gpt.attention_row_dot %o, %o : tensor<2x8x16xbf16> -> tensor<2x8xf32>
  return
}

// -----

func.func @attention_row_dot_shape(%o: tensor<2x4x8x16xf32>) {
  // expected-error @+1 {{delta has shape 2x4x16, expected 2x4x8}}
  %d = gpt.attention_row_dot %o, %o : tensor<2x4x8x16xf32> -> tensor<2x4x16xf32>
  return
}

// -----

func.func @attention_row_dot_types(%o: tensor<2x4x8x16xf32>, %do: tensor<2x4x8x16xbf16>) {
  // expected-error @+1 {{all of {out, dout} have same type}}
  %d = "gpt.attention_row_dot"(%o, %do) : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xbf16>) -> tensor<2x4x8xf32>
  return
}

// -----

func.func @gelu_approximation(%x: tensor<8xf32>) {
  // expected-error @+1 {{approximate must be "tanh" or "none", got "sigmoid"}}
  %y = gpt.gelu %x {approximate = "sigmoid"} : tensor<8xf32>
  return
}

// -----

func.func @softmax_type(%x: tensor<8xf32>) {
  // expected-error @+1 {{all of {x, result} have same type}}
  %y = "gpt.softmax"(%x) : (tensor<8xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @reshape_elements(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{cannot reshape 2x8 (16 elements) into 3x5 (15 elements)}}
  %y = gpt.reshape %x : tensor<2x8xf32> -> tensor<3x5xf32>
  return
}

// -----

func.func @reshape_element_type(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{cannot change the element type}}
  %y = gpt.reshape %x : tensor<2x8xf32> -> tensor<16xbf16>
  return
}

// -----

func.func @transpose_length(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{permutation has 3 entries for an input of rank 2}}
  %y = gpt.transpose %x [0, 1, 2] : tensor<2x8xf32> -> tensor<2x8xf32>
  return
}

// -----

func.func @transpose_repeated(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{permutation must hold each dimension exactly once}}
  %y = gpt.transpose %x [1, 1] : tensor<2x8xf32> -> tensor<8x8xf32>
  return
}

// -----

func.func @transpose_result(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{result has shape 2x8, expected 8x2}}
  %y = gpt.transpose %x [1, 0] : tensor<2x8xf32> -> tensor<2x8xf32>
  return
}

// -----

func.func @transpose_element_type(%x: tensor<2x8xi32>) {
  // expected-error @+1 {{changes the element type only between float types}}
  %y = gpt.transpose %x [1, 0] : tensor<2x8xi32> -> tensor<8x2xf32>
  return
}

// -----

func.func @split_axis(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{axis 2 is out of range for rank 2}}
  %a, %b = gpt.split %x {axis = 2} : tensor<2x8xf32> -> tensor<2x4xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @split_none(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{needs at least one result}}
  "gpt.split"(%x) {axis = 1 : i64} : (tensor<2x8xf32>) -> ()
  return
}

// -----

func.func @split_other_dims(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{result #1 has shape 3x4, expected 2x4}}
  %a, %b = gpt.split %x {axis = 1} : tensor<2x8xf32> -> tensor<2x4xf32>, tensor<3x4xf32>
  return
}

// -----

func.func @split_total(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{pieces add up to 6 along axis 1, but the input has 8}}
  %a, %b = gpt.split %x {axis = 1} : tensor<2x8xf32> -> tensor<2x4xf32>, tensor<2x2xf32>
  return
}

// -----

func.func @split_element_type(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{results must share one element type}}
  %a, %b = gpt.split %x {axis = 1} : tensor<2x8xf32> -> tensor<2x4xf32>, tensor<2x4xf16>
  return
}

// -----

func.func @cross_entropy_shape(%l: tensor<2x8x64xf32>, %t: tensor<2x4xi32>) {
  // expected-error @+1 {{logits 2x8x64 must be the target shape 2x4 followed by the vocabulary}}
  %x = gpt.cross_entropy %l, %t : tensor<2x8x64xf32>, tensor<2x4xi32> -> tensor<f32>
  return
}

// -----

func.func @binary_broadcast(%a: tensor<2x8xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{cannot broadcast 2x8 with 4}}
  %x = gpt.add %a, %b : tensor<2x8xf32>, tensor<4xf32> -> tensor<2x8xf32>
  return
}

// -----

func.func @binary_result(%a: tensor<2x8xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{result has shape 8, expected 2x8}}
  %x = gpt.mul %a, %b : tensor<2x8xf32>, tensor<8xf32> -> tensor<8xf32>
  return
}

// -----

func.func @binary_element_type(%a: tensor<8xf32>, %b: tensor<8xbf16>) {
  // expected-error @+1 {{operands and result must have the same element type}}
  %x = gpt.sub %a, %b : tensor<8xf32>, tensor<8xbf16> -> tensor<8xf32>
  return
}

// -----

func.func @constant_type() {
  // expected-error @+1 {{all of {value, result} have same type}}
  %c = "gpt.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<2xf32>
  return
}

// -----

// expected-error @+1 {{'gpt.param' must be a string}}
func.func @param_not_string(%w: tensor<8xf32> {gpt.param = 3 : i64}) {
  return
}

// -----

// expected-error @+1 {{parameter 'ids' must be a float tensor}}
func.func @param_not_float(%w: tensor<8xi32> {gpt.param = "ids"}) {
  return
}

// -----

// expected-error @+1 {{the copy of parameter 'ids' must be a float tensor}}
func.func @param_copy_not_float(%w: tensor<8xi32> {gpt.param_copy = "ids"}) {
  return
}

// -----

// expected-error @+1 {{'gpt.param_copy' must be a string}}
func.func @param_copy_result_not_string() -> (tensor<8xbf16> {gpt.param_copy = 1 : i64}) {
  %c = gpt.constant dense<0.0> : tensor<8xbf16>
  return %c : tensor<8xbf16>
}

// -----

// expected-error @+1 {{'gpt.init' is "uniform", expected one of: normal, zeros, ones}}
func.func @init_kind(%w: tensor<8xf32> {gpt.param = "w", gpt.init = "uniform"}) {
  return
}

// -----

// expected-error @+1 {{'gpt.init_std' must be a positive float}}
func.func @init_std(%w: tensor<8xf32> {gpt.param = "w", gpt.init = "normal", gpt.init_std = -1.0 : f32}) {
  return
}

// -----

// expected-error @+1 {{'gpt.input' is "images", expected one of: tokens, targets}}
func.func @input_kind(%x: tensor<8xi32> {gpt.input = "images"}) {
  return
}

// -----

// expected-error @+1 {{input 'tokens' must be a tensor of i32 token ids}}
func.func @input_type(%x: tensor<8xf32> {gpt.input = "tokens"}) {
  return
}

// -----

// expected-error @+1 {{unknown gpt argument attribute 'gpt.weight'}}
func.func @unknown_arg_attr(%x: tensor<8xf32> {gpt.weight = "w"}) {
  return
}

// -----

// expected-error @+1 {{'gpt.output' is "probs", expected one of: loss, logits, grad_norm}}
func.func @output_kind(%x: tensor<f32>) -> (tensor<f32> {gpt.output = "probs"}) {
  return %x : tensor<f32>
}

// -----

// expected-error @+1 {{unknown gpt result attribute 'gpt.result'}}
func.func @unknown_result_attr(%x: tensor<f32>) -> (tensor<f32> {gpt.result = "loss"}) {
  return %x : tensor<f32>
}

// -----

func.func @cast_shape(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{requires the same shape for all operands and results}}
  %y = gpt.cast %x : tensor<4x8xf32> -> tensor<8x4xbf16>
  return
}

// -----

func.func @cast_to_int(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{result #0 must be ranked tensor of 32-bit float or bfloat16 type or 16-bit float values}}
  %y = gpt.cast %x : tensor<4x8xf32> -> tensor<4x8xi32>
  return
}

// -----

func.func @pad_smaller(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{result dimension 1 is 4, smaller than the input's 8}}
  %y = gpt.pad %x : tensor<4x8xf32> -> tensor<4x4xf32>
  return
}

// -----

func.func @pad_float_value(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{pads a float tensor with 0 only}}
  %y = gpt.pad %x {value = -1 : i64} : tensor<4x8xf32> -> tensor<4x16xf32>
  return
}

// -----

func.func @slice_rank(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{cannot change the rank (4x8 to 32)}}
  %y = gpt.slice %x : tensor<4x8xf32> -> tensor<32xf32>
  return
}

// -----

func.func @slice_larger(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{result dimension 0 is 5, larger than the input's 4}}
  %y = gpt.slice %x : tensor<4x8xf32> -> tensor<5x8xf32>
  return
}

// -----

func.func @num_classes_too_large(%l: tensor<2x64xf32>, %t: tensor<2xi32>) {
  // expected-error @+1 {{num_classes 65 must be in [1, 64] (the logits' last dimension)}}
  %loss = gpt.cross_entropy %l, %t {num_classes = 65 : i64} : tensor<2x64xf32>, tensor<2xi32> -> tensor<f32>
  return
}

// -----

func.func @fused_input_does_not_broadcast(%a: tensor<4x8xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{input #1 of shape 4 does not broadcast to the result shape 4x8}}
  %r = gpt.fused_elementwise(%a, %b : tensor<4x8xf32>, tensor<4xf32>) -> tensor<4x8xf32> {
  ^bb0(%x: f32, %y: f32):
    %s = arith.addf %x, %y : f32
    gpt.yield %s : f32
  }
  return
}

// -----

// A float32 result yielded narrow: only a 16-bit result may be yielded
// wider (and rounded on store), never the other way.
func.func @fused_yield_narrower(%a: tensor<4xbf16>) {
  // expected-error @+1 {{body yields 1 values of types 'bf16', expected the result element types 'f32'}}
  %r = gpt.fused_elementwise(%a : tensor<4xbf16>) -> tensor<4xf32> {
  ^bb0(%x: bf16):
    gpt.yield %x : bf16
  }
  return
}

// -----

func.func @fused_yield_types(%a: tensor<4xf32>) {
  // expected-error @+1 {{body yields 2 values of types 'f32', 'f32', expected the result element types 'f32'}}
  %r = gpt.fused_elementwise(%a : tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: f32):
    gpt.yield %x, %x : f32, f32
  }
  return
}

// -----

func.func @fused_body_not_scalar(%a: tensor<4xf32>) {
  // expected-error @+1 {{body may hold only arith and math ops, found 'gpt.constant'}}
  %r = gpt.fused_elementwise(%a : tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%x: f32):
    %c = gpt.constant dense<1.0> : tensor<f32>
    gpt.yield %x : f32
  }
  return
}

// -----

func.func @multi_tensor_shapes(%a: tensor<4xf32>, %b: tensor<8xf32>, %c: tensor<8xf32>) {
  // expected-error @+1 {{operand #2 has shape 8, expected tensor 0's shape 4}}
  %r:2 = gpt.multi_tensor_elementwise(%a, %b, %c, %c : tensor<4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {num_tensors = 2 : i64} -> tensor<4xf32>, tensor<8xf32> {
  ^bb0(%x: f32, %y: f32):
    %s = arith.addf %x, %y : f32
    gpt.yield %s : f32
  }
  return
}

// -----

func.func @per_tensor_size(%a: tensor<4xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{per_tensor has 3 values, expected a positive multiple of num_tensors (2)}}
  %r:2 = gpt.multi_tensor_elementwise(%a, %b : tensor<4xf32>, tensor<8xf32>) {num_tensors = 2 : i64, per_tensor = array<f32: 0.1, 0.0, 0.0>} -> tensor<4xf32>, tensor<8xf32> {
  ^bb0(%x: f32, %w: f32):
    %s = arith.mulf %x, %w : f32
    gpt.yield %s : f32
  }
  return
}

// -----

func.func @per_tensor_argument(%a: tensor<4xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{body has 1 arguments, expected 2}}
  %r:2 = gpt.multi_tensor_elementwise(%a, %b : tensor<4xf32>, tensor<8xf32>) {num_tensors = 2 : i64, per_tensor = array<f32: 0.1, 0.0>} -> tensor<4xf32>, tensor<8xf32> {
  ^bb0(%x: f32):
    gpt.yield %x : f32
  }
  return
}

// -----

func.func @multi_tensor_reduce_shapes(%a: tensor<4xf32>, %b: tensor<8xf32>, %c: tensor<8xf32>) {
  // expected-error @+1 {{operand #2 has shape 8, expected tensor 0's shape 4}}
  %r = gpt.multi_tensor_reduce(%a, %b, %c, %c : tensor<4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {num_tensors = 2 : i64} -> tensor<f32> {
  ^bb0(%x: f32, %y: f32):
    %s = arith.mulf %x, %y : f32
    gpt.yield %s : f32
  }
  return
}

// -----

func.func @multi_tensor_reduce_yield(%a: tensor<4xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{body yields 2 values}}
  %r = gpt.multi_tensor_reduce(%a, %b : tensor<4xf32>, tensor<8xf32>) {num_tensors = 2 : i64} -> tensor<f32> {
  ^bb0(%x: f32):
    gpt.yield %x, %x : f32, f32
  }
  return
}

// -----

func.func @concat_mixed_inputs(%a: tensor<2x4xf32>, %b: tensor<2x4xbf16>) {
  // expected-error @+1 {{inputs must share one element type}}
  %y = gpt.concat %a, %b {axis = 1 : i64} : tensor<2x4xf32>, tensor<2x4xbf16> -> tensor<2x8xf32>
  return
}

// -----

func.func @pad_int_to_float(%x: tensor<4x8xi32>) {
  // expected-error @+1 {{changes the element type only between float types}}
  %y = gpt.pad %x : tensor<4x8xi32> -> tensor<4x16xf32>
  return
}

// -----

// The body computes in float32: a bf16 value is rounded on store, not
// yielded as bf16.
func.func @layernorm_grad_bf16_yield(%x: tensor<2x8xf32>, %g: tensor<8xf32>, %dy: tensor<2x8xf32>, %r: tensor<2x8xf32>) {
  // expected-error @+1 {{body yields 1 values of types 'bf16', expected the result element types 'f32'}}
  %dg, %db, %v = gpt.fused_layernorm_grad %x, %g, %dy : tensor<2x8xf32>, tensor<8xf32>, tensor<2x8xf32> epilogue(%r : tensor<2x8xf32>) -> tensor<8xf32>, tensor<8xf32>, tensor<2x8xbf16> {
  ^bb0(%dx: f32, %a: f32):
    %s = arith.addf %a, %dx : f32
    %t = arith.truncf %s : f32 to bf16
    gpt.yield %t : bf16
  }
  return
}

// -----

// A value is x's shape (written) or [C] (its column sums), nothing else.
func.func @layernorm_grad_row_sums(%x: tensor<2x8xf32>, %g: tensor<8xf32>, %dy: tensor<2x8xf32>) {
  // expected-error @+1 {{values must have the shape of x, 2x8, or of its column sums, 8; found 2}}
  %dg, %db, %v:2 = gpt.fused_layernorm_grad %x, %g, %dy : tensor<2x8xf32>, tensor<8xf32>, tensor<2x8xf32> epilogue() -> tensor<8xf32>, tensor<8xf32>, tensor<2x8xf32>, tensor<2xf32> {
  ^bb0(%dx: f32):
    gpt.yield %dx, %dx : f32, f32
  }
  return
}

// -----

// Column sums are float32, as the kernel adds them.
func.func @layernorm_grad_bf16_sums(%x: tensor<2x8xf32>, %g: tensor<8xf32>, %dy: tensor<2x8xf32>) {
  // expected-error @+1 {{column sums must be float32}}
  %dg, %db, %v:2 = gpt.fused_layernorm_grad %x, %g, %dy : tensor<2x8xf32>, tensor<8xf32>, tensor<2x8xf32> epilogue() -> tensor<8xf32>, tensor<8xf32>, tensor<2x8xf32>, tensor<8xbf16> {
  ^bb0(%dx: f32):
    gpt.yield %dx, %dx : f32, f32
  }
  return
}

// -----

// Something of x's shape is written: the kernel hands its rows on.
func.func @layernorm_grad_only_sums(%x: tensor<2x8xf32>, %g: tensor<8xf32>, %dy: tensor<2x8xf32>) {
  // expected-error @+1 {{must write at least one value of the shape of x}}
  %dg, %db, %v = gpt.fused_layernorm_grad %x, %g, %dy : tensor<2x8xf32>, tensor<8xf32>, tensor<2x8xf32> epilogue() -> tensor<8xf32>, tensor<8xf32>, tensor<8xf32> {
  ^bb0(%dx: f32):
    gpt.yield %dx : f32
  }
  return
}

// -----

// One kernel stores result r of every tensor: one element type.
func.func @multi_tensor_mixed_result_types(%a: tensor<4xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{result #1 differs in element type from tensor 0's}}
  %r:2 = gpt.multi_tensor_elementwise(%a, %b : tensor<4xf32>, tensor<8xf32>) {num_tensors = 2 : i64} -> tensor<4xbf16>, tensor<8xf32> {
  ^bb0(%x: f32):
    gpt.yield %x : f32
  }
  return
}

// -----

// An embedding gradient's addend has the table's type.
func.func @embedding_grad_addend_shape(%dy: tensor<2x8x16xf32>, %ids: tensor<2x8xi32>, %head: tensor<32x16xf32>) {
  // expected-error @+1 {{addend must have the result's type 'tensor<64x16xf32>', got 'tensor<32x16xf32>'}}
  %g = gpt.embedding_grad %dy, %ids, %head : tensor<2x8x16xf32>, tensor<2x8xi32>, tensor<32x16xf32> -> tensor<64x16xf32>
  return
}

// -----

// With an addend, float32 only: the sum would otherwise need a rounding
// between the scatter and the add.
func.func @embedding_grad_addend_bf16(%dy: tensor<2x8x16xbf16>, %ids: tensor<2x8xi32>, %head: tensor<64x16xbf16>) {
  // expected-error @+1 {{with an addend, the result must be float32}}
  %g = gpt.embedding_grad %dy, %ids, %head : tensor<2x8x16xbf16>, tensor<2x8xi32>, tensor<64x16xbf16> -> tensor<64x16xbf16>
  return
}

// -----

func.func @reduce_sum_shape(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{result 3 does not broadcast back to the input 4x8}}
  %s = gpt.reduce_sum %x : tensor<4x8xf32> -> tensor<3xf32>
  return
}

// -----

func.func @reduce_sum_narrows(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{cannot sum 'f32' into 'bf16' (only bf16 or f16 terms into an f32 sum)}}
  %s = gpt.reduce_sum %x : tensor<4x8xf32> -> tensor<8xbf16>
  return
}

// -----

func.func @reduce_sum_same_width(%x: tensor<4x8xbf16>) {
  // expected-error @+1 {{cannot sum 'bf16' into 'f16' (only bf16 or f16 terms into an f32 sum)}}
  %s = gpt.reduce_sum %x : tensor<4x8xbf16> -> tensor<8xf16>
  return
}

// -----

func.func @reduce_sum_corner_rank(%x: tensor<4x3x8xf32>) {
  // expected-error @+1 {{corner 4x8 is not of the input's rank 3}}
  %s = gpt.reduce_sum %x {corner = array<i64: 4, 8>} : tensor<4x3x8xf32> -> tensor<8xf32>
  return
}

// -----

func.func @reduce_sum_corner_outside(%x: tensor<4x3x8xf32>) {
  // expected-error @+1 {{corner 4x1x9 does not fit the input 4x3x8}}
  %s = gpt.reduce_sum %x {corner = array<i64: 4, 1, 9>} : tensor<4x3x8xf32> -> tensor<8xf32>
  return
}

// -----

func.func @reduce_sum_corner_empty(%x: tensor<4x3x8xf32>) {
  // expected-error @+1 {{corner 4x0x8 does not fit the input 4x3x8}}
  %s = gpt.reduce_sum %x {corner = array<i64: 4, 0, 8>} : tensor<4x3x8xf32> -> tensor<8xf32>
  return
}

// -----

func.func @reduce_sum_corner_shape(%x: tensor<4x3x8xf32>) {
  // The result is of the whole input's rows, not the corner's.
  // expected-error @+1 {{result 3x8 does not broadcast back to the corner 4x1x8}}
  %s = gpt.reduce_sum %x {corner = array<i64: 4, 1, 8>} : tensor<4x3x8xf32> -> tensor<3x8xf32>
  return
}
