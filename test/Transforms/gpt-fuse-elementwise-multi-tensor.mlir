// RUN: gptc-opt %s -split-input-file -gpt-fuse-elementwise -verify-diagnostics | FileCheck %s

// The global gradient norm as gpt-optimizer writes it: one full reduction
// per gradient and a chain of scalar adds. One gpt.multi_tensor_reduce that
// reads the gradients themselves (the squares and the scaling move into its
// body, they are never written), then the scalar tail.
// CHECK-LABEL: func.func @global_norm
// CHECK-SAME: (%[[G0:[^:]+]]: tensor<4x8xf32>, %[[G1:[^:]+]]: tensor<8xf32>, %[[G2:[^:]+]]: tensor<3xf32>, %[[S:[^:]+]]: tensor<f32>)
// CHECK-NOT: gpt.reduce_sum
// CHECK: %[[SUM:.+]] = gpt.multi_tensor_reduce(%[[G0]], %[[G1]], %[[G2]] : tensor<4x8xf32>, tensor<8xf32>, tensor<3xf32>) scalars(%[[S]] : tensor<f32>) {num_tensors = 3 : i64} -> tensor<f32> {
// CHECK-NEXT: ^bb0(%[[X:.+]]: f32, %[[SC:.+]]: f32):
// CHECK-NEXT: %[[Y:.+]] = arith.mulf %[[X]], %[[SC]] : f32
// CHECK-NEXT: %[[SQ:.+]] = arith.mulf %[[Y]], %[[Y]] : f32
// CHECK-NEXT: gpt.yield %[[SQ]] : f32
// CHECK: %[[N:.+]] = gpt.fused_elementwise(%[[SUM]] : tensor<f32>)
// CHECK: math.sqrt
// CHECK-NOT: gpt.reduce_sum
// CHECK-NOT: gpt.add
// CHECK: return %[[N]]
func.func @global_norm(%g0: tensor<4x8xf32>, %g1: tensor<8xf32>, %g2: tensor<3xf32>, %s: tensor<f32>) -> tensor<f32> {
  %a0 = gpt.mul %g0, %s : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %q0 = gpt.mul %a0, %a0 : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %r0 = gpt.reduce_sum %q0 : tensor<4x8xf32> -> tensor<f32>
  %a1 = gpt.mul %g1, %s : tensor<8xf32>, tensor<f32> -> tensor<8xf32>
  %q1 = gpt.mul %a1, %a1 : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %r1 = gpt.reduce_sum %q1 : tensor<8xf32> -> tensor<f32>
  %a2 = gpt.mul %g2, %s : tensor<3xf32>, tensor<f32> -> tensor<3xf32>
  %q2 = gpt.mul %a2, %a2 : tensor<3xf32>, tensor<3xf32> -> tensor<3xf32>
  %r2 = gpt.reduce_sum %q2 : tensor<3xf32> -> tensor<f32>
  %t0 = gpt.add %r0, %r1 : tensor<f32>, tensor<f32> -> tensor<f32>
  %t1 = gpt.add %t0, %r2 : tensor<f32>, tensor<f32> -> tensor<f32>
  %n = gpt.sqrt %t1 : tensor<f32>
  return %n : tensor<f32>
}

// -----

// The squares are also returned: the reduction stays a sum of its inputs
// (the squares are written anyway), with an identity body.
// CHECK-LABEL: func.func @squares_kept
// CHECK: %[[Q:.+]]:2 = gpt.multi_tensor_elementwise(
// CHECK: %[[SUM:.+]] = gpt.multi_tensor_reduce(%[[Q]]#0, %[[Q]]#1 : tensor<4x8xf32>, tensor<8xf32>) {num_tensors = 2 : i64} -> tensor<f32> {
// CHECK-NEXT: ^bb0(%[[X:.+]]: f32):
// CHECK-NEXT: gpt.yield %[[X]] : f32
// CHECK: return %[[SUM]], %[[Q]]#0
func.func @squares_kept(%g0: tensor<4x8xf32>, %g1: tensor<8xf32>) -> (tensor<f32>, tensor<4x8xf32>) {
  %q0 = gpt.mul %g0, %g0 : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %r0 = gpt.reduce_sum %q0 : tensor<4x8xf32> -> tensor<f32>
  %q1 = gpt.mul %g1, %g1 : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %r1 = gpt.reduce_sum %q1 : tensor<8xf32> -> tensor<f32>
  %t = gpt.add %r0, %r1 : tensor<f32>, tensor<f32> -> tensor<f32>
  return %t, %q0 : tensor<f32>, tensor<4x8xf32>
}

