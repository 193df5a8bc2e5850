// RUN: gptc-opt %s -split-input-file -gpt-pad-dims -verify-diagnostics | FileCheck %s
// RUN: gptc-opt %s -split-input-file -gpt-pad-dims=multiple=8 2>/dev/null | FileCheck %s --check-prefix=EIGHT
// RUN: not gptc-opt %s -split-input-file -gpt-pad-dims=multiple=0 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not gptc-opt %s -split-input-file -gpt-pad-dims=multiple=-64 2>&1 | FileCheck %s --check-prefix=NEGATIVE

// ZERO: error: gpt-pad-dims: multiple must be positive, got 0
// NEGATIVE: error: gpt-pad-dims: multiple must be positive, got -64

// The lm_head of GPT-2: wte's 50257 rows become 50304 inside the function;
// the loss takes the padded logits and knows the real vocabulary; the
// logits result is sliced back. Arguments keep their real shapes.
// CHECK-LABEL: func.func @lm_head
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4x64x768xf32>, %[[WTE:[^:]+]]: tensor<50257x768xf32> {gpt.param = "wte.weight"}, %[[T:[^:]+]]: tensor<4x64xi32>
// CHECK-SAME: -> (tensor<f32> {gpt.output = "loss"}, tensor<4x64x50257xf32> {gpt.output = "logits"})
// CHECK: %[[WP:.+]] = gpt.pad %[[WTE]] : tensor<50257x768xf32> -> tensor<50304x768xf32>
// CHECK: %[[L:.+]] = gpt.matmul %[[X]], %[[WP]] {transpose_b} : tensor<4x64x768xf32>, tensor<50304x768xf32> -> tensor<4x64x50304xf32>
// CHECK: %[[S:.+]] = gpt.slice %[[L]] : tensor<4x64x50304xf32> -> tensor<4x64x50257xf32>
// CHECK: %[[LOSS:.+]] = gpt.cross_entropy %[[L]], %[[T]] {num_classes = 50257 : i64} : tensor<4x64x50304xf32>
// CHECK: return %[[LOSS]], %[[S]]
func.func @lm_head(%x: tensor<4x64x768xf32>, %wte: tensor<50257x768xf32> {gpt.param = "wte.weight"},
                   %t: tensor<4x64xi32> {gpt.input = "targets"})
    -> (tensor<f32> {gpt.output = "loss"}, tensor<4x64x50257xf32> {gpt.output = "logits"}) {
  %l = gpt.matmul %x, %wte {transpose_b} : tensor<4x64x768xf32>, tensor<50257x768xf32> -> tensor<4x64x50257xf32>
  %loss = gpt.cross_entropy %l, %t : tensor<4x64x50257xf32>, tensor<4x64xi32> -> tensor<f32>
  return %loss, %l : tensor<f32>, tensor<4x64x50257xf32>
}

// -----

