// RUN: gptc-opt %s -split-input-file -gpt-fuse-elementwise -verify-diagnostics | FileCheck %s
// RUN: gptc-opt %s -split-input-file -gpt-fuse-elementwise=fold-casts=false | FileCheck %s --check-prefix=OFF
//
// gpt-fuse-elementwise's first step (lib/Transforms/FoldCasts.cpp): a cast
// next to a transpose, slice, pad, concat or split becomes that op's
// element-type conversion, reshapes between them seen through. Cases it
// leaves alone are not missed fusions but different values (or no kernel
// saved), so they get no remark.

// A head split: transpose, then the cast to the attention's bf16.
// CHECK-LABEL: func.func @split_heads
// CHECK-NEXT: %[[R:.+]] = gpt.reshape %{{.+}} : tensor<2x8x64xf32> -> tensor<2x8x4x16xf32>
// CHECK-NEXT: %[[T:.+]] = gpt.transpose %[[R]] [0, 2, 1, 3] : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xbf16>
// CHECK-NEXT: return %[[T]]
// OFF-LABEL: func.func @split_heads
// OFF: gpt.cast
func.func @split_heads(%q: tensor<2x8x64xf32>) -> tensor<2x4x8x16xbf16> {
  %r = gpt.reshape %q : tensor<2x8x64xf32> -> tensor<2x8x4x16xf32>
  %t = gpt.transpose %r [0, 2, 1, 3] : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  %c = gpt.cast %t : tensor<2x4x8x16xf32> -> tensor<2x4x8x16xbf16>
  return %c : tensor<2x4x8x16xbf16>
}

// -----

// A head merge between two bf16 ops: widen, transpose, reshape, narrow.
// Widening is exact, so both casts go and the transpose moves bf16; the
// reshape between is retyped.
// CHECK-LABEL: func.func @merge_heads
// CHECK-NEXT: %[[T:.+]] = gpt.transpose %{{.+}} [0, 2, 1, 3] : tensor<2x4x8x16xbf16> -> tensor<2x8x4x16xbf16>
// CHECK-NEXT: %[[R:.+]] = gpt.reshape %[[T]] : tensor<2x8x4x16xbf16> -> tensor<2x8x64xbf16>
// CHECK-NEXT: return %[[R]]
func.func @merge_heads(%o: tensor<2x4x8x16xbf16>) -> tensor<2x8x64xbf16> {
  %w = gpt.cast %o : tensor<2x4x8x16xbf16> -> tensor<2x4x8x16xf32>
  %t = gpt.transpose %w [0, 2, 1, 3] : tensor<2x4x8x16xf32> -> tensor<2x8x4x16xf32>
  %r = gpt.reshape %t : tensor<2x8x4x16xf32> -> tensor<2x8x64xf32>
  %c = gpt.cast %r : tensor<2x8x64xf32> -> tensor<2x8x64xbf16>
  return %c : tensor<2x8x64xbf16>
}

// -----

// Narrowing before the move and widening after it is not the identity:
// the transpose takes the first cast, the second stays.
// CHECK-LABEL: func.func @round_trip_stays
// CHECK-NEXT: %[[T:.+]] = gpt.transpose %{{.+}} [1, 0] : tensor<8x16xf32> -> tensor<16x8xbf16>
// CHECK-NEXT: %[[C:.+]] = gpt.cast %[[T]] : tensor<16x8xbf16> -> tensor<16x8xf32>
// CHECK-NEXT: return %[[C]]
func.func @round_trip_stays(%x: tensor<8x16xf32>) -> tensor<16x8xf32> {
  %n = gpt.cast %x : tensor<8x16xf32> -> tensor<8x16xbf16>
  %t = gpt.transpose %n [1, 0] : tensor<8x16xbf16> -> tensor<16x8xbf16>
  %w = gpt.cast %t : tensor<16x8xbf16> -> tensor<16x8xf32>
  return %w : tensor<16x8xf32>
}

// -----

