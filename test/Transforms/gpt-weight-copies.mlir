// RUN: gptc-opt %s -split-input-file -gpt-weight-copies -verify-diagnostics | FileCheck %s

// The gradient function's narrowing casts of its parameters become
// arguments (gpt.param_copy), and the update returns the same casts of the
// new weights. `wte` is padded in its rows alone: the update writes the
// copy's leading rows (no pad). `p` is padded in its columns: the update
// writes the whole padded copy. The forward function keeps its cast.
// CHECK-LABEL: func.func @forward
// CHECK: gpt.cast
// CHECK-LABEL: func.func @grads
// CHECK-SAME: %[[W:[^:]+]]: tensor<8x8xf32> {gpt.param = "w"}
// CHECK-SAME: %[[WTE:[^:]+]]: tensor<10x8xf32> {gpt.param = "wte"}
// CHECK-SAME: %[[WC:[^:]+]]: tensor<8x8xbf16> {gpt.param_copy = "w"}
// CHECK-SAME: %[[WTEC:[^:]+]]: tensor<16x8xbf16> {gpt.param_copy = "wte"}
// CHECK-SAME: %[[PC:[^:]+]]: tensor<8x16xbf16> {gpt.param_copy = "p"}
// CHECK-NOT: gpt.cast %[[W]]
// CHECK-NOT: gpt.pad
// CHECK: gpt.matmul %{{.+}}, %[[WC]]
// CHECK: gpt.matmul %{{.+}}, %[[WTEC]] {transpose_b}
// CHECK: gpt.matmul %{{.+}}, %[[PC]]
// CHECK: gpt.embedding %[[WTE]]
// CHECK-LABEL: func.func @adamw_update
// CHECK-SAME: -> (tensor<8x8xf32> {gpt.param = "w"}, tensor<10x8xf32> {gpt.param = "wte"}, tensor<8x10xf32> {gpt.param = "p"}, tensor<8x8xbf16> {gpt.param_copy = "w"}, tensor<10x8xbf16> {gpt.param_copy = "wte"}, tensor<8x16xbf16> {gpt.param_copy = "p"})
// CHECK: %[[NW:.+]] = gpt.mul
// CHECK: %[[NWTE:.+]] = gpt.mul
// CHECK: %[[NP:.+]] = gpt.mul
// CHECK: %[[CW:.+]] = gpt.cast %[[NW]] : tensor<8x8xf32> -> tensor<8x8xbf16>
// CHECK: %[[CWTE:.+]] = gpt.cast %[[NWTE]] : tensor<10x8xf32> -> tensor<10x8xbf16>
// CHECK: %[[CP:.+]] = gpt.cast %[[NP]] : tensor<8x10xf32> -> tensor<8x10xbf16>
// CHECK: %[[PP:.+]] = gpt.pad %[[CP]] : tensor<8x10xbf16> -> tensor<8x16xbf16>
// CHECK: return %[[NW]], %[[NWTE]], %[[NP]], %[[CW]], %[[CWTE]], %[[PP]]
func.func @forward(%x: tensor<4x8xf32>, %w: tensor<8x8xf32> {gpt.param = "w"}) -> (tensor<4x8xbf16> {gpt.output = "loss"}) {
  %xl = gpt.cast %x : tensor<4x8xf32> -> tensor<4x8xbf16>
  %wl = gpt.cast %w : tensor<8x8xf32> -> tensor<8x8xbf16>
  %y = gpt.matmul %xl, %wl : tensor<4x8xbf16>, tensor<8x8xbf16> -> tensor<4x8xbf16>
  return %y : tensor<4x8xbf16>
}
func.func @grads(%x: tensor<4x8xbf16>, %ids: tensor<4xi32> {gpt.input = "targets"},
                 %w: tensor<8x8xf32> {gpt.param = "w"}, %wte: tensor<10x8xf32> {gpt.param = "wte"},
                 %p: tensor<8x10xf32> {gpt.param = "p"})
    -> (tensor<4x8xbf16> {gpt.grad = "w"}, tensor<4x16xbf16> {gpt.grad = "wte"}, tensor<4x16xbf16> {gpt.grad = "p"}, tensor<4x8xf32> {gpt.grad = "e"}) {
  %wl = gpt.cast %w : tensor<8x8xf32> -> tensor<8x8xbf16>
  %y = gpt.matmul %x, %wl : tensor<4x8xbf16>, tensor<8x8xbf16> -> tensor<4x8xbf16>
  %wtep = gpt.pad %wte : tensor<10x8xf32> -> tensor<16x8xf32>
  %wtel = gpt.cast %wtep : tensor<16x8xf32> -> tensor<16x8xbf16>
  %logits = gpt.matmul %x, %wtel {transpose_b} : tensor<4x8xbf16>, tensor<16x8xbf16> -> tensor<4x16xbf16>
  %pp = gpt.pad %p : tensor<8x10xf32> -> tensor<8x16xf32>
  %pl = gpt.cast %pp : tensor<8x16xf32> -> tensor<8x16xbf16>
  %z = gpt.matmul %x, %pl : tensor<4x8xbf16>, tensor<8x16xbf16> -> tensor<4x16xbf16>
  %e = gpt.embedding %wte, %ids : tensor<10x8xf32>, tensor<4xi32> -> tensor<4x8xf32>
  return %y, %logits, %z, %e : tensor<4x8xbf16>, tensor<4x16xbf16>, tensor<4x16xbf16>, tensor<4x8xf32>
}
func.func @adamw_update(%w: tensor<8x8xf32> {gpt.param = "w"}, %wte: tensor<10x8xf32> {gpt.param = "wte"},
                        %p: tensor<8x10xf32> {gpt.param = "p"})
    -> (tensor<8x8xf32> {gpt.param = "w"}, tensor<10x8xf32> {gpt.param = "wte"}, tensor<8x10xf32> {gpt.param = "p"}) {
  %nw = gpt.mul %w, %w : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  %nwte = gpt.mul %wte, %wte : tensor<10x8xf32>, tensor<10x8xf32> -> tensor<10x8xf32>
  %np = gpt.mul %p, %p : tensor<8x10xf32>, tensor<8x10xf32> -> tensor<8x10xf32>
  return %nw, %nwte, %np : tensor<8x8xf32>, tensor<10x8xf32>, tensor<8x10xf32>
}

