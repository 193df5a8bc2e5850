// RUN: gptc-opt %s | FileCheck %s
// Round trip: print, parse the printed form again, print again, same text.
// RUN: gptc-opt %s | gptc-opt | FileCheck %s

// CHECK-LABEL: func.func @embedding
func.func @embedding(%wte: tensor<64x16xf32>, %ids: tensor<2x8xi32>) -> tensor<2x8x16xf32> {
  // CHECK: %[[X:.+]] = gpt.embedding %{{.+}}, %{{.+}} : tensor<64x16xf32>, tensor<2x8xi32> -> tensor<2x8x16xf32>
  %x = gpt.embedding %wte, %ids : tensor<64x16xf32>, tensor<2x8xi32> -> tensor<2x8x16xf32>
  return %x : tensor<2x8x16xf32>
}

// The scatter-add of an embedding's gradient, alone and with an addend
// (a tied table's other gradient).
// CHECK-LABEL: func.func @embedding_grad
func.func @embedding_grad(%dy: tensor<2x8x16xf32>, %ids: tensor<2x8xi32>, %head: tensor<64x16xf32>) -> (tensor<64x16xf32>, tensor<64x16xf32>) {
  // CHECK: gpt.embedding_grad %{{.+}}, %{{.+}} : tensor<2x8x16xf32>, tensor<2x8xi32> -> tensor<64x16xf32>
  %a = gpt.embedding_grad %dy, %ids : tensor<2x8x16xf32>, tensor<2x8xi32> -> tensor<64x16xf32>
  // CHECK: gpt.embedding_grad %{{.+}}, %{{.+}}, %{{.+}} : tensor<2x8x16xf32>, tensor<2x8xi32>, tensor<64x16xf32> -> tensor<64x16xf32>
  %b = gpt.embedding_grad %dy, %ids, %head : tensor<2x8x16xf32>, tensor<2x8xi32>, tensor<64x16xf32> -> tensor<64x16xf32>
  return %a, %b : tensor<64x16xf32>, tensor<64x16xf32>
}

// CHECK-LABEL: func.func @iota_and_constant
func.func @iota_and_constant() -> (tensor<8xi32>, tensor<f32>) {
  // CHECK: gpt.iota : tensor<8xi32>
  %p = gpt.iota : tensor<8xi32>
  // CHECK: gpt.constant dense<1.250000e-01> : tensor<f32>
  %c = gpt.constant dense<0.125> : tensor<f32>
  return %p, %c : tensor<8xi32>, tensor<f32>
}

// CHECK-LABEL: func.func @matmuls
func.func @matmuls(%x: tensor<2x8x16xf32>, %w: tensor<16x32xf32>, %wte: tensor<64x16xf32>,
                   %q: tensor<2x4x8x4xf32>, %k: tensor<2x4x8x4xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x64xf32>, tensor<2x4x8x8xf32>, tensor<2x4x4x4xf32>) {
  // CHECK: gpt.matmul %{{.+}}, %{{.+}} : tensor<2x8x16xf32>, tensor<16x32xf32> -> tensor<2x8x32xf32>
  %a = gpt.matmul %x, %w : tensor<2x8x16xf32>, tensor<16x32xf32> -> tensor<2x8x32xf32>
  // CHECK: gpt.matmul %{{.+}}, %{{.+}} {transpose_b} : tensor<2x8x16xf32>, tensor<64x16xf32> -> tensor<2x8x64xf32>
  %b = gpt.matmul %x, %wte {transpose_b} : tensor<2x8x16xf32>, tensor<64x16xf32> -> tensor<2x8x64xf32>
  // CHECK: gpt.matmul %{{.+}}, %{{.+}} {transpose_b} : tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32> -> tensor<2x4x8x8xf32>
  %s = gpt.matmul %q, %k {transpose_b} : tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32> -> tensor<2x4x8x8xf32>
  // CHECK: gpt.matmul %{{.+}}, %{{.+}} {transpose_a} : tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32> -> tensor<2x4x4x4xf32>
  %t = gpt.matmul %q, %k {transpose_a} : tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32> -> tensor<2x4x4x4xf32>
  return %a, %b, %s, %t : tensor<2x8x32xf32>, tensor<2x8x64xf32>, tensor<2x4x8x8xf32>, tensor<2x4x4x4xf32>
}