// -----

// A partial sum is also needed on its own: no multi-tensor reduction, and a
// remark says why.
// CHECK-LABEL: func.func @partial_used
// CHECK-NOT: gpt.multi_tensor_reduce
// CHECK: gpt.reduce_sum
// CHECK: gpt.reduce_sum
func.func @partial_used(%g0: tensor<4x8xf32>, %g1: tensor<8xf32>) -> (tensor<f32>, tensor<f32>) {
  // expected-remark @+1 {{did not form a gpt.multi_tensor_reduce of the sum it feeds: its result is also used by 'func.return'}}
  %r0 = gpt.reduce_sum %g0 : tensor<4x8xf32> -> tensor<f32>
  %r1 = gpt.reduce_sum %g1 : tensor<8xf32> -> tensor<f32>
  %t = gpt.add %r0, %r1 : tensor<f32>, tensor<f32> -> tensor<f32>
  return %t, %r0 : tensor<f32>, tensor<f32>
}

// -----

// The sum also adds a value that is not a full reduction.
// CHECK-LABEL: func.func @mixed_sum
// CHECK-NOT: gpt.multi_tensor_reduce
func.func @mixed_sum(%g0: tensor<4x8xf32>, %g1: tensor<8xf32>, %c: tensor<f32>) -> tensor<f32> {
  %r0 = gpt.reduce_sum %g0 : tensor<4x8xf32> -> tensor<f32>
  %r1 = gpt.reduce_sum %g1 : tensor<8xf32> -> tensor<f32>
  %t0 = gpt.add %r0, %r1 : tensor<f32>, tensor<f32> -> tensor<f32>
  // expected-remark @+1 {{did not form a gpt.multi_tensor_reduce: the sum also adds 1 value(s) that are not full reductions}}
  %t1 = gpt.add %t0, %c : tensor<f32>, tensor<f32> -> tensor<f32>
  return %t1 : tensor<f32>
}

// -----

// AdamW's weight decay, p · (1 − lr·wd) with wd = 0.1 on the matrix and 0 on
// the bias: the bodies differ only in that constant, so one kernel, the
// constant per tensor as a block argument after the per-tensor elements and
// before the scalars.
// CHECK-LABEL: func.func @per_tensor_decay
// CHECK-SAME: (%[[P0:[^:]+]]: tensor<4x8xf32>, %[[G0:[^:]+]]: tensor<4x8xf32>, %[[P1:[^:]+]]: tensor<8xf32>, %[[G1:[^:]+]]: tensor<8xf32>, %[[LR:[^:]+]]: tensor<f32>)
// CHECK: %[[R:.+]]:2 = gpt.multi_tensor_elementwise(%[[P0]], %[[P1]], %[[G0]], %[[G1]] : {{.+}}) scalars(%[[LR]] : tensor<f32>) {num_tensors = 2 : i64, per_tensor = array<f32: 1.000000e-01, 0.000000e+00>} -> tensor<4x8xf32>, tensor<8xf32> {
// CHECK-NEXT: ^bb0(%[[P:.+]]: f32, %[[G:.+]]: f32, %[[WD:.+]]: f32, %[[L:.+]]: f32):
// CHECK-NEXT: %[[LWD:.+]] = arith.mulf %[[L]], %[[WD]] : f32
// CHECK-NOT: arith.constant 1.000000e-01
// CHECK: gpt.yield
// CHECK: return %[[R]]#0, %[[R]]#1
func.func @per_tensor_decay(%p0: tensor<4x8xf32>, %g0: tensor<4x8xf32>, %p1: tensor<8xf32>, %g1: tensor<8xf32>, %lr: tensor<f32>) -> (tensor<4x8xf32>, tensor<8xf32>) {
  %one = gpt.constant dense<1.0> : tensor<f32>
  %wd0 = gpt.constant dense<0.1> : tensor<4x8xf32>
  %wd1 = gpt.constant dense<0.0> : tensor<8xf32>
  %x0 = gpt.mul %lr, %wd0 : tensor<f32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %d0 = gpt.sub %one, %x0 : tensor<f32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %y0 = gpt.mul %p0, %d0 : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %u0 = gpt.sub %y0, %g0 : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %x1 = gpt.mul %lr, %wd1 : tensor<f32>, tensor<8xf32> -> tensor<8xf32>
  %d1 = gpt.sub %one, %x1 : tensor<f32>, tensor<8xf32> -> tensor<8xf32>
  %y1 = gpt.mul %p1, %d1 : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %u1 = gpt.sub %y1, %g1 : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  return %u0, %u1 : tensor<4x8xf32>, tensor<8xf32>
}

