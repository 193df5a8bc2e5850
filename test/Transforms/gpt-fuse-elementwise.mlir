// RUN: gptc-opt %s -split-input-file -gpt-fuse-elementwise -verify-diagnostics | FileCheck %s

// A matmul epilogue as GPT-2 writes it: bias add, then GELU. One kernel;
// the bias broadcasts, the pre-activation is only used by the GELU, so the
// group has one result. The matmul stays.
// CHECK-LABEL: func.func @bias_gelu
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x8x8xf32>, %[[W:[^:]+]]: tensor<8x16xf32>, %[[B:[^:]+]]: tensor<16xf32>)
// CHECK: %[[MM:.+]] = gpt.matmul %[[X]], %[[W]]
// CHECK: %[[G:.+]] = gpt.fused_elementwise(%[[MM]], %[[B]] : tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32> {
// CHECK-NEXT: ^bb0(%[[S0:.+]]: f32, %[[S1:.+]]: f32):
// CHECK-NEXT: %[[SUM:.+]] = arith.addf %[[S0]], %[[S1]] : f32
// CHECK: math.tanh
// CHECK: gpt.yield %{{.+}} : f32
// CHECK: return %[[G]]
func.func @bias_gelu(%x: tensor<2x8x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<2x8x16xf32> {
  %mm = gpt.matmul %x, %w : tensor<2x8x8xf32>, tensor<8x16xf32> -> tensor<2x8x16xf32>
  %h = gpt.add %mm, %b : tensor<2x8x16xf32>, tensor<16xf32> -> tensor<2x8x16xf32>
  %g = gpt.gelu %h : tensor<2x8x16xf32>
  return %g : tensor<2x8x16xf32>
}

// -----

// Multi-output: the pre-activation is also needed after the group (by the
// backward's gelu_grad), so the same kernel writes it out. Splat constants
// become arith.constant in the body.
// CHECK-LABEL: func.func @multi_output
// CHECK-SAME: (%[[A:[^:]+]]: tensor<4x4xf32>, %[[B:[^:]+]]: tensor<4x4xf32>)
// CHECK: %[[R:.+]]:2 = gpt.fused_elementwise(%[[A]], %[[B]] : tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>, tensor<4x4xf32>
// CHECK: arith.constant 2.000000e+00 : f32
// CHECK: %[[E:.+]] = math.exp
// CHECK: gpt.yield %{{.+}}, %[[E]] : f32, f32
// CHECK-NOT: gpt.constant
// CHECK: %[[S:.+]] = gpt.reduce_sum %[[R]]#0
// CHECK: return %[[R]]#1, %[[S]]
func.func @multi_output(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<f32>) {
  %c = gpt.constant dense<2.0> : tensor<f32>
  %s = gpt.mul %a, %c : tensor<4x4xf32>, tensor<f32> -> tensor<4x4xf32>
  %t = gpt.sub %s, %b : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %e = gpt.exp %t : tensor<4x4xf32>
  %r = gpt.reduce_sum %t : tensor<4x4xf32> -> tensor<f32>
  return %e, %r : tensor<4x4xf32>, tensor<f32>
}

// -----

// A reduction is a boundary: the chain before it and the chain after it are
// two kernels, with the reduction between them.
// CHECK-LABEL: func.func @reduction_boundary
// CHECK: %[[F1:.+]] = gpt.fused_elementwise(
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: %[[SUM:.+]] = gpt.reduce_sum %[[F1]]
// CHECK: %[[F2:.+]] = gpt.fused_elementwise(%[[SUM]]
// CHECK: math.sqrt
// CHECK: return %[[F2]]
func.func @reduction_boundary(%a: tensor<8xf32>) -> tensor<f32> {
  %sq = gpt.mul %a, %a : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %one = gpt.constant dense<1.0> : tensor<f32>
  %p = gpt.add %sq, %one : tensor<8xf32>, tensor<f32> -> tensor<8xf32>
  %s = gpt.reduce_sum %p : tensor<8xf32> -> tensor<f32>
  %n = gpt.sqrt %s : tensor<f32>
  %e = gpt.exp %n : tensor<f32>
  %r = gpt.sqrt %e : tensor<f32>
  return %r : tensor<f32>
}

// -----

// An expensive producer whose value a non-elementwise op needs before the
// consumer's group runs: it is not computed twice, and says so.
// CHECK-LABEL: func.func @expensive_shared
// CHECK: %[[E:.+]] = gpt.fused_elementwise(%{{.+}} : tensor<4x8xf32>)
// CHECK: math.exp
// CHECK: %[[M:.+]] = gpt.matmul %[[E]]
// CHECK: gpt.fused_elementwise(%[[E]], %[[M]]
func.func @expensive_shared(%a: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  // expected-remark @+1 {{did not fuse 'gpt.exp' into its consumer 'gpt.add': its result is also used by 'gpt.matmul' before the consumer's group runs, and fusing would compute it twice}}
  %e = gpt.exp %a : tensor<4x8xf32>
  %m = gpt.matmul %e, %w : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  %s = gpt.add %e, %m : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %t = gpt.tanh %s : tensor<4x8xf32>
  return %t : tensor<4x8xf32>
}

// -----

// A producer broadcast into a larger consumer stays its own kernel: fusing
// would recompute it for every row it is stretched over.
// CHECK-LABEL: func.func @broadcast_producer
// CHECK: %[[SMALL:.+]] = gpt.fused_elementwise(%{{.+}} : tensor<8xf32>) -> tensor<8xf32>
// CHECK: %[[BIG:.+]] = gpt.fused_elementwise(%{{.+}}, %[[SMALL]] : tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK: return %[[BIG]]
func.func @broadcast_producer(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-remark @+1 {{did not fuse 'gpt.exp' into its consumer 'gpt.add': it is broadcast from 8 to 4x8, and fusing would compute it once per element}}
  %e = gpt.exp %b : tensor<8xf32>
  %y = gpt.add %x, %e : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %z = gpt.neg %y : tensor<4x8xf32>
  return %z : tensor<4x8xf32>
}

// -----

// A cheap op of function arguments with one non-scalar operand (AdamW's
// g · grad_scale) is recomputed in each group that needs it rather than
// written out and read back: the norm's group and the update's group both
// read %g, and no group returns g · s.
// CHECK-LABEL: func.func @recompute_cheap
// CHECK-SAME: (%[[G:[^:]+]]: tensor<16xf32>, %[[S:[^:]+]]: tensor<f32>, %[[P:[^:]+]]: tensor<16xf32>)
// CHECK: %[[SQ:.+]] = gpt.fused_elementwise(%[[G]], %[[S]] : tensor<16xf32>, tensor<f32>) -> tensor<16xf32>
// CHECK: %[[N:.+]] = gpt.reduce_sum %[[SQ]]
// CHECK: %[[U:.+]] = gpt.fused_elementwise(%[[G]], %[[S]], %[[N]], %[[P]] : tensor<16xf32>, tensor<f32>, tensor<f32>, tensor<16xf32>) -> tensor<16xf32>
// CHECK-NEXT: ^bb0(%[[SG:.+]]: f32, %[[SS:.+]]: f32, %[[SN:.+]]: f32, %[[SP:.+]]: f32):
// CHECK-NEXT: %[[GS:.+]] = arith.mulf %[[SG]], %[[SS]] : f32
// CHECK: return %[[U]]
func.func @recompute_cheap(%g: tensor<16xf32>, %s: tensor<f32>, %p: tensor<16xf32>) -> tensor<16xf32> {
  %gs = gpt.mul %g, %s : tensor<16xf32>, tensor<f32> -> tensor<16xf32>
  %sq = gpt.mul %gs, %gs : tensor<16xf32>, tensor<16xf32> -> tensor<16xf32>
  %n = gpt.reduce_sum %sq : tensor<16xf32> -> tensor<f32>
  %d = gpt.mul %gs, %n : tensor<16xf32>, tensor<f32> -> tensor<16xf32>
  %u = gpt.sub %p, %d : tensor<16xf32>, tensor<16xf32> -> tensor<16xf32>
  return %u : tensor<16xf32>
}

// -----

// Same-bodied updates of tensors of different sizes sharing a scalar become
// one multi-tensor kernel (AdamW over all parameters).
// CHECK-LABEL: func.func @multi_tensor
// CHECK-SAME: (%[[P0:[^:]+]]: tensor<4x8xf32>, %[[G0:[^:]+]]: tensor<4x8xf32>, %[[P1:[^:]+]]: tensor<8xf32>, %[[G1:[^:]+]]: tensor<8xf32>, %[[LR:[^:]+]]: tensor<f32>)
// CHECK: %[[R:.+]]:2 = gpt.multi_tensor_elementwise(%[[G0]], %[[G1]], %[[P0]], %[[P1]] : tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>, tensor<8xf32>) scalars(%[[LR]] : tensor<f32>) {num_tensors = 2 : i64} -> tensor<4x8xf32>, tensor<8xf32>
// CHECK-NEXT: ^bb0(%[[SG:.+]]: f32, %[[SP:.+]]: f32, %[[SLR:.+]]: f32):
// CHECK-NEXT: %[[STEP:.+]] = arith.mulf %[[SG]], %[[SLR]] : f32
// CHECK-NEXT: %[[NEW:.+]] = arith.subf %[[SP]], %[[STEP]] : f32
// CHECK-NEXT: gpt.yield %[[NEW]] : f32
// CHECK: return %[[R]]#0, %[[R]]#1
func.func @multi_tensor(%p0: tensor<4x8xf32>, %g0: tensor<4x8xf32>, %p1: tensor<8xf32>, %g1: tensor<8xf32>, %lr: tensor<f32>) -> (tensor<4x8xf32>, tensor<8xf32>) {
  %s0 = gpt.mul %g0, %lr : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %n0 = gpt.sub %p0, %s0 : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %s1 = gpt.mul %g1, %lr : tensor<8xf32>, tensor<f32> -> tensor<8xf32>
  %n1 = gpt.sub %p1, %s1 : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  return %n0, %n1 : tensor<4x8xf32>, tensor<8xf32>
}

// -----

// Ops of other element types (mixed precision's bf16) are left alone, and
// the residual stream, cheap and needed by layernorm, stays quiet (it
// becomes the layernorm's prologue: gpt-fuse-layernorm-prologue.mlir).
// CHECK-LABEL: func.func @not_fused
// CHECK: gpt.add %{{.+}} : tensor<4x8xbf16>
// CHECK: %[[N:.+]], %[[R:.+]] = gpt.fused_layernorm(%{{.+}}, %{{.+}} : tensor<4x8xf32>, tensor<4x8xf32>)
// CHECK: gpt.fused_elementwise(%[[R]], %[[N]]
func.func @not_fused(%a: tensor<4x8xbf16>, %x: tensor<4x8xf32>, %y: tensor<4x8xf32>, %gamma: tensor<8xf32>, %beta: tensor<8xf32>) -> (tensor<4x8xbf16>, tensor<4x8xf32>) {
  %h = gpt.add %a, %a : tensor<4x8xbf16>, tensor<4x8xbf16> -> tensor<4x8xbf16>
  %r = gpt.add %x, %y : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %n = gpt.layernorm %r, %gamma, %beta : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %r2 = gpt.add %r, %n : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  return %h, %r2 : tensor<4x8xbf16>, tensor<4x8xf32>
}

// -----

// The loss and its gradient of the same logits (the gradient function's
// loss and backward seed): one op, one read of the [B, T, V] logits.
// CHECK-LABEL: func.func @loss_and_grad
// CHECK-SAME: (%[[L:[^:]+]]: tensor<2x3x8xf32>, %[[T:[^:]+]]: tensor<2x3xi32>)
// CHECK: %[[ONE:.+]] = gpt.constant dense<1.000000e+00>
// CHECK: %[[LOSS:[^,]+]], %[[D:.+]] = gpt.cross_entropy_with_grad %[[L]], %[[T]], %[[ONE]] : tensor<2x3x8xf32>, tensor<2x3xi32>, tensor<f32> -> tensor<f32>, tensor<2x3x8xf32>
// CHECK: return %[[LOSS]], %[[D]]
func.func @loss_and_grad(%l: tensor<2x3x8xf32>, %t: tensor<2x3xi32>) -> (tensor<f32>, tensor<2x3x8xf32>) {
  %loss = gpt.cross_entropy %l, %t : tensor<2x3x8xf32>, tensor<2x3xi32> -> tensor<f32>
  %one = gpt.constant dense<1.0> : tensor<f32>
  %d = gpt.cross_entropy_grad %l, %t, %one : tensor<2x3x8xf32>, tensor<2x3xi32>, tensor<f32>
  return %loss, %d : tensor<f32>, tensor<2x3x8xf32>
}

// -----

// Different targets: two different losses, left as they are.
// CHECK-LABEL: func.func @loss_other_targets
// CHECK: gpt.cross_entropy %
// CHECK: gpt.cross_entropy_grad %
func.func @loss_other_targets(%l: tensor<2x3x8xf32>, %t: tensor<2x3xi32>, %u: tensor<2x3xi32>) -> (tensor<f32>, tensor<2x3x8xf32>) {
  %loss = gpt.cross_entropy %l, %t : tensor<2x3x8xf32>, tensor<2x3xi32> -> tensor<f32>
  %one = gpt.constant dense<1.0> : tensor<f32>
  %d = gpt.cross_entropy_grad %l, %u, %one : tensor<2x3x8xf32>, tensor<2x3xi32>, tensor<f32>
  return %loss, %d : tensor<f32>, tensor<2x3x8xf32>
}

// -----

// A widened 16-bit input is read narrow: the group takes the cast's bf16
// operand and widens it in the body (arith.extf, the same values), so the
// float32 copy is not written and read back (an output projection's bf16
// result in its residual add). The cast goes when only groups read it; a
// cast that something else reads (here the function's result) stays for
// that reader, and the group still reads the narrow value.
// CHECK-LABEL: func.func @widened_input
// CHECK-SAME: (%[[R:[^:]+]]: tensor<4x8xf32>, %[[Y:[^:]+]]: tensor<4x8xbf16>, %[[Z:[^:]+]]: tensor<4x8xbf16>)
// CHECK: %[[ZW:.+]] = gpt.cast %[[Z]] : tensor<4x8xbf16> -> tensor<4x8xf32>
// CHECK-NOT: gpt.cast
// CHECK: gpt.fused_elementwise(%[[R]], %[[Y]], %[[Z]] : tensor<4x8xf32>, tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4x8xf32> {
// CHECK-NEXT: ^bb0(%[[A:.+]]: f32, %[[B:.+]]: bf16, %[[C:.+]]: bf16):
// CHECK-NEXT: %[[BW:.+]] = arith.extf %[[B]] : bf16 to f32
// CHECK-NEXT: %[[CW:.+]] = arith.extf %[[C]] : bf16 to f32
// CHECK: return %{{.+}}, %[[ZW]]
func.func @widened_input(%r: tensor<4x8xf32>, %y: tensor<4x8xbf16>, %z: tensor<4x8xbf16>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %yw = gpt.cast %y : tensor<4x8xbf16> -> tensor<4x8xf32>
  %zw = gpt.cast %z : tensor<4x8xbf16> -> tensor<4x8xf32>
  %s = gpt.add %r, %yw : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %t = gpt.mul %s, %zw : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  return %t, %zw : tensor<4x8xf32>, tensor<4x8xf32>
}