// CHECK-LABEL: func.func @norms
func.func @norms(%x: tensor<2x8x16xf32>, %g: tensor<16xf32>, %b: tensor<16xf32>, %s: tensor<2x4x8x8xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x4x8x8xf32>) {
  // CHECK: gpt.layernorm %{{.+}}, %{{.+}}, %{{.+}} : tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>
  %ln = gpt.layernorm %x, %g, %b : tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>
  // CHECK: gpt.layernorm {{.+}} {epsilon = 9.99999997E-7 : f32}
  %ln2 = gpt.layernorm %x, %g, %b {epsilon = 1.0e-6 : f32} : tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>
  // CHECK: %[[M:.+]] = gpt.causal_mask %{{.+}} : tensor<2x4x8x8xf32>
  %m = gpt.causal_mask %s : tensor<2x4x8x8xf32>
  // CHECK: gpt.softmax %[[M]] : tensor<2x4x8x8xf32>
  %p = gpt.softmax %m : tensor<2x4x8x8xf32>
  return %ln, %ln2, %p : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x4x8x8xf32>
}

// CHECK-LABEL: func.func @attention
func.func @attention(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x4x8x16xf32>, %do: tensor<2x4x8x16xf32>, %kx: tensor<2x4x5x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) {
  // CHECK: %[[O:.+]], %[[L:.+]] = gpt.flash_attention %{{.+}}, %{{.+}}, %{{.+}} {causal, scale = 2.500000e-01 : f32} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32> -> tensor<2x4x8x16xf32>, tensor<2x4x8xf32>
  %o, %lse = gpt.flash_attention %q, %k, %v {causal, scale = 0.25 : f32} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32> -> tensor<2x4x8x16xf32>, tensor<2x4x8xf32>
  // CHECK: gpt.flash_attention_grad %{{.+}}, %{{.+}}, %{{.+}}, %[[O]], %[[L]], %{{.+}} {causal, scale = 2.500000e-01 : f32} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8xf32>
  %dq, %dk, %dv = gpt.flash_attention_grad %q, %k, %v, %o, %lse, %do {causal, scale = 0.25 : f32} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8xf32>
  // The row terms as their own op, and a gradient that reads them.
  // CHECK: %[[D:.+]] = gpt.attention_row_dot %[[O]], %{{.+}} : tensor<2x4x8x16xf32> -> tensor<2x4x8xf32>
  %delta = gpt.attention_row_dot %o, %do : tensor<2x4x8x16xf32> -> tensor<2x4x8xf32>
  // CHECK: gpt.flash_attention_grad %{{.+}}, %{{.+}}, %{{.+}}, %[[O]], %[[L]], %{{.+}}, %[[D]] {causal, scale = 2.500000e-01 : f32} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  %dq2, %dk2, %dv2 = gpt.flash_attention_grad %q, %k, %v, %o, %lse, %do, %delta {causal, scale = 0.25 : f32} : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  // Without causal, keys and queries may differ in number.
  // CHECK: gpt.flash_attention %{{.+}}, %{{.+}}, %{{.+}} {scale = 2.500000e-01 : f32} : tensor<2x4x8x16xf32>, tensor<2x4x5x16xf32>, tensor<2x4x5x16xf32> -> tensor<2x4x8x16xf32>, tensor<2x4x8xf32>
  %x, %xlse = gpt.flash_attention %q, %kx, %kx {scale = 0.25 : f32} : tensor<2x4x8x16xf32>, tensor<2x4x5x16xf32>, tensor<2x4x5x16xf32> -> tensor<2x4x8x16xf32>, tensor<2x4x8xf32>
  return %o, %dq, %dk, %dv, %x : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
}