// The transposed value is also read as it is: its float32 copy has to be
// written anyway, so the cast stays a kernel of its own.
// CHECK-LABEL: func.func @also_read
// CHECK: gpt.transpose %{{.+}} [1, 0] : tensor<8x16xf32> -> tensor<16x8xf32>
// CHECK-NEXT: gpt.cast
func.func @also_read(%x: tensor<8x16xf32>) -> (tensor<16x8xbf16>, tensor<16x8xf32>) {
  %t = gpt.transpose %x [1, 0] : tensor<8x16xf32> -> tensor<16x8xf32>
  %c = gpt.cast %t : tensor<16x8xf32> -> tensor<16x8xbf16>
  return %c, %t : tensor<16x8xbf16>, tensor<16x8xf32>
}

// -----

// A cast read by something else too stays (the layout op would not save
// its kernel).
// CHECK-LABEL: func.func @cast_also_read
// CHECK-NEXT: %[[W:.+]] = gpt.cast
// CHECK-NEXT: gpt.transpose %[[W]] [1, 0] : tensor<8x16xf32> -> tensor<16x8xf32>
func.func @cast_also_read(%x: tensor<8x16xbf16>) -> (tensor<16x8xf32>, tensor<8x16xf32>) {
  %w = gpt.cast %x : tensor<8x16xbf16> -> tensor<8x16xf32>
  %t = gpt.transpose %w [1, 0] : tensor<8x16xf32> -> tensor<16x8xf32>
  return %t, %w : tensor<16x8xf32>, tensor<8x16xf32>
}

// -----