// -----

// Bodies that differ in an op, not a constant, stay two kernels.
// CHECK-LABEL: func.func @different_bodies
// CHECK-NOT: gpt.multi_tensor_elementwise
// CHECK: gpt.fused_elementwise
// CHECK: gpt.fused_elementwise
func.func @different_bodies(%p0: tensor<4x8xf32>, %p1: tensor<8xf32>, %lr: tensor<f32>) -> (tensor<4x8xf32>, tensor<8xf32>) {
  %y0 = gpt.mul %p0, %lr : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %e0 = gpt.exp %y0 : tensor<4x8xf32>
  %y1 = gpt.mul %p1, %lr : tensor<8xf32>, tensor<f32> -> tensor<8xf32>
  %e1 = gpt.tanh %y1 : tensor<8xf32>
  return %e0, %e1 : tensor<4x8xf32>, tensor<8xf32>
}

// -----

// The parameters' bf16 copies (casts of gpt.param arguments) become one
// multi-tensor op whose body yields its argument, each result rounded to
// bf16 on store. A cast of an argument that is no parameter stays, and so
// does a widening one.
// CHECK-LABEL: func.func @parameter_casts
// CHECK-SAME: (%[[W:[^:]+]]: tensor<8x16xf32> {gpt.param = "w"}, %[[B:[^:]+]]: tensor<16xf32> {gpt.param = "b"}, %[[X:[^:]+]]: tensor<4x8xf32>, %[[H:[^:]+]]: tensor<16xbf16> {gpt.param = "h"})
// CHECK-NEXT: %[[P:.+]]:2 = gpt.multi_tensor_elementwise(%[[W]], %[[B]] : tensor<8x16xf32>, tensor<16xf32>) {num_tensors = 2 : i64} -> tensor<8x16xbf16>, tensor<16xbf16> {
// CHECK-NEXT: ^bb0(%[[A:.+]]: f32):
// CHECK-NEXT: gpt.yield %[[A]] : f32
// CHECK: gpt.cast %[[X]] : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK: gpt.cast %[[H]] : tensor<16xbf16> -> tensor<16xf32>
// CHECK: return %[[P]]#0, %[[P]]#1
func.func @parameter_casts(%w: tensor<8x16xf32> {gpt.param = "w"}, %b: tensor<16xf32> {gpt.param = "b"}, %x: tensor<4x8xf32>, %h: tensor<16xbf16> {gpt.param = "h"}) -> (tensor<8x16xbf16>, tensor<16xbf16>, tensor<4x8xbf16>, tensor<16xf32>) {
  %wl = gpt.cast %w : tensor<8x16xf32> -> tensor<8x16xbf16>
  %bl = gpt.cast %b : tensor<16xf32> -> tensor<16xbf16>
  %xl = gpt.cast %x : tensor<4x8xf32> -> tensor<4x8xbf16>
  %hw = gpt.cast %h : tensor<16xbf16> -> tensor<16xf32>
  return %wl, %bl, %xl, %hw : tensor<8x16xbf16>, tensor<16xbf16>, tensor<4x8xbf16>, tensor<16xf32>
}