// CHECK-LABEL: func.func @attention_qkv
func.func @attention_qkv(%qkv: tensor<2x8x48xbf16>, %do: tensor<2x8x16xbf16>) -> (tensor<2x8x16xbf16>, tensor<2x8x48xbf16>) {
  // CHECK: %[[O:.+]], %[[L:.+]] = gpt.flash_attention_qkv %[[QKV:.+]] {causal, num_heads = 4 : i64, scale = 5.000000e-01 : f32} : tensor<2x8x48xbf16> -> tensor<2x8x16xbf16>, tensor<2x4x8xf32>
  %o, %lse = gpt.flash_attention_qkv %qkv {causal, num_heads = 4 : i64, scale = 0.5 : f32} : tensor<2x8x48xbf16> -> tensor<2x8x16xbf16>, tensor<2x4x8xf32>
  // CHECK: gpt.flash_attention_qkv_grad %[[QKV]], %[[O]], %[[L]], %{{.+}} {causal, num_heads = 4 : i64, scale = 5.000000e-01 : f32} : tensor<2x8x48xbf16>, tensor<2x8x16xbf16>, tensor<2x4x8xf32>
  %dqkv = gpt.flash_attention_qkv_grad %qkv, %o, %lse, %do {causal, num_heads = 4 : i64, scale = 0.5 : f32} : tensor<2x8x48xbf16>, tensor<2x8x16xbf16>, tensor<2x4x8xf32>
  // CHECK: %[[D:.+]] = gpt.attention_row_dot %[[O]], %{{.+}} {num_heads = 4 : i64} : tensor<2x8x16xbf16> -> tensor<2x4x8xf32>
  %delta = gpt.attention_row_dot %o, %do {num_heads = 4 : i64} : tensor<2x8x16xbf16> -> tensor<2x4x8xf32>
  // CHECK: gpt.flash_attention_qkv_grad %[[QKV]], %[[O]], %[[L]], %{{.+}}, %[[D]] {causal, num_heads = 4 : i64, scale = 5.000000e-01 : f32} : tensor<2x8x48xbf16>, tensor<2x8x16xbf16>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  %dqkv2 = gpt.flash_attention_qkv_grad %qkv, %o, %lse, %do, %delta {causal, num_heads = 4 : i64, scale = 0.5 : f32} : tensor<2x8x48xbf16>, tensor<2x8x16xbf16>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  // CHECK: gpt.attention_bias_grad %{{.+}}, %{{.+}} : tensor<2x8x48xbf16>, tensor<2x8x16xbf16> -> tensor<48xf32>
  %db = gpt.attention_bias_grad %dqkv2, %do : tensor<2x8x48xbf16>, tensor<2x8x16xbf16> -> tensor<48xf32>
  return %o, %dqkv : tensor<2x8x16xbf16>, tensor<2x8x48xbf16>
}

// CHECK-LABEL: func.func @gelu
func.func @gelu(%x: tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>) {
  // The tanh form is the default and is not printed.
  // CHECK: gpt.gelu %{{.+}} : tensor<4x16xf32>
  %a = gpt.gelu %x : tensor<4x16xf32>
  // CHECK: gpt.gelu %{{.+}} {approximate = "none"} : tensor<4x16xf32>
  %b = gpt.gelu %x {approximate = "none"} : tensor<4x16xf32>
  return %a, %b : tensor<4x16xf32>, tensor<4x16xf32>
}

// CHECK-LABEL: func.func @shapes
func.func @shapes(%x: tensor<2x8x48xf32>) -> (tensor<2x4x8x4xf32>, tensor<2x8x16xf32>) {
  // CHECK: %[[P:.+]]:3 = gpt.split %{{.+}} {axis = 2 : i64} : tensor<2x8x48xf32> -> tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
  %q, %k, %v = gpt.split %x {axis = 2} : tensor<2x8x48xf32> -> tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
  // CHECK: gpt.reshape %[[P]]#0 : tensor<2x8x16xf32> -> tensor<2x8x4x4xf32>
  %r = gpt.reshape %q : tensor<2x8x16xf32> -> tensor<2x8x4x4xf32>
  // CHECK: gpt.transpose %{{.+}} [0, 2, 1, 3] : tensor<2x8x4x4xf32> -> tensor<2x4x8x4xf32>
  %t = gpt.transpose %r [0, 2, 1, 3] : tensor<2x8x4x4xf32> -> tensor<2x4x8x4xf32>
  return %t, %v : tensor<2x4x8x4xf32>, tensor<2x8x16xf32>
}

// CHECK-LABEL: func.func @loss
func.func @loss(%logits: tensor<2x8x64xf32>, %targets: tensor<2x8xi32>) -> tensor<f32> {
  // CHECK: gpt.cross_entropy %{{.+}}, %{{.+}} : tensor<2x8x64xf32>, tensor<2x8xi32> -> tensor<f32>
  %l = gpt.cross_entropy %logits, %targets : tensor<2x8x64xf32>, tensor<2x8xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%x: tensor<2x8x16xf32>, %b: tensor<16xf32>, %s: tensor<f32>) -> tensor<2x8x16xf32> {
  // CHECK: gpt.add %{{.+}}, %{{.+}} : tensor<2x8x16xf32>, tensor<16xf32> -> tensor<2x8x16xf32>
  %0 = gpt.add %x, %b : tensor<2x8x16xf32>, tensor<16xf32> -> tensor<2x8x16xf32>
  // CHECK: gpt.sub
  %1 = gpt.sub %0, %x : tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<2x8x16xf32>
  // CHECK: gpt.mul %{{.+}}, %{{.+}} : tensor<2x8x16xf32>, tensor<f32> -> tensor<2x8x16xf32>
  %2 = gpt.mul %1, %s : tensor<2x8x16xf32>, tensor<f32> -> tensor<2x8x16xf32>
  // CHECK: gpt.div
  %3 = gpt.div %2, %x : tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<2x8x16xf32>
  // CHECK: gpt.neg
  %4 = gpt.neg %3 : tensor<2x8x16xf32>
  // CHECK: gpt.exp
  %5 = gpt.exp %4 : tensor<2x8x16xf32>
  // CHECK: gpt.log
  %6 = gpt.log %5 : tensor<2x8x16xf32>
  // CHECK: gpt.tanh
  %7 = gpt.tanh %6 : tensor<2x8x16xf32>
  // CHECK: gpt.sqrt
  %8 = gpt.sqrt %7 : tensor<2x8x16xf32>
  // CHECK: gpt.rsqrt
  %9 = gpt.rsqrt %8 : tensor<2x8x16xf32>
  return %9 : tensor<2x8x16xf32>
}