// The three head gradients merged, then cast for the GEMM: the concat
// writes bf16. A cast before a concat input stays (the inputs share one
// type); the transposes before it take theirs.
// CHECK-LABEL: func.func @concat_then_cast
// CHECK: %[[A:.+]] = gpt.transpose %{{.+}} [1, 0] : tensor<4x8xbf16> -> tensor<8x4xf32>
// CHECK: %[[B:.+]] = gpt.transpose %{{.+}} [1, 0] : tensor<4x8xbf16> -> tensor<8x4xf32>
// CHECK: gpt.concat %[[A]], %[[B]] {axis = 1 : i64} : tensor<8x4xf32>, tensor<8x4xf32> -> tensor<8x8xbf16>
// CHECK-NOT: gpt.cast
func.func @concat_then_cast(%a: tensor<4x8xbf16>, %b: tensor<4x8xbf16>) -> tensor<8x8xbf16> {
  %aw = gpt.cast %a : tensor<4x8xbf16> -> tensor<4x8xf32>
  %at = gpt.transpose %aw [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %bw = gpt.cast %b : tensor<4x8xbf16> -> tensor<4x8xf32>
  %bt = gpt.transpose %bw [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %c = gpt.concat %at, %bt {axis = 1 : i64} : tensor<8x4xf32>, tensor<8x4xf32> -> tensor<8x8xf32>
  %n = gpt.cast %c : tensor<8x8xf32> -> tensor<8x8xbf16>
  return %n : tensor<8x8xbf16>
}

// -----

// A split reads through the cast before it; a cast after one of its pieces
// stays (the pieces share one type).
// CHECK-LABEL: func.func @split_pieces
// CHECK-NEXT: %[[S:.+]]:2 = gpt.split %{{.+}} {axis = 1 : i64} : tensor<4x8xbf16> -> tensor<4x4xf32>, tensor<4x4xf32>
// CHECK-NEXT: gpt.cast %[[S]]#0 : tensor<4x4xf32> -> tensor<4x4xbf16>
func.func @split_pieces(%x: tensor<4x8xbf16>) -> (tensor<4x4xbf16>, tensor<4x4xf32>) {
  %w = gpt.cast %x : tensor<4x8xbf16> -> tensor<4x8xf32>
  %s:2 = gpt.split %w {axis = 1 : i64} : tensor<4x8xf32> -> tensor<4x4xf32>, tensor<4x4xf32>
  %n = gpt.cast %s#0 : tensor<4x4xf32> -> tensor<4x4xbf16>
  return %n, %s#1 : tensor<4x4xbf16>, tensor<4x4xf32>
}

// -----

// The padded vocabulary: pad, then the cast for the lm_head GEMM.
// CHECK-LABEL: func.func @pad_then_cast
// CHECK-NEXT: %[[P:.+]] = gpt.pad %{{.+}} : tensor<100x16xf32> -> tensor<128x16xbf16>
// CHECK-NEXT: return %[[P]]
func.func @pad_then_cast(%w: tensor<100x16xf32>) -> tensor<128x16xbf16> {
  %p = gpt.pad %w : tensor<100x16xf32> -> tensor<128x16xf32>
  %c = gpt.cast %p : tensor<128x16xf32> -> tensor<128x16xbf16>
  return %c : tensor<128x16xbf16>
}

// -----

// After the layernorms take their prologues: the cast of a fused
// layernorm's result for the next GEMM becomes the type it writes.
// CHECK-LABEL: func.func @layernorm_writes_bf16
// CHECK: %[[N:.+]] = gpt.fused_layernorm(%{{.+}}, %{{.+}} : tensor<2x4x8xf32>, tensor<2x4x8xf32>) norm %{{.+}}, %{{.+}} : tensor<8xf32>, tensor<8xf32> -> tensor<2x4x8xbf16> {
// CHECK-NOT: gpt.cast
// CHECK: gpt.matmul %[[N]]
// OFF-LABEL: func.func @layernorm_writes_bf16
// OFF: -> tensor<2x4x8xf32> {
// OFF: gpt.cast
func.func @layernorm_writes_bf16(%x: tensor<2x4x8xf32>, %h: tensor<2x4x8xf32>, %gamma: tensor<8xf32>, %beta: tensor<8xf32>, %w: tensor<8x8xbf16>) -> tensor<2x4x8xbf16> {
  %s = gpt.add %x, %h : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  %n = gpt.layernorm %s, %gamma, %beta : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %c = gpt.cast %n : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
  %m = gpt.matmul %c, %w : tensor<2x4x8xbf16>, tensor<8x8xbf16> -> tensor<2x4x8xbf16>
  return %m : tensor<2x4x8xbf16>
}

// -----

// A layernorm with no prologue (gpt-recompute's copy, reading the residual
// sum the forward wrote) becomes a gpt.fused_layernorm of its input alone,
// and takes the cast likewise. Plain with fold-casts off.
// CHECK-LABEL: func.func @plain_layernorm_writes_bf16
// CHECK-SAME: (%[[S:[^:]+]]: tensor<2x4x8xf32>, %[[G:[^:]+]]: tensor<8xf32>, %[[B:[^:]+]]: tensor<8xf32>,
// CHECK: %[[N:.+]] = gpt.fused_layernorm(%[[S]] : tensor<2x4x8xf32>) norm %[[G]], %[[B]] : tensor<8xf32>, tensor<8xf32> {epsilon = 2.{{0+}}e-05 : f32} -> tensor<2x4x8xbf16> {
// CHECK-NEXT: ^bb0(%[[A:.+]]: f32):
// CHECK-NEXT: gpt.yield %[[A]] : f32
// CHECK-NOT: gpt.cast
// CHECK: gpt.matmul %[[N]]
// OFF-LABEL: func.func @plain_layernorm_writes_bf16
// OFF: gpt.layernorm
// OFF: gpt.cast
func.func @plain_layernorm_writes_bf16(%s: tensor<2x4x8xf32>, %gamma: tensor<8xf32>, %beta: tensor<8xf32>, %w: tensor<8x8xbf16>) -> tensor<2x4x8xbf16> {
  %n = gpt.layernorm %s, %gamma, %beta {epsilon = 2.0e-5 : f32} : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %c = gpt.cast %n : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
  %m = gpt.matmul %c, %w : tensor<2x4x8xbf16>, tensor<8x8xbf16> -> tensor<2x4x8xbf16>
  return %m : tensor<2x4x8xbf16>
}

// -----

// The narrowing cast of a fused group's result that nothing else reads
// (gpt-recompute's GELU copy, for a weight-gradient GEMM) becomes the
// group's result type: the body still yields float32, rounded on store.
// CHECK-LABEL: func.func @group_writes_bf16
// CHECK: %[[F:.+]] = gpt.fused_elementwise(%{{.+}} : tensor<4x8xbf16>) -> tensor<4x8xbf16> {
// CHECK: gpt.yield %{{.+}} : f32
// CHECK-NOT: gpt.cast
// CHECK: gpt.matmul %[[F]]
// OFF-LABEL: func.func @group_writes_bf16
// OFF: gpt.fused_elementwise({{.+}}) -> tensor<4x8xf32>
// OFF: gpt.cast
func.func @group_writes_bf16(%pre: tensor<4x8xbf16>, %dy: tensor<4x8xbf16>) -> tensor<8x8xbf16> {
  %p = gpt.cast %pre : tensor<4x8xbf16> -> tensor<4x8xf32>
  %g = gpt.gelu %p : tensor<4x8xf32>
  %c = gpt.cast %g : tensor<4x8xf32> -> tensor<4x8xbf16>
  %dw = gpt.matmul %c, %dy {transpose_a} : tensor<4x8xbf16>, tensor<4x8xbf16> -> tensor<8x8xbf16>
  return %dw : tensor<8x8xbf16>
}

// -----

// The group's float32 result is also returned: the group writes it both
// ways, the same scalar stored as float32 and rounded to bf16 (AdamW's new
// weight and its bf16 copy, gpt-weight-copies), and the cast is gone.
// CHECK-LABEL: func.func @group_result_also_read
// CHECK: %[[G:.+]]:2 = gpt.fused_elementwise({{.+}}) -> tensor<4x8xf32>, tensor<4x8xbf16>
// CHECK: gpt.yield %[[Y:.+]], %[[Y]] : f32, f32
// CHECK-NOT: gpt.cast
// CHECK: return %[[G]]#1, %[[G]]#0
// OFF-LABEL: func.func @group_result_also_read
// OFF: gpt.fused_elementwise({{.+}}) -> tensor<4x8xf32> {
// OFF: gpt.cast
func.func @group_result_also_read(%x: tensor<4x8xf32>) -> (tensor<4x8xbf16>, tensor<4x8xf32>) {
  %g = gpt.gelu %x : tensor<4x8xf32>
  %c = gpt.cast %g : tensor<4x8xf32> -> tensor<4x8xbf16>
  return %c, %g : tensor<4x8xbf16>, tensor<4x8xf32>
}

// -----

// The float32 result is also returned: it is written anyway, the cast stays.
// CHECK-LABEL: func.func @layernorm_result_also_read
// CHECK: gpt.fused_layernorm({{.+}}) norm {{.+}} -> tensor<2x4x8xf32> {
// CHECK: gpt.cast
func.func @layernorm_result_also_read(%x: tensor<2x4x8xf32>, %h: tensor<2x4x8xf32>, %gamma: tensor<8xf32>, %beta: tensor<8xf32>) -> (tensor<2x4x8xbf16>, tensor<2x4x8xf32>) {
  %s = gpt.add %x, %h : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  %n = gpt.layernorm %s, %gamma, %beta : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %c = gpt.cast %n : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
  return %c, %n : tensor<2x4x8xbf16>, tensor<2x4x8xf32>
}

// -----

// The backward: a layernorm gradient whose dy is a widened bf16 GEMM
// result reads the bf16 one (it widens as it loads: the same values), and
// the residual gradient's add still becomes its epilogue.
// CHECK-LABEL: func.func @layernorm_grad_reads_bf16
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x4x8xf32>, %[[G:[^:]+]]: tensor<8xf32>, %[[DY:[^:]+]]: tensor<2x4x8xbf16>, %[[R:[^:]+]]: tensor<2x4x8xf32>)
// CHECK-NOT: gpt.cast
// CHECK: gpt.fused_layernorm_grad %[[X]], %[[G]], %[[DY]] : tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xbf16> epilogue(%[[R]] : tensor<2x4x8xf32>)
// OFF-LABEL: func.func @layernorm_grad_reads_bf16
// OFF: %[[W:.+]] = gpt.cast
// OFF: gpt.fused_layernorm_grad %{{.+}}, %{{.+}}, %[[W]] : tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>
func.func @layernorm_grad_reads_bf16(%x: tensor<2x4x8xf32>, %gamma: tensor<8xf32>, %dyl: tensor<2x4x8xbf16>, %dres: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %dy = gpt.cast %dyl : tensor<2x4x8xbf16> -> tensor<2x4x8xf32>
  %dx, %dg, %db = gpt.layernorm_grad %x, %gamma, %dy : tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>
  %s = gpt.add %dres, %dx : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  return %s, %dg, %db : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
}

// -----

// The widened dy is also returned: the layernorm gradient still reads the
// bf16 one, and the cast stays for the other reader.
// CHECK-LABEL: func.func @layernorm_grad_dy_also_read
// CHECK: %[[W:.+]] = gpt.cast %[[DYL:[^ ]+]]
// CHECK: gpt.layernorm_grad %{{.+}}, %{{.+}}, %[[DYL]] : tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xbf16>
// CHECK: return {{.+}}, %[[W]]
func.func @layernorm_grad_dy_also_read(%x: tensor<2x4x8xf32>, %gamma: tensor<8xf32>, %dyl: tensor<2x4x8xbf16>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  %dy = gpt.cast %dyl : tensor<2x4x8xbf16> -> tensor<2x4x8xf32>
  %dx, %dg, %db = gpt.layernorm_grad %x, %gamma, %dy : tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>
  return %dx, %dy : tensor<2x4x8xf32>, tensor<2x4x8xf32>
}

// -----

// ln_f's gradient: its dx is the last block's float32 residual gradient and,
// narrowed, the bf16 input of the lm_head's backward GEMMs. The
// layernorm_grad becomes a fused one with no epilogue inputs that yields dx
// twice, once rounded to bf16 on store: no cast kernel.
// CHECK-LABEL: func.func @layernorm_grad_writes_bf16
// CHECK-NOT: gpt.cast
// CHECK-NOT: gpt.layernorm_grad
// CHECK: %[[DG:[^,]+]], %[[DB:[^,]+]], %[[V:.+]]:2 = gpt.fused_layernorm_grad %{{.+}}, %{{.+}}, %{{.+}} : tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32> epilogue() -> tensor<8xf32>, tensor<8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xbf16> {
// CHECK-NEXT: ^bb0(%[[DX:.+]]: f32):
// CHECK-NEXT: gpt.yield %[[DX]], %[[DX]] : f32, f32
// CHECK: %[[M:.+]] = gpt.matmul %[[V]]#1
// CHECK: return %[[V]]#0, %[[M]], %[[DG]], %[[DB]]
// OFF-LABEL: func.func @layernorm_grad_writes_bf16
// OFF: gpt.layernorm_grad
// OFF: gpt.cast
func.func @layernorm_grad_writes_bf16(%x: tensor<2x4x8xf32>, %gamma: tensor<8xf32>, %dy: tensor<2x4x8xf32>, %w: tensor<8x16xbf16>) -> (tensor<2x4x8xf32>, tensor<2x4x16xbf16>, tensor<8xf32>, tensor<8xf32>) {
  %dx, %dg, %db = gpt.layernorm_grad %x, %gamma, %dy : tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>
  %n = gpt.cast %dx : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
  %m = gpt.matmul %n, %w : tensor<2x4x8xbf16>, tensor<8x16xbf16> -> tensor<2x4x16xbf16>
  return %dx, %m, %dg, %db : tensor<2x4x8xf32>, tensor<2x4x16xbf16>, tensor<8xf32>, tensor<8xf32>
}

// -----

// A dx that only the narrowing reads stays a layernorm_grad and a cast
// (GPT-2 has none: folding it would mean a fused op without its float32
// value, which this step does not make).
// CHECK-LABEL: func.func @layernorm_grad_only_narrowed
// CHECK: gpt.layernorm_grad
// CHECK: gpt.cast
// CHECK-NOT: gpt.fused_layernorm_grad
func.func @layernorm_grad_only_narrowed(%x: tensor<2x4x8xf32>, %gamma: tensor<8xf32>, %dy: tensor<2x4x8xf32>) -> (tensor<2x4x8xbf16>, tensor<8xf32>, tensor<8xf32>) {
  %dx, %dg, %db = gpt.layernorm_grad %x, %gamma, %dy : tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>
  %n = gpt.cast %dx : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
  return %n, %dg, %db : tensor<2x4x8xbf16>, tensor<8xf32>, tensor<8xf32>
}

// -----

// The loss of bf16 logits in the gradient function: widened for the loss,
// the gradient narrowed for the lm_head's backward GEMMs. The op reads and
// writes bf16 instead (float32 inside, one rounding on store).
// CHECK-LABEL: func.func @loss_reads_bf16
// CHECK-NEXT: %{{.+}}, %[[D:.+]] = gpt.cross_entropy_with_grad %{{.+}}, %{{.+}}, %{{.+}} : tensor<2x4x64xbf16>, tensor<2x4xi32>, tensor<f32> -> tensor<f32>, tensor<2x4x64xbf16>
// CHECK-NEXT: gpt.matmul %[[D]]
func.func @loss_reads_bf16(%l: tensor<2x4x64xbf16>, %t: tensor<2x4xi32>, %one: tensor<f32>, %w: tensor<64x8xbf16>) -> (tensor<f32>, tensor<2x4x8xbf16>) {
  %lw = gpt.cast %l : tensor<2x4x64xbf16> -> tensor<2x4x64xf32>
  %loss = gpt.cross_entropy %lw, %t : tensor<2x4x64xf32>, tensor<2x4xi32> -> tensor<f32>
  %d = gpt.cross_entropy_grad %lw, %t, %one : tensor<2x4x64xf32>, tensor<2x4xi32>, tensor<f32>
  %dl = gpt.cast %d : tensor<2x4x64xf32> -> tensor<2x4x64xbf16>
  %dx = gpt.matmul %dl, %w : tensor<2x4x64xbf16>, tensor<64x8xbf16> -> tensor<2x4x8xbf16>
  return %loss, %dx : tensor<f32>, tensor<2x4x8xbf16>
}

// -----

// The float32 gradient is also read: the loss keeps float32.
// CHECK-LABEL: func.func @loss_gradient_also_read
// CHECK: gpt.cross_entropy_with_grad %{{.+}}, %{{.+}}, %{{.+}} : tensor<2x4x64xf32>
func.func @loss_gradient_also_read(%l: tensor<2x4x64xbf16>, %t: tensor<2x4xi32>, %one: tensor<f32>) -> (tensor<f32>, tensor<2x4x64xbf16>, tensor<2x4x64xf32>) {
  %lw = gpt.cast %l : tensor<2x4x64xbf16> -> tensor<2x4x64xf32>
  %loss = gpt.cross_entropy %lw, %t : tensor<2x4x64xf32>, tensor<2x4xi32> -> tensor<f32>
  %d = gpt.cross_entropy_grad %lw, %t, %one : tensor<2x4x64xf32>, tensor<2x4xi32>, tensor<f32>
  %dl = gpt.cast %d : tensor<2x4x64xf32> -> tensor<2x4x64xbf16>
  return %loss, %dl, %d : tensor<f32>, tensor<2x4x64xbf16>, tensor<2x4x64xf32>
}

// -----

// Two casts in a row: a widening then a narrowing back is nothing (the
// attention output, widened and narrowed again for the next GEMM); a
// widening then another narrowing is one cast.
// CHECK-LABEL: func.func @cast_pairs
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4x8xbf16>)
// CHECK-NEXT: %[[H:.+]] = gpt.cast %[[X]] : tensor<4x8xbf16> -> tensor<4x8xf16>
// CHECK-NEXT: return %[[X]], %[[H]]
// OFF-LABEL: func.func @cast_pairs
// OFF-COUNT-3: gpt.cast
func.func @cast_pairs(%x: tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xf16>) {
  %w = gpt.cast %x : tensor<4x8xbf16> -> tensor<4x8xf32>
  %n = gpt.cast %w : tensor<4x8xf32> -> tensor<4x8xbf16>
  %h = gpt.cast %w : tensor<4x8xf32> -> tensor<4x8xf16>
  return %n, %h : tensor<4x8xbf16>, tensor<4x8xf16>
}