// An awkward linear layer: K = 100 and N = 300 are padded with zeros (the
// activation's K too), the result is sliced back before the bias add; the
// sequence (T = 64) needs nothing.
// CHECK-LABEL: func.func @linear
// CHECK: %[[XP:.+]] = gpt.pad %{{.+}} : tensor<2x64x100xf32> -> tensor<2x64x128xf32>
// CHECK: %[[WP:.+]] = gpt.pad %{{.+}} : tensor<100x300xf32> -> tensor<128x320xf32>
// CHECK: %[[Y:.+]] = gpt.matmul %[[XP]], %[[WP]] : tensor<2x64x128xf32>, tensor<128x320xf32> -> tensor<2x64x320xf32>
// CHECK: %[[S:.+]] = gpt.slice %[[Y]] : tensor<2x64x320xf32> -> tensor<2x64x300xf32>
// CHECK: gpt.add %[[S]], %{{.+}} : tensor<2x64x300xf32>, tensor<300xf32>
// EIGHT-LABEL: func.func @linear
// EIGHT: gpt.pad %{{.+}} : tensor<2x64x100xf32> -> tensor<2x64x104xf32>
// EIGHT: gpt.pad %{{.+}} : tensor<100x300xf32> -> tensor<104x304xf32>
func.func @linear(%x: tensor<2x64x100xf32>, %w: tensor<100x300xf32> {gpt.param = "w"}, %b: tensor<300xf32> {gpt.param = "b"},
                  %t: tensor<2x64xi32> {gpt.input = "targets"}) -> (tensor<f32> {gpt.output = "loss"}) {
  %y = gpt.matmul %x, %w : tensor<2x64x100xf32>, tensor<100x300xf32> -> tensor<2x64x300xf32>
  %z = gpt.add %y, %b : tensor<2x64x300xf32>, tensor<300xf32> -> tensor<2x64x300xf32>
  %l = gpt.cross_entropy %z, %t : tensor<2x64x300xf32>, tensor<2x64xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Nothing to pad: every dimension is already a multiple of 64.
// CHECK-LABEL: func.func @aligned
// CHECK-NOT: gpt.pad
// CHECK-NOT: gpt.slice
// CHECK: gpt.matmul %{{.+}}, %{{.+}} : tensor<2x64x128xf32>, tensor<128x256xf32> -> tensor<2x64x256xf32>
// CHECK-NEXT: gpt.cross_entropy
// CHECK-NOT: num_classes
func.func @aligned(%x: tensor<2x64x128xf32>, %w: tensor<128x256xf32> {gpt.param = "w"},
                   %t: tensor<2x64xi32> {gpt.input = "targets"}) -> (tensor<f32> {gpt.output = "loss"}) {
  %y = gpt.matmul %x, %w : tensor<2x64x128xf32>, tensor<128x256xf32> -> tensor<2x64x256xf32>
  %l = gpt.cross_entropy %y, %t : tensor<2x64x256xf32>, tensor<2x64xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A function without a loss is not a forward graph: left alone.
// CHECK-LABEL: func.func @no_loss
// CHECK-NOT: gpt.pad
func.func @no_loss(%x: tensor<2x3x100xf32>, %w: tensor<100x300xf32>) -> tensor<2x3x300xf32> {
  %y = gpt.matmul %x, %w : tensor<2x3x100xf32>, tensor<100x300xf32> -> tensor<2x3x300xf32>
  return %y : tensor<2x3x300xf32>
}

// -----

// The sequence T = 100 → 128, through embeddings, positions and causal
// attention written out: tokens padded with id 0, targets with -1 (ignored
// by the loss), positions with 0; the logits sliced back.
// CHECK-LABEL: func.func @sequence
// CHECK-SAME: (%[[TOK:[^:]+]]: tensor<2x100xi32> {gpt.input = "tokens"}, %[[TGT:[^:]+]]: tensor<2x100xi32> {gpt.input = "targets"}
// CHECK-DAG: %[[TP:.+]] = gpt.pad %[[TGT]] {value = -1 : i64} : tensor<2x100xi32> -> tensor<2x128xi32>
// CHECK-DAG: %[[KP:.+]] = gpt.pad %[[TOK]] : tensor<2x100xi32> -> tensor<2x128xi32>
// CHECK: %[[IOTA:.+]] = gpt.iota : tensor<100xi32>
// CHECK: %[[POS:.+]] = gpt.pad %[[IOTA]] : tensor<100xi32> -> tensor<128xi32>
// CHECK: gpt.embedding %{{.+}}, %[[KP]] : tensor<64x64xf32>, tensor<2x128xi32> -> tensor<2x128x64xf32>
// CHECK: gpt.embedding %{{.+}}, %[[POS]] : tensor<100x64xf32>, tensor<128xi32> -> tensor<128x64xf32>
// CHECK: gpt.causal_mask %{{.+}} : tensor<2x4x128x128xf32>
// CHECK: gpt.softmax %{{.+}} : tensor<2x4x128x128xf32>
// CHECK: gpt.matmul %{{.+}}, %{{.+}} : tensor<2x4x128x128xf32>, tensor<2x4x128x16xf32> -> tensor<2x4x128x16xf32>
// CHECK: gpt.reshape %{{.+}} : tensor<2x128x4x16xf32> -> tensor<2x128x64xf32>
// CHECK: %[[L:.+]] = gpt.matmul %{{.+}}, %{{.+}} {transpose_b} : tensor<2x128x64xf32>, tensor<64x64xf32> -> tensor<2x128x64xf32>
// CHECK: %[[LOSS:.+]] = gpt.cross_entropy %[[L]], %[[TP]] {ignore_index = -1 : i64} : tensor<2x128x64xf32>, tensor<2x128xi32> -> tensor<f32>
// CHECK: %[[S:.+]] = gpt.slice %[[L]] : tensor<2x128x64xf32> -> tensor<2x100x64xf32>
// CHECK: return %[[LOSS]], %[[S]]
func.func @sequence(%tok: tensor<2x100xi32> {gpt.input = "tokens"}, %tgt: tensor<2x100xi32> {gpt.input = "targets"},
                    %wte: tensor<64x64xf32> {gpt.param = "wte"}, %wpe: tensor<100x64xf32> {gpt.param = "wpe"})
    -> (tensor<f32> {gpt.output = "loss"}, tensor<2x100x64xf32> {gpt.output = "logits"}) {
  %pos = gpt.iota : tensor<100xi32>
  %te = gpt.embedding %wte, %tok : tensor<64x64xf32>, tensor<2x100xi32> -> tensor<2x100x64xf32>
  %pe = gpt.embedding %wpe, %pos : tensor<100x64xf32>, tensor<100xi32> -> tensor<100x64xf32>
  %x = gpt.add %te, %pe : tensor<2x100x64xf32>, tensor<100x64xf32> -> tensor<2x100x64xf32>
  %x4 = gpt.reshape %x : tensor<2x100x64xf32> -> tensor<2x100x4x16xf32>
  %h = gpt.transpose %x4 [0, 2, 1, 3] : tensor<2x100x4x16xf32> -> tensor<2x4x100x16xf32>
  %s = gpt.matmul %h, %h {transpose_b} : tensor<2x4x100x16xf32>, tensor<2x4x100x16xf32> -> tensor<2x4x100x100xf32>
  %m = gpt.causal_mask %s : tensor<2x4x100x100xf32>
  %p = gpt.softmax %m : tensor<2x4x100x100xf32>
  %o = gpt.matmul %p, %h : tensor<2x4x100x100xf32>, tensor<2x4x100x16xf32> -> tensor<2x4x100x16xf32>
  %ot = gpt.transpose %o [0, 2, 1, 3] : tensor<2x4x100x16xf32> -> tensor<2x100x4x16xf32>
  %y = gpt.reshape %ot : tensor<2x100x4x16xf32> -> tensor<2x100x64xf32>
  %l = gpt.matmul %y, %wte {transpose_b} : tensor<2x100x64xf32>, tensor<64x64xf32> -> tensor<2x100x64xf32>
  %loss = gpt.cross_entropy %l, %tgt : tensor<2x100x64xf32>, tensor<2x100xi32> -> tensor<f32>
  return %loss, %l : tensor<f32>, tensor<2x100x64xf32>
}

// -----

// Attention without a causal mask would let real queries see padded keys:
// the sequence stays as it is, with a remark saying why.
// CHECK-LABEL: func.func @not_causal
// CHECK-NOT: gpt.pad
// CHECK: gpt.softmax %{{.+}} : tensor<2x100x100xf32>
func.func @not_causal(%tok: tensor<2x100xi32> {gpt.input = "tokens"}, %tgt: tensor<2x100xi32> {gpt.input = "targets"},
                      %wte: tensor<64x64xf32> {gpt.param = "wte"}) -> (tensor<f32> {gpt.output = "loss"}) {
  %x = gpt.embedding %wte, %tok : tensor<64x64xf32>, tensor<2x100xi32> -> tensor<2x100x64xf32>
  %s = gpt.matmul %x, %x {transpose_b} : tensor<2x100x64xf32>, tensor<2x100x64xf32> -> tensor<2x100x100xf32>
  // expected-remark @below {{did not pad the sequence 100 to 128: gpt.softmax over padded keys that no causal mask hides}}
  %p = gpt.softmax %s : tensor<2x100x100xf32>
  %o = gpt.matmul %p, %x : tensor<2x100x100xf32>, tensor<2x100x64xf32> -> tensor<2x100x64xf32>
  %loss = gpt.cross_entropy %o, %tgt : tensor<2x100x64xf32>, tensor<2x100xi32> -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// A layernorm across positions would mix padded ones into real ones.
// CHECK-LABEL: func.func @norm_over_positions
// CHECK-NOT: gpt.pad
func.func @norm_over_positions(%tok: tensor<2x100xi32> {gpt.input = "tokens"}, %tgt: tensor<2x100xi32> {gpt.input = "targets"},
                               %wte: tensor<64x64xf32> {gpt.param = "wte"}, %g: tensor<100xf32> {gpt.param = "g"}) -> (tensor<f32> {gpt.output = "loss"}) {
  %x = gpt.embedding %wte, %tok : tensor<64x64xf32>, tensor<2x100xi32> -> tensor<2x100x64xf32>
  %xt = gpt.transpose %x [0, 2, 1] : tensor<2x100x64xf32> -> tensor<2x64x100xf32>
  // expected-remark @below {{did not pad the sequence 100 to 128: gpt.layernorm normalises over it}}
  %n = gpt.layernorm %xt, %g, %g : tensor<2x64x100xf32>, tensor<100xf32>, tensor<100xf32>
  %y = gpt.transpose %n [0, 2, 1] : tensor<2x64x100xf32> -> tensor<2x100x64xf32>
  %loss = gpt.cross_entropy %y, %tgt : tensor<2x100x64xf32>, tensor<2x100xi32> -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// The packed attention (gpt-fuse-attention forms it after padding in the
// pipeline, but the pass takes it anywhere): causal, so T = 100 → 128 pads
// its rows, lse and output with the rest of the sequence; the three parts
// of each row (3C = 192) keep their width.
// CHECK-LABEL: func.func @packed_attention
// CHECK: %[[QKV:.+]] = gpt.matmul %{{.+}}, %{{.+}} : tensor<2x128x64xf32>, tensor<64x192xf32> -> tensor<2x128x192xf32>
// CHECK: %[[Y:.+]], %[[LSE:.+]] = gpt.flash_attention_qkv %[[QKV]] {causal, num_heads = 4 : i64, scale = 2.500000e-01 : f32} : tensor<2x128x192xf32> -> tensor<2x128x64xf32>, tensor<2x4x128xf32>
// CHECK: %[[L:.+]] = gpt.matmul %[[Y]], %{{.+}} {transpose_b} : tensor<2x128x64xf32>, tensor<64x64xf32> -> tensor<2x128x64xf32>
// CHECK: gpt.slice %[[L]] : tensor<2x128x64xf32> -> tensor<2x100x64xf32>
func.func @packed_attention(%tok: tensor<2x100xi32> {gpt.input = "tokens"}, %tgt: tensor<2x100xi32> {gpt.input = "targets"},
                            %wte: tensor<64x64xf32> {gpt.param = "wte"}, %w: tensor<64x192xf32> {gpt.param = "c_attn"})
    -> (tensor<f32> {gpt.output = "loss"}, tensor<2x100x64xf32> {gpt.output = "logits"}) {
  %x = gpt.embedding %wte, %tok : tensor<64x64xf32>, tensor<2x100xi32> -> tensor<2x100x64xf32>
  %qkv = gpt.matmul %x, %w : tensor<2x100x64xf32>, tensor<64x192xf32> -> tensor<2x100x192xf32>
  %y, %lse = gpt.flash_attention_qkv %qkv {causal, num_heads = 4 : i64, scale = 0.25 : f32} : tensor<2x100x192xf32> -> tensor<2x100x64xf32>, tensor<2x4x100xf32>
  %l = gpt.matmul %y, %wte {transpose_b} : tensor<2x100x64xf32>, tensor<64x64xf32> -> tensor<2x100x64xf32>
  %loss = gpt.cross_entropy %l, %tgt : tensor<2x100x64xf32>, tensor<2x100xi32> -> tensor<f32>
  return %loss, %l : tensor<f32>, tensor<2x100x64xf32>
}

// -----

// Without the causal flag, real queries would see the padded keys.
// CHECK-LABEL: func.func @packed_attention_not_causal
// CHECK-NOT: gpt.pad
// CHECK: gpt.flash_attention_qkv %{{.+}} {num_heads = 4 : i64, scale = 2.500000e-01 : f32} : tensor<2x100x192xf32>
func.func @packed_attention_not_causal(%tok: tensor<2x100xi32> {gpt.input = "tokens"}, %tgt: tensor<2x100xi32> {gpt.input = "targets"},
                                       %wte: tensor<64x64xf32> {gpt.param = "wte"}, %w: tensor<64x192xf32> {gpt.param = "c_attn"})
    -> (tensor<f32> {gpt.output = "loss"}) {
  %x = gpt.embedding %wte, %tok : tensor<64x64xf32>, tensor<2x100xi32> -> tensor<2x100x64xf32>
  %qkv = gpt.matmul %x, %w : tensor<2x100x64xf32>, tensor<64x192xf32> -> tensor<2x100x192xf32>
  // expected-remark @below {{did not pad the sequence 100 to 128: padded keys would be visible to a non-causal gpt.flash_attention_qkv}}
  %y, %lse = gpt.flash_attention_qkv %qkv {num_heads = 4 : i64, scale = 0.25 : f32} : tensor<2x100x192xf32> -> tensor<2x100x64xf32>, tensor<2x4x100xf32>
  %l = gpt.matmul %y, %wte {transpose_b} : tensor<2x100x64xf32>, tensor<64x64xf32> -> tensor<2x100x64xf32>
  %loss = gpt.cross_entropy %l, %tgt : tensor<2x100x64xf32>, tensor<2x100xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