// CHECK-LABEL: func.func @model_attributes
// CHECK-SAME: gpt.init = "normal", gpt.init_std = 2.000000e-02 : f32, gpt.param = "wte.weight"
// CHECK-SAME: gpt.input = "tokens"
// CHECK-SAME: gpt.output = "loss"
func.func @model_attributes(%wte: tensor<64x16xf32> {gpt.param = "wte.weight", gpt.init = "normal", gpt.init_std = 0.02 : f32},
                            %tokens: tensor<2x8xi32> {gpt.input = "tokens"}) -> (tensor<f32> {gpt.output = "loss"}) {
  %c = gpt.constant dense<0.0> : tensor<f32>
  return %c : tensor<f32>
}

// CHECK-LABEL: func.func @casts
// CHECK: gpt.cast %{{.*}} : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK: gpt.cast %{{.*}} : tensor<4x8xbf16> -> tensor<4x8xf16>
// CHECK: gpt.cast %{{.*}} : tensor<4x8xf16> -> tensor<4x8xf32>
func.func @casts(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %b = gpt.cast %x : tensor<4x8xf32> -> tensor<4x8xbf16>
  %h = gpt.cast %b : tensor<4x8xbf16> -> tensor<4x8xf16>
  %y = gpt.cast %h : tensor<4x8xf16> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// gpt-pad-dims' ops and the loss's padding attributes.
// CHECK-LABEL: func.func @padding
// CHECK: gpt.pad %{{.*}} : tensor<50257x768xf32> -> tensor<50304x768xf32>
// CHECK: gpt.pad %{{.*}} {value = -1 : i64} : tensor<2x100xi32> -> tensor<2x128xi32>
// CHECK: gpt.cross_entropy %{{.*}}, %{{.*}} {ignore_index = -1 : i64, num_classes = 50257 : i64}
// CHECK: gpt.slice %{{.*}} : tensor<2x128x50304xf32> -> tensor<2x100x50257xf32>
func.func @padding(%w: tensor<50257x768xf32>, %t: tensor<2x100xi32>, %l: tensor<2x128x50304xf32>) -> tensor<2x100x50257xf32> {
  %wp = gpt.pad %w : tensor<50257x768xf32> -> tensor<50304x768xf32>
  %tp = gpt.pad %t {value = -1 : i64} : tensor<2x100xi32> -> tensor<2x128xi32>
  %loss = gpt.cross_entropy %l, %tp {ignore_index = -1 : i64, num_classes = 50257 : i64} : tensor<2x128x50304xf32>, tensor<2x128xi32> -> tensor<f32>
  %s = gpt.slice %l : tensor<2x128x50304xf32> -> tensor<2x100x50257xf32>
  return %s : tensor<2x100x50257xf32>
}

// Layout ops that also convert between float types (a folded gpt.cast).
// CHECK-LABEL: func.func @converting_layout
// CHECK: gpt.transpose %{{.+}} [0, 2, 1, 3] : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xbf16>
// CHECK: gpt.concat %{{.+}}, %{{.+}} {axis = 1 : i64} : tensor<2x4xbf16>, tensor<2x4xbf16> -> tensor<2x8xf32>
// CHECK: gpt.split %{{.+}} {axis = 1 : i64} : tensor<2x8xf32> -> tensor<2x4xbf16>, tensor<2x4xbf16>
// CHECK: gpt.slice %{{.+}} : tensor<2x8xf32> -> tensor<2x6xf16>
func.func @converting_layout(%q: tensor<2x8x4x16xf32>, %a: tensor<2x4xbf16>, %b: tensor<2x4xbf16>, %x: tensor<2x8xf32>) {
  %t = gpt.transpose %q [0, 2, 1, 3] : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xbf16>
  %c = gpt.concat %a, %b {axis = 1 : i64} : tensor<2x4xbf16>, tensor<2x4xbf16> -> tensor<2x8xf32>
  %s:2 = gpt.split %x {axis = 1 : i64} : tensor<2x8xf32> -> tensor<2x4xbf16>, tensor<2x4xbf16>
  %l = gpt.slice %x : tensor<2x8xf32> -> tensor<2x6xf16>
  return
}

// A fused layernorm gradient's body yields float32; each value is rounded
// to its own type when written (here the residual gradient and its bf16
// copy for the next GEMM).
// CHECK-LABEL: func.func @layernorm_grad_values
// CHECK: gpt.fused_layernorm_grad {{.+}} -> tensor<8xf32>, tensor<8xf32>, tensor<2x8xf32>, tensor<2x8xbf16> {
func.func @layernorm_grad_values(%x: tensor<2x8xf32>, %g: tensor<8xf32>, %dy: tensor<2x8xbf16>, %r: tensor<2x8xf32>) {
  %dg, %db, %v:2 = gpt.fused_layernorm_grad %x, %g, %dy : tensor<2x8xf32>, tensor<8xf32>, tensor<2x8xbf16> epilogue(%r : tensor<2x8xf32>) -> tensor<8xf32>, tensor<8xf32>, tensor<2x8xf32>, tensor<2x8xbf16> {
  ^bb0(%dx: f32, %a: f32):
    %s = arith.addf %a, %dx : f32
    gpt.yield %s, %s : f32, f32
  }
  return
}

// A [C] value is the column sums of what the body yields for it (an output
// projection's bias gradient), not written.
// CHECK-LABEL: func.func @layernorm_grad_column_sums
// CHECK: gpt.fused_layernorm_grad {{.+}} -> tensor<8xf32>, tensor<8xf32>, tensor<2x8xbf16>, tensor<8xf32> {
func.func @layernorm_grad_column_sums(%x: tensor<2x8xf32>, %g: tensor<8xf32>, %dy: tensor<2x8xbf16>, %r: tensor<2x8xf32>) {
  %dg, %db, %v:2 = gpt.fused_layernorm_grad %x, %g, %dy : tensor<2x8xf32>, tensor<8xf32>, tensor<2x8xbf16> epilogue(%r : tensor<2x8xf32>) -> tensor<8xf32>, tensor<8xf32>, tensor<2x8xbf16>, tensor<8xf32> {
  ^bb0(%dx: f32, %a: f32):
    %s = arith.addf %a, %dx : f32
    gpt.yield %s, %s : f32, f32
  }
  return
}

// A fused elementwise op's bf16 result may be yielded as float32: it is
// rounded when written (a narrowing cast folded into the group).
// CHECK-LABEL: func.func @elementwise_narrow_result
// CHECK: gpt.fused_elementwise(%{{.+}} : tensor<2x8xbf16>) -> tensor<2x8xbf16>, tensor<2x8xf32> {
func.func @elementwise_narrow_result(%x: tensor<2x8xbf16>) {
  %r:2 = gpt.fused_elementwise(%x : tensor<2x8xbf16>) -> tensor<2x8xbf16>, tensor<2x8xf32> {
  ^bb0(%a: bf16):
    %w = arith.extf %a : bf16 to f32
    %t = math.tanh %w : f32
    gpt.yield %t, %t : f32, f32
  }
  return
}

// Sums down to a broadcastable shape: a bias gradient, bf16 terms into an
// f32 sum, and the q third of each packed row (a corner).
// CHECK-LABEL: func.func @reduce_sum
func.func @reduce_sum(%x: tensor<2x4x24xf32>, %h: tensor<8x3x8xbf16>) -> (tensor<24xf32>, tensor<3x8xf32>, tensor<8xf32>) {
  // CHECK: gpt.reduce_sum %{{.+}} : tensor<2x4x24xf32> -> tensor<24xf32>
  %a = gpt.reduce_sum %x : tensor<2x4x24xf32> -> tensor<24xf32>
  // CHECK: gpt.reduce_sum %{{.+}} : tensor<8x3x8xbf16> -> tensor<3x8xf32>
  %b = gpt.reduce_sum %h : tensor<8x3x8xbf16> -> tensor<3x8xf32>
  // CHECK: gpt.reduce_sum %{{.+}} {corner = array<i64: 8, 1, 8>} : tensor<8x3x8xbf16> -> tensor<8xf32>
  %c = gpt.reduce_sum %h {corner = array<i64: 8, 1, 8>} : tensor<8x3x8xbf16> -> tensor<8xf32>
  return %a, %b, %c : tensor<24xf32>, tensor<3x8xf32>, tensor<8xf32>
}