// -----

// One parameter read as bf16 and as f16: one copy cannot be both, so its
// casts stay, with a remark; the update is unchanged.
// CHECK-LABEL: func.func @grads
// CHECK-SAME: (%[[W:[^:]+]]: tensor<8x8xf32> {gpt.param = "w"}, %{{[^:]+}}: tensor<4x8xbf16>) ->
// CHECK: gpt.cast %[[W]] : tensor<8x8xf32> -> tensor<8x8xbf16>
// CHECK: gpt.cast %[[W]] : tensor<8x8xf32> -> tensor<8x8xf16>
// CHECK-LABEL: func.func @adamw_update
// CHECK-SAME: -> (tensor<8x8xf32> {gpt.param = "w"})
// CHECK-NOT: gpt.cast
// expected-remark@+1 {{kept the casts of parameter 'w' in @grads: it is read as 'tensor<8x8xbf16>' and as 'tensor<8x8xf16>', and one copy can hold only one}}
func.func @grads(%w: tensor<8x8xf32> {gpt.param = "w"}, %x: tensor<4x8xbf16>)
    -> (tensor<8x8xbf16> {gpt.grad = "w"}, tensor<8x8xf16> {gpt.grad = "v"}) {
  %a = gpt.cast %w : tensor<8x8xf32> -> tensor<8x8xbf16>
  %b = gpt.cast %w : tensor<8x8xf32> -> tensor<8x8xf16>
  return %a, %b : tensor<8x8xbf16>, tensor<8x8xf16>
}
func.func @adamw_update(%w: tensor<8x8xf32> {gpt.param = "w"}) -> (tensor<8x8xf32> {gpt.param = "w"}) {
  return %w : tensor<8x8xf32>
}

// -----

// No update function (an evaluation module): nothing to write the copies,
// so the casts stay.
// CHECK-LABEL: func.func @grads
// CHECK-SAME: (%[[W:[^:]+]]: tensor<8x8xf32> {gpt.param = "w"}) ->
// CHECK: gpt.cast %[[W]]
func.func @grads(%w: tensor<8x8xf32> {gpt.param = "w"}) -> (tensor<8x8xbf16> {gpt.grad = "w"}) {
  %a = gpt.cast %w : tensor<8x8xf32> -> tensor<8x8xbf16>
  return %a : tensor<8x8xbf16>
}

// -----

// float32 throughout: no copy, the update as it was.
// CHECK-LABEL: func.func @grads
// CHECK-SAME: (%{{[^:]+}}: tensor<8x8xf32> {gpt.param = "w"}) -> (tensor<8x8xf32> {gpt.grad = "w"})
// CHECK-LABEL: func.func @adamw_update
// CHECK-SAME: -> (tensor<8x8xf32> {gpt.param = "w"})
// CHECK-NEXT: return
func.func @grads(%w: tensor<8x8xf32> {gpt.param = "w"}) -> (tensor<8x8xf32> {gpt.grad = "w"}) {
  %a = gpt.mul %w, %w : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  return %a : tensor<8x8xf32>
}
func.func @adamw_update(%w: tensor<8x8xf32> {gpt.param = "w"}) -> (tensor<8x8xf32> {gpt.param = "w"}) {
  return %w : tensor<8x8xf32>
}

// -----

// The gradient function reads a copy of a weight the update does not
// return: one error at the update.
// expected-error@+5 {{gpt-weight-copies: @adamw_update returns no gpt.param = "w" to write its copy from}}
func.func @grads(%w: tensor<8x8xf32> {gpt.param = "w"}) -> (tensor<8x8xbf16> {gpt.grad = "w"}) {
  %a = gpt.cast %w : tensor<8x8xf32> -> tensor<8x8xbf16>
  return %a : tensor<8x8xbf16>
}
func.func @adamw_update(%v: tensor<8x8xf32> {gpt.param = "v"}) -> (tensor<8x8xf32> {gpt.param = "v"}) {
  return %v : tensor<8x8xf32>
}