// -----

// A narrowing then a widening loses bits: both stay.
// CHECK-LABEL: func.func @cast_pair_rounds
// CHECK-NEXT: %[[N:.+]] = gpt.cast %{{.+}} : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK-NEXT: %[[W:.+]] = gpt.cast %[[N]] : tensor<4x8xbf16> -> tensor<4x8xf32>
// CHECK-NEXT: return %[[W]]
func.func @cast_pair_rounds(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %n = gpt.cast %x : tensor<4x8xf32> -> tensor<4x8xbf16>
  %w = gpt.cast %n : tensor<4x8xbf16> -> tensor<4x8xf32>
  return %w : tensor<4x8xf32>
}

// -----

// A fused layernorm gradient's value (the residual gradient) is read as
// float32 by the next block and narrowed for the next GEMM: the op writes
// the bf16 copy as one more value, the same yielded scalar.
// CHECK-LABEL: func.func @layernorm_grad_writes_bf16_copy
// CHECK: %{{.+}}, %{{.+}}, %[[V:[^ ]+]]:2 = gpt.fused_layernorm_grad {{.+}} -> tensor<8xf32>, tensor<8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xbf16> {
// CHECK: gpt.yield %[[S:[^ ,]+]], %[[S]] : f32, f32
// CHECK-NOT: gpt.cast
// CHECK: gpt.matmul %[[V]]#1
// CHECK: return %[[V]]#0
// OFF-LABEL: func.func @layernorm_grad_writes_bf16_copy
// OFF: gpt.cast
func.func @layernorm_grad_writes_bf16_copy(%x: tensor<2x4x8xf32>, %gamma: tensor<8xf32>, %dy: tensor<2x4x8xf32>, %dres: tensor<2x4x8xf32>, %w: tensor<8x8xbf16>) -> (tensor<2x4x8xf32>, tensor<2x4x8xbf16>) {
  %dx, %dg, %db = gpt.layernorm_grad %x, %gamma, %dy : tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>
  %s = gpt.add %dres, %dx : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  %sl = gpt.cast %s : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
  %m = gpt.matmul %sl, %w : tensor<2x4x8xbf16>, tensor<8x8xbf16> -> tensor<2x4x8xbf16>
  return %s, %m : tensor<2x4x8xf32>, tensor<2x4x8xbf16>
}