// -----

// A single parameter cast is one launch either way: it stays a cast.
// CHECK-LABEL: func.func @one_parameter_cast
// CHECK-NEXT: gpt.cast
// CHECK-NOT: gpt.multi_tensor_elementwise
func.func @one_parameter_cast(%w: tensor<8x16xf32> {gpt.param = "w"}) -> tensor<8x16xbf16> {
  %wl = gpt.cast %w : tensor<8x16xf32> -> tensor<8x16xbf16>
  return %wl : tensor<8x16xbf16>
}

// -----

// The returned gradients' widening casts (the bias gradients a bf16 GEMM
// epilogue wrote) become one multi-tensor op just before the return. A
// widening cast into a result that is no gradient stays, and so does one
// that something else reads too, and a narrowing one.
// CHECK-LABEL: func.func @gradient_casts
// CHECK-SAME: (%[[G1:[^:]+]]: tensor<16xbf16>, %[[G2:[^:]+]]: tensor<8x16xbf16>, %[[Y:[^:]+]]: tensor<16xbf16>, %[[Z:[^:]+]]: tensor<16xbf16>, %[[F:[^:]+]]: tensor<16xf32>)
// CHECK-DAG: %[[KEPT:.+]] = gpt.cast %[[Y]] : tensor<16xbf16> -> tensor<16xf32>
// CHECK-DAG: %[[SHARED:.+]] = gpt.cast %[[Z]] : tensor<16xbf16> -> tensor<16xf32>
// CHECK-DAG: %[[NARROW:.+]] = gpt.cast %[[F]] : tensor<16xf32> -> tensor<16xbf16>
// CHECK: %[[M:.+]]:2 = gpt.multi_tensor_elementwise(%[[G1]], %[[G2]] : tensor<16xbf16>, tensor<8x16xbf16>) {num_tensors = 2 : i64} -> tensor<16xf32>, tensor<8x16xf32> {
// CHECK-NEXT: ^bb0(%[[A:.+]]: bf16):
// CHECK-NEXT: %[[E:.+]] = arith.extf %[[A]] : bf16 to f32
// CHECK-NEXT: gpt.yield %[[E]] : f32
// CHECK-NEXT: }
// CHECK-NEXT: return %[[M]]#0, %[[M]]#1, %[[KEPT]], %[[SHARED]], %[[SHARED]], %[[NARROW]]
func.func @gradient_casts(%g1: tensor<16xbf16>, %g2: tensor<8x16xbf16>, %y: tensor<16xbf16>, %z: tensor<16xbf16>, %f: tensor<16xf32>) -> (tensor<16xf32> {gpt.grad = "b1"}, tensor<8x16xf32> {gpt.grad = "w2"}, tensor<16xf32>, tensor<16xf32> {gpt.grad = "b3"}, tensor<16xf32>, tensor<16xbf16> {gpt.grad = "b4"}) {
  %w1 = gpt.cast %g1 : tensor<16xbf16> -> tensor<16xf32>
  %w2 = gpt.cast %g2 : tensor<8x16xbf16> -> tensor<8x16xf32>
  %wy = gpt.cast %y : tensor<16xbf16> -> tensor<16xf32>
  %wz = gpt.cast %z : tensor<16xbf16> -> tensor<16xf32>
  %nf = gpt.cast %f : tensor<16xf32> -> tensor<16xbf16>
  return %w1, %w2, %wy, %wz, %wz, %nf : tensor<16xf32>, tensor<8x16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xbf16>
}

// -----

// A single gradient cast is one launch either way: it stays a cast.
// CHECK-LABEL: func.func @one_gradient_cast
// CHECK-NEXT: gpt.cast
// CHECK-NOT: gpt.multi_tensor_elementwise
func.func @one_gradient_cast(%g: tensor<16xbf16>) -> (tensor<16xf32> {gpt.grad = "b"}) {
  %w = gpt.cast %g : tensor<16xbf16> -> tensor<16xf32>
  return %w : tensor<16xf32>
}