// -----

// The evaluation loss of bf16 logits: it reads them narrow (the widening is
// exact, so the same loss), and the widened copy goes.
// CHECK-LABEL: func.func @eval_loss_reads_bf16
// CHECK-NEXT: gpt.cross_entropy %{{.+}}, %{{.+}} : tensor<2x4x64xbf16>, tensor<2x4xi32> -> tensor<f32>
// CHECK-NEXT: return
func.func @eval_loss_reads_bf16(%l: tensor<2x4x64xbf16>, %t: tensor<2x4xi32>) -> tensor<f32> {
  %lw = gpt.cast %l : tensor<2x4x64xbf16> -> tensor<2x4x64xf32>
  %loss = gpt.cross_entropy %lw, %t : tensor<2x4x64xf32>, tensor<2x4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// The widened logits are also returned: the loss reads the narrow ones, and
// the cast stays for the other reader.
// CHECK-LABEL: func.func @eval_loss_widened_also_read
// CHECK: %[[W:.+]] = gpt.cast
// CHECK-NEXT: gpt.cross_entropy %{{.+}}, %{{.+}} : tensor<2x4x64xbf16>
// CHECK-NEXT: return %{{.+}}, %[[W]]
func.func @eval_loss_widened_also_read(%l: tensor<2x4x64xbf16>, %t: tensor<2x4xi32>) -> (tensor<f32>, tensor<2x4x64xf32>) {
  %lw = gpt.cast %l : tensor<2x4x64xbf16> -> tensor<2x4x64xf32>
  %loss = gpt.cross_entropy %lw, %t : tensor<2x4x64xf32>, tensor<2x4xi32> -> tensor<f32>
  return %loss, %lw : tensor<f32>, tensor<2x4x64xf32>
}

// -----

// Logits that are float32 from the start are no widening: nothing changes.
// CHECK-LABEL: func.func @eval_loss_f32
// CHECK-NEXT: gpt.cross_entropy %{{.+}}, %{{.+}} : tensor<2x4x64xf32>
func.func @eval_loss_f32(%l: tensor<2x4x64xf32>, %t: tensor<2x4xi32>) -> tensor<f32> {
  %loss = gpt.cross_entropy %l, %t : tensor<2x4x64xf32>, tensor<2x4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
