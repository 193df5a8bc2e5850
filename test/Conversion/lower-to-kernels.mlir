// RUN: gptc-opt %s -split-input-file -verify-diagnostics --gpt-print-kernels -o /dev/null | FileCheck %s

// The lowering to a kernel-level Program (gptc/Conversion/LowerToKernels.h):
// one launch per op, views for reshapes, constants as data, attributes by
// name, results written straight into their bound buffers (or copied when
// no launch of the function writes them), update in place.

// A forward-like function alone. Bound buffers come first (arguments, then
// results), then one buffer per value. The layernorm's default epsilon is
// spelled out; unit attributes are 1; the reshape is no launch but a view
// of its operand; "logits" is that view, so a copy launch (an identity
// fused_elementwise) writes it, while "loss" is written by the launch that
// computes it. Locations look through names and fusions.
// The plan: bound buffers at 0..1280, 256 bytes each; temps above by
// liveness: %10 (launches 3-4) and %6 (0-1) share 1536, %7 (1-5, its view
// is read last) takes 1792, %8 (2-3) 2048.
// CHECK-LABEL: // gptc kernel program
// CHECK-NEXT: meta: precision=fp32
// CHECK-NEXT: arena: 2304 bytes (0.00 MiB) = persistent 1536 + temps 768
// CHECK-NEXT: buffers: 11
// CHECK-NEXT: id  role     dtype[shape]  offset  bytes  name
// CHECK-NEXT: %0  param    f32[2x4]           0     32  x
// CHECK-NEXT: %1  param    f32[4]           256     16  w
// CHECK-NEXT: %2  param    f32[4]           512     16  b
// CHECK-NEXT: %3  output   f32[]            768      4  loss
// CHECK-NEXT: %4  output   f32[8]          1024     32  logits
// CHECK-NEXT: %5  constant f32[]           1280      4  %0 = 2
// CHECK-NEXT: %6  temp     f32[2x4]        1536     32  %1
// CHECK-NEXT: %7  temp     f32[2x4]        1792     32  %2
// CHECK-NEXT: %8  temp     f32[4x2]        2048     32  %3
// CHECK-NEXT: %9  temp     f32[8]          1792     32  %4 (view of %7)
// CHECK-NEXT: %10  temp    f32[4x4]        1536     64  %5
// CHECK-NEXT: func forward: 6 launches, 3 arguments, 2 results
// CHECK-NEXT:   arguments: %0 %1 %2
// CHECK-NEXT:   results: %3 %4
// CHECK-NEXT:     %6 = layernorm(%0, %1, %2) {epsilon=1e-05} : f32[2x4] @ model.py:3:7
// CHECK-NEXT:     %7 = fused_elementwise(%6, %5) : f32[2x4] @ a.cpp:1:2
// CHECK-NEXT:         body(r0, r1) { r2 = mul r0, r1; yield r2 }
// CHECK-NEXT:     %8 = transpose(%7) {permutation=[1,0]} : f32[4x2] @ b.cpp:5:6
// CHECK-NEXT:     %10 = matmul(%8, %8) {transpose_b=1} : f32[4x4] @ {{.*}}lower-to-kernels.mlir{{.*}}:{{[0-9]+}}:{{[0-9]+}}
// CHECK-NEXT:     %3 = reduce_sum(%10) : f32[] @
// CHECK-NEXT:     // %9 = view of %7 : f32[8]
// CHECK-NEXT:     %4 = fused_elementwise(%9) : f32[8] @ {{.*}}lower-to-kernels.mlir{{.*}}:{{[0-9]+}}:{{[0-9]+}}
// CHECK-NEXT:         body(r0) { yield r0 }
// CHECK-NOT: func
func.func @fwd(%x: tensor<2x4xf32> {gpt.param = "x"}, %w: tensor<4xf32> {gpt.param = "w"},
               %b: tensor<4xf32> {gpt.param = "b"})
    -> (tensor<f32> {gpt.output = "loss"}, tensor<8xf32> {gpt.output = "logits"}) {
  %c = gpt.constant dense<2.0> : tensor<f32>
  %n = gpt.layernorm %x, %w, %b : tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32> loc("model.py":3:7)
  %s = gpt.fused_elementwise(%n, %c : tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32> {
  ^bb0(%a: f32, %k: f32):
    %m = arith.mulf %a, %k : f32
    gpt.yield %m : f32
  } loc(fused<"vjp">["a.cpp":1:2])
  %t = gpt.transpose %s [1, 0] : tensor<2x4xf32> -> tensor<4x2xf32> loc("name"("b.cpp":5:6))
  %r = gpt.reshape %s : tensor<2x4xf32> -> tensor<8xf32>
  %mm = gpt.matmul %t, %t {transpose_b} : tensor<4x2xf32>, tensor<4x2xf32> -> tensor<4x4xf32>
  %l = gpt.reduce_sum %mm : tensor<4x4xf32> -> tensor<f32>
  return %l, %r : tensor<f32>, tensor<8xf32>
}

// -----

// The three functions of a step share buffers by role and binding: the
// gradient that grads returns is the one update reads, the parameter is
// one buffer. Update writes the parameter and moment in place (its results
// are its arguments' buffers), and the launches grad_norm depends on come
// first, before the unrelated bias correction that precedes them in the IR.
// CHECK-LABEL: // gptc kernel program
// CHECK: %0  param    f32[4]
// CHECK-SAME: w
// CHECK-NEXT: %1  param    f32[4]
// CHECK-SAME: x
// CHECK-NEXT: %2  output   f32[]
// CHECK-SAME: loss
// CHECK: %[[G:[0-9]+]]  grad     f32[4]
// CHECK-SAME: w
// CHECK-NOT: grad_sum
// CHECK: %[[T:[0-9]+]]  temp     f32[4] {{.*}} w.acc{{$}}
// CHECK: func forward: 2 launches
// CHECK-NEXT: arguments: %0 %1
// CHECK-NEXT: results: %2
// CHECK: %2 = reduce_sum(
// CHECK: func grads: 3 launches, 2 arguments, 2 results
// CHECK-NEXT: arguments: %0 %1
// CHECK-NEXT: results: %2 %[[G]]
// CHECK: %[[G]] = fused_elementwise(%1) : f32[4]
// CHECK: func update: 6 launches, 4 arguments, 3 results, norm launches [0, 3)
// CHECK-NEXT: arguments: %0 %[[G]] %[[M:[0-9]+]] %[[LR:[0-9]+]]
// CHECK-NEXT: results: %0 %[[M]] %[[NORM:[0-9]+]]
// CHECK-NEXT: %[[SQ:[0-9]+]] = fused_elementwise(%[[G]], %[[G]])
// CHECK-NEXT: body
// CHECK-NEXT: %[[SUM:[0-9]+]] = reduce_sum(%[[SQ]]) : f32[]
// CHECK-NEXT: %[[NORM]] = fused_elementwise(%[[SUM]]) : f32[]
// CHECK-NEXT: body(r0) { r1 = sqrt r0; yield r1 }
// CHECK-NEXT: %[[BC:[0-9]+]] = fused_elementwise(%[[LR]]) : f32[]
// CHECK-NEXT: body(r0) { r1 = neg r0; yield r1 }
// CHECK-NEXT: %[[M]] = fused_elementwise(%[[M]], %[[G]]) : f32[4]
// CHECK-NEXT: body
// CHECK-NEXT: %0 = fused_elementwise(%0, %[[M]], %[[BC]]) : f32[4]
// With a grads function comes grads_accumulate, for gradient accumulation:
// grads' launches on temps of their own, the gradient into a temp of its
// own (w.acc), then one launch adding it to the gradient in place.
// CHECK-NEXT: body
// CHECK-NEXT: func grads_accumulate: 4 launches, 3 arguments, 2 results
// CHECK-NEXT: arguments: %0 %1 %[[G]]{{$}}
// CHECK-NEXT: results: %2 %[[G]]{{$}}
// CHECK-NEXT: %[[Y:[0-9]+]] = fused_elementwise(%0, %1) : f32[4]
// CHECK-NEXT: body
// CHECK-NEXT: %2 = reduce_sum(%[[Y]]) : f32[]
// CHECK-NEXT: %[[T]] = fused_elementwise(%1) : f32[4]
// CHECK-NEXT: body(r0) { yield r0 }
// CHECK-NEXT: %[[G]] = multi_tensor_elementwise(%[[G]], %[[T]]) {num_tensors=1} : f32[4]{{$}}
// CHECK-NEXT: body(r0, r1) { r2 = add r0, r1; yield r2 }
// CHECK-NOT: func
func.func @forward(%w: tensor<4xf32> {gpt.param = "w"}, %x: tensor<4xf32> {gpt.param = "x"})
    -> (tensor<f32> {gpt.output = "loss"}) {
  %y = gpt.fused_elementwise(%w, %x : tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: f32, %b: f32):
    %m = arith.mulf %a, %b : f32
    gpt.yield %m : f32
  }
  %l = gpt.reduce_sum %y : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
func.func @grads(%w: tensor<4xf32> {gpt.param = "w"}, %x: tensor<4xf32> {gpt.param = "x"})
    -> (tensor<f32> {gpt.output = "loss"}, tensor<4xf32> {gpt.grad = "w"}) {
  %y = gpt.fused_elementwise(%w, %x : tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: f32, %b: f32):
    %m = arith.mulf %a, %b : f32
    gpt.yield %m : f32
  }
  %l = gpt.reduce_sum %y : tensor<4xf32> -> tensor<f32>
  %g = gpt.fused_elementwise(%x : tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: f32):
    gpt.yield %a : f32
  }
  return %l, %g : tensor<f32>, tensor<4xf32>
}
func.func @update(%p: tensor<4xf32> {gpt.param = "w"}, %g: tensor<4xf32> {gpt.grad = "w"},
                  %m: tensor<4xf32> {gpt.adam_m = "w"}, %lr: tensor<f32> {gpt.hyper = "lr"})
    -> (tensor<4xf32> {gpt.param = "w"}, tensor<4xf32> {gpt.adam_m = "w"},
        tensor<f32> {gpt.output = "grad_norm"}) {
  %bc = gpt.fused_elementwise(%lr : tensor<f32>) -> tensor<f32> {
  ^bb0(%a: f32):
    %n = arith.negf %a : f32
    gpt.yield %n : f32
  }
  %sq = gpt.fused_elementwise(%g, %g : tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: f32, %b: f32):
    %s = arith.mulf %a, %b : f32
    gpt.yield %s : f32
  }
  %sum = gpt.reduce_sum %sq : tensor<4xf32> -> tensor<f32>
  %norm = gpt.fused_elementwise(%sum : tensor<f32>) -> tensor<f32> {
  ^bb0(%a: f32):
    %r = math.sqrt %a : f32
    gpt.yield %r : f32
  }
  %m2 = gpt.fused_elementwise(%m, %g : tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %a, %b : f32
    gpt.yield %s : f32
  }
  %p2 = gpt.fused_elementwise(%p, %m2, %bc : tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32> {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %s = arith.mulf %b, %c : f32
    %t = arith.addf %a, %s : f32
    gpt.yield %t : f32
  }
  return %p2, %m2, %norm : tensor<4xf32>, tensor<4xf32>, tensor<f32>
}

// -----

// A multi-tensor update in place: result r of tensor t overwrites the
// buffer that tensor t reads, element by element. Integer arrays, floats
// and ints keep their names; constants carry their bytes.
// CHECK-LABEL: // gptc kernel program
// CHECK: %0  param    f32[4]
// CHECK-NEXT: %1  param    f32[8]
// CHECK-NEXT: %2  adam_m   f32[4]
// CHECK-NEXT: %3  adam_m   f32[8]
// CHECK-NEXT: %4  grad     f32[4]
// CHECK-NEXT: %5  grad     f32[8]
// CHECK-NEXT: %6  hyper    f32[]
// CHECK: %7  constant i32[3]
// CHECK-SAME: %0 = [1, 2, 3]
// CHECK: func update: 1 launches, 7 arguments, 4 results, norm launches [0, 0)
// CHECK: %0, %1, %2, %3 = multi_tensor_elementwise(%0, %1, %2, %3, %4, %5, %6) {num_tensors=2} : f32[4], f32[8], f32[4], f32[8]
// CHECK-NEXT: body(r0, r1, r2, r3) { r4 = add r1, r2; r5 = mul r4, r3; r6 = sub r0, r5; yield r6, r4 }
func.func @update(%p0: tensor<4xf32> {gpt.param = "a"}, %p1: tensor<8xf32> {gpt.param = "b"},
                  %m0: tensor<4xf32> {gpt.adam_m = "a"}, %m1: tensor<8xf32> {gpt.adam_m = "b"},
                  %g0: tensor<4xf32> {gpt.grad = "a"}, %g1: tensor<8xf32> {gpt.grad = "b"},
                  %lr: tensor<f32> {gpt.hyper = "lr"})
    -> (tensor<4xf32> {gpt.param = "a"}, tensor<8xf32> {gpt.param = "b"},
        tensor<4xf32> {gpt.adam_m = "a"}, tensor<8xf32> {gpt.adam_m = "b"}) {
  %ids = gpt.constant dense<[1, 2, 3]> : tensor<3xi32>
  %r:4 = gpt.multi_tensor_elementwise(%p0, %p1, %m0, %m1, %g0, %g1 : tensor<4xf32>, tensor<8xf32>, tensor<4xf32>, tensor<8xf32>, tensor<4xf32>, tensor<8xf32>) scalars(%lr : tensor<f32>) {num_tensors = 2 : i64} -> tensor<4xf32>, tensor<8xf32>, tensor<4xf32>, tensor<8xf32> {
  ^bb0(%p: f32, %m: f32, %g: f32, %l: f32):
    %m2 = arith.addf %m, %g : f32
    %s = arith.mulf %m2, %l : f32
    %p2 = arith.subf %p, %s : f32
    gpt.yield %p2, %m2 : f32, f32
  }
  return %r#0, %r#1, %r#2, %r#3 : tensor<4xf32>, tensor<8xf32>, tensor<4xf32>, tensor<8xf32>
}

// -----

// The update as gpt-fuse-elementwise makes it: the norm is one
// multi_tensor_reduce launch (the norm launches), AdamW one
// multi_tensor_elementwise whose per-tensor constants travel as a float
// list, exactly (printed as the shortest decimal that reads back).
// CHECK: func update: 2 launches, 7 arguments, 5 results, norm launches [0, 1)
// CHECK: %[[N:[0-9]+]] = multi_tensor_reduce(%4, %5, %6) {num_tensors=2} : f32[]
// CHECK-NEXT: body(r0, r1) { r2 = mul r0, r1; r3 = mul r2, r2; yield r3 }
// CHECK: %0, %1, %2, %3 = multi_tensor_elementwise(%0, %1, %2, %3, %4, %5, %6) {num_tensors=2, per_tensor=[0.1,0]} : f32[4], f32[8], f32[4], f32[8]
// CHECK-NEXT: body(r0, r1, r2, r3, r4) { r5 = mul r3, r4; r6 = mul r0, r5; r7 = add r1, r2; r8 = sub r6, r7; yield r8, r7 }
func.func @update(%p0: tensor<4xf32> {gpt.param = "a"}, %p1: tensor<8xf32> {gpt.param = "b"},
                  %m0: tensor<4xf32> {gpt.adam_m = "a"}, %m1: tensor<8xf32> {gpt.adam_m = "b"},
                  %g0: tensor<4xf32> {gpt.grad = "a"}, %g1: tensor<8xf32> {gpt.grad = "b"},
                  %lr: tensor<f32> {gpt.hyper = "lr"})
    -> (tensor<4xf32> {gpt.param = "a"}, tensor<8xf32> {gpt.param = "b"},
        tensor<4xf32> {gpt.adam_m = "a"}, tensor<8xf32> {gpt.adam_m = "b"},
        tensor<f32> {gpt.output = "grad_norm"}) {
  %n = gpt.multi_tensor_reduce(%g0, %g1 : tensor<4xf32>, tensor<8xf32>) scalars(%lr : tensor<f32>) {num_tensors = 2 : i64} -> tensor<f32> {
  ^bb0(%g: f32, %l: f32):
    %y = arith.mulf %g, %l : f32
    %q = arith.mulf %y, %y : f32
    gpt.yield %q : f32
  }
  %r:4 = gpt.multi_tensor_elementwise(%p0, %p1, %m0, %m1, %g0, %g1 : tensor<4xf32>, tensor<8xf32>, tensor<4xf32>, tensor<8xf32>, tensor<4xf32>, tensor<8xf32>) scalars(%lr : tensor<f32>) {num_tensors = 2 : i64, per_tensor = array<f32: 0.1, 0.0>} -> tensor<4xf32>, tensor<8xf32>, tensor<4xf32>, tensor<8xf32> {
  ^bb0(%p: f32, %m: f32, %g: f32, %wd: f32, %l: f32):
    %d = arith.mulf %wd, %l : f32
    %q = arith.mulf %p, %d : f32
    %m2 = arith.addf %m, %g : f32
    %u = arith.subf %q, %m2 : f32
    gpt.yield %u, %m2 : f32, f32
  }
  return %r#0, %r#1, %r#2, %r#3, %n : tensor<4xf32>, tensor<8xf32>, tensor<4xf32>, tensor<8xf32>, tensor<f32>
}

// -----

// Negative cases: one error at the op (or function) that causes it.

func.func @unfused(%x: tensor<4xf32> {gpt.param = "x"}) -> (tensor<4xf32> {gpt.output = "logits"}) {
  // expected-error @+1 {{'gpt.softmax' has no kernel; lower the step from --stage=fused}}
  %y = gpt.softmax %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// expected-error @+1 {{argument #1 of @unbound has no binding}}
func.func @unbound(%x: tensor<4xf32> {gpt.param = "x"}, %w: tensor<4xf32>) -> (tensor<f32> {gpt.output = "loss"}) {
  %l = gpt.reduce_sum %x : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// expected-error @+1 {{element type 'f64' has no kernel dtype (f32, bf16, f16, i32)}}
func.func @f64(%x: tensor<4xf64> {gpt.param = "x"}) -> (tensor<4xf64> {gpt.output = "logits"}) {
  return %x : tensor<4xf64>
}

// -----

func.func @odd_attribute(%x: tensor<4x4xf32> {gpt.param = "x"}) -> (tensor<4x4xf32> {gpt.output = "logits"}) {
  // expected-error @+1 {{attribute 'note' of 'gpt.matmul' ("hi") has no launch form}}
  %y = gpt.matmul %x, %x {note = "hi"} : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  return %y : tensor<4x4xf32>
}

// -----

// Only elementwise kernels may write a parameter in place.
func.func @update(%p: tensor<4xf32> {gpt.param = "w"}, %m: tensor<4xf32> {gpt.adam_m = "w"},
                  %g: tensor<4xf32> {gpt.grad = "w"}, %b: tensor<4xf32> {gpt.grad = "b"})
    -> (tensor<4xf32> {gpt.param = "w"}) {
  // expected-error @+1 {{'gpt.layernorm' writes param 'w' in place, which only elementwise kernels may}}
  %n = gpt.layernorm %g, %m, %b : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  return %n : tensor<4xf32>
}

// -----

// Writing in place, then reading the old value.
func.func @update(%p: tensor<4xf32> {gpt.param = "w"}, %m: tensor<4xf32> {gpt.adam_m = "w"})
    -> (tensor<4xf32> {gpt.param = "w"}, tensor<4xf32> {gpt.adam_m = "w"}) {
  // expected-error @+1 {{writes param 'w' in place, but a later launch reads its old value ('gpt.fused_elementwise' at}}
  %p2 = gpt.fused_elementwise(%p, %m : tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %a, %b : f32
    gpt.yield %s : f32
  }
  %m2 = gpt.fused_elementwise(%m, %p : tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: f32, %b: f32):
    %s = arith.mulf %a, %b : f32
    gpt.yield %s : f32
  }
  return %p2, %m2 : tensor<4xf32>, tensor<4xf32>
}

// -----

// Tensor 0's result written over tensor 1's parameter: not elementwise.
func.func @update(%p0: tensor<4xf32> {gpt.param = "a"}, %p1: tensor<4xf32> {gpt.param = "b"},
                  %m0: tensor<4xf32> {gpt.adam_m = "a"})
    -> (tensor<4xf32> {gpt.param = "b"}) {
  // expected-error @+1 {{writes param 'b' in place but reads it at other elements (operand #1)}}
  %r:2 = gpt.multi_tensor_elementwise(%p0, %p1 : tensor<4xf32>, tensor<4xf32>) {num_tensors = 2 : i64} -> tensor<4xf32>, tensor<4xf32> {
  ^bb0(%p: f32):
    %d = arith.addf %p, %p : f32
    gpt.yield %d : f32
  }
  return %r#0 : tensor<4xf32>
}

// -----

// grad_norm must be computable before anything is written in place.
func.func @update(%p: tensor<4xf32> {gpt.param = "w"}, %m: tensor<4xf32> {gpt.adam_m = "w"})
    -> (tensor<4xf32> {gpt.param = "w"}, tensor<f32> {gpt.output = "grad_norm"}) {
  // expected-error @+1 {{grad_norm depends on a launch that writes param 'w' in place}}
  %p2 = gpt.fused_elementwise(%p, %m : tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: f32, %b: f32):
    %s = arith.addf %a, %b : f32
    gpt.yield %s : f32
  }
  %n = gpt.reduce_sum %p2 : tensor<4xf32> -> tensor<f32>
  return %p2, %n : tensor<4xf32>, tensor<f32>
}

// -----

// expected-error @+1 {{no step function to lower}}
module {
  func.func @plain(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}

// -----

// A gpt.slice that keeps its operand's first bytes is a view, like a
// reshape: the padded dimension is the first one cut, dimensions before it
// are 1 and after it whole, and the element type stays ([6x4] -> [5x4],
// [1x6x4] -> [1x5x4]). A slice that cuts an inner dimension, or converts,
// is a launch; so is a prefix slice that is a function result, which is
// written into its bound buffer.
// CHECK: // gptc kernel program
// CHECK:      %4  temp     f32[6x4]                        1024
// CHECK-NEXT: %5  temp     f32[5x4]                        1024          80  %1 (view of %4)
// CHECK-NEXT: %6  temp     f32[6x3]
// CHECK-NEXT: %7  temp     f32[1x5x4]                       256          80  %3 (view of %1)
// CHECK:      func forward: 10 launches
// CHECK:      %4 = transpose(%0)
// CHECK-NEXT: %6 = slice(%4) : f32[6x3]
// CHECK-NEXT: %8 = slice(%4) : bf16[5x4]
// CHECK-NEXT: // %5 = view of %4 : f32[5x4]
// CHECK-NEXT: %9 = reduce_sum(%5)
// CHECK-NEXT: %10 = reduce_sum(%6)
// CHECK-NEXT: // %7 = view of %1 : f32[1x5x4]
// CHECK-NEXT: %11 = reduce_sum(%7)
// CHECK:      %3 = slice(%4) : f32[5x4]
func.func @fwd(%x: tensor<4x6xf32> {gpt.param = "x"}, %y: tensor<1x6x4xf32> {gpt.param = "y"})
    -> (tensor<f32> {gpt.output = "loss"}, tensor<5x4xf32> {gpt.output = "logits"}) {
  %e = gpt.transpose %x [1, 0] : tensor<4x6xf32> -> tensor<6x4xf32>
  %p = gpt.slice %e : tensor<6x4xf32> -> tensor<5x4xf32>
  %c = gpt.slice %e : tensor<6x4xf32> -> tensor<6x3xf32>
  %q = gpt.slice %y : tensor<1x6x4xf32> -> tensor<1x5x4xf32>
  %h = gpt.slice %e : tensor<6x4xf32> -> tensor<5x4xbf16>
  %s1 = gpt.reduce_sum %p : tensor<5x4xf32> -> tensor<f32>
  %s2 = gpt.reduce_sum %c : tensor<6x3xf32> -> tensor<f32>
  %s3 = gpt.reduce_sum %q : tensor<1x5x4xf32> -> tensor<f32>
  %h2 = gpt.cast %h : tensor<5x4xbf16> -> tensor<5x4xf32>
  %s4 = gpt.reduce_sum %h2 : tensor<5x4xf32> -> tensor<f32>
  %l = gpt.fused_elementwise(%s1, %s2, %s3, %s4 : tensor<f32>, tensor<f32>, tensor<f32>, tensor<f32>) -> tensor<f32> {
  ^bb0(%a: f32, %b: f32, %c2: f32, %d: f32):
    %0 = arith.addf %a, %b : f32
    %1 = arith.addf %c2, %d : f32
    %2 = arith.addf %0, %1 : f32
    gpt.yield %2 : f32
  }
  %r = gpt.slice %e : tensor<6x4xf32> -> tensor<5x4xf32>
  return %l, %r : tensor<f32>, tensor<5x4xf32>
}

// -----

// A weight's bf16 copy (gpt-weight-copies): grads reads the padded copy,
// the update writes its leading rows, a view of the same buffer.
// CHECK: %[[COPY:[0-9]+]] param_copy bf16[8x4] [[AT:[0-9]+]] 64 w
// CHECK: %[[ROWS:[0-9]+]] param_copy bf16[6x4] [[AT]] 48 w (view of %[[COPY]])
// CHECK: func grads: 1 launches
// CHECK-NEXT: arguments: %{{[0-9]+}} %[[COPY]]
// CHECK: func update: 1 launches
// CHECK: results: %{{[0-9]+}} %[[ROWS]]
// CHECK-NEXT: %{{[0-9]+}}, %[[ROWS]] = fused_elementwise(
module {
  func.func @grads(%x: tensor<2x4xbf16> {gpt.param = "x"}, %w: tensor<8x4xbf16> {gpt.param_copy = "w"})
      -> (tensor<2x8xbf16> {gpt.grad = "x"}) {
    %y = gpt.matmul %x, %w {transpose_b} : tensor<2x4xbf16>, tensor<8x4xbf16> -> tensor<2x8xbf16>
    return %y : tensor<2x8xbf16>
  }
  func.func @adamw_update(%p: tensor<6x4xf32> {gpt.param = "w"}, %m: tensor<6x4xf32> {gpt.adam_m = "w"})
      -> (tensor<6x4xf32> {gpt.param = "w"}, tensor<6x4xbf16> {gpt.param_copy = "w"}) {
    %r:2 = gpt.fused_elementwise(%p, %m : tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<6x4xf32>, tensor<6x4xbf16> {
    ^bb0(%a: f32, %b: f32):
      %s = arith.addf %a, %b : f32
      gpt.yield %s, %s : f32, f32
    }
    return %r#0, %r#1 : tensor<6x4xf32>, tensor<6x4xbf16>
  }
}

// -----

// A copy the update writes in another shape than its leading rows: one
// error at the update's return.
module {
  func.func @grads(%x: tensor<2x4xbf16> {gpt.param = "x"}, %w: tensor<8x4xbf16> {gpt.param_copy = "w"})
      -> (tensor<2x8xbf16> {gpt.grad = "x"}) {
    %y = gpt.matmul %x, %w {transpose_b} : tensor<2x4xbf16>, tensor<8x4xbf16> -> tensor<2x8xbf16>
    return %y : tensor<2x8xbf16>
  }
  func.func @adamw_update(%p: tensor<8x2xf32> {gpt.param = "w"}, %m: tensor<8x2xf32> {gpt.adam_m = "w"})
      -> (tensor<8x2xf32> {gpt.param = "w"}, tensor<8x2xbf16> {gpt.param_copy = "w"}) {
    %r:2 = gpt.fused_elementwise(%p, %m : tensor<8x2xf32>, tensor<8x2xf32>) -> tensor<8x2xf32>, tensor<8x2xbf16> {
    ^bb0(%a: f32, %b: f32):
      %s = arith.addf %a, %b : f32
      gpt.yield %s, %s : f32, f32
    }
    // expected-error @+1 {{param_copy 'w' is 'tensor<8x2xbf16>' here but bf16 of another shape in another function}}
    return %r#0, %r#1 : tensor<8x2xf32>, tensor<8x2xbf16>
  }
}

// -----

// grads_accumulate's weight gradients: one that a matmul writes and no
// launch reads is added by that matmul in place (accumulate: the sum is
// its last operand, and its result); one that a later launch reads (here
// the loss) is computed into a temp like grads' and added by the add, as
// is every gradient no GEMM writes.
// CHECK: %[[GW:[0-9]+]]  grad     f32[3x3] {{.*}} w{{$}}
// CHECK: %[[GV:[0-9]+]]  grad     f32[3x3] {{.*}} v{{$}}
// CHECK: %[[GB:[0-9]+]]  grad     f32[3] {{.*}} b{{$}}
// CHECK: func grads: 4 launches
// CHECK: %[[GW]] = matmul(%0, %1) {transpose_a=1} : f32[3x3]
// CHECK: func grads_accumulate: 5 launches, 5 arguments, 4 results
// CHECK-NEXT: arguments: %0 %1 %[[GW]] %[[GV]] %[[GB]]{{$}}
// CHECK-NEXT: results: %{{[0-9]+}} %[[GW]] %[[GV]] %[[GB]]{{$}}
// CHECK-NEXT: %[[GW]] = matmul(%0, %1, %[[GW]]) {accumulate=1, transpose_a=1} : f32[3x3]
// CHECK-NEXT: %[[TV:[0-9]+]] = matmul(%0, %1) {transpose_a=1} : f32[3x3]
// CHECK-NEXT: reduce_sum(%[[TV]])
// CHECK-NEXT: %[[TB:[0-9]+]] = reduce_sum(
// CHECK-NEXT: %[[GV]], %[[GB]] = multi_tensor_elementwise(%[[GV]], %[[GB]], %[[TV]], %[[TB]]) {num_tensors=2} : f32[3x3], f32[3]{{$}}
// CHECK-NEXT: body(r0, r1) { r2 = add r0, r1; yield r2 }
func.func @grads(%x: tensor<4x3xf32> {gpt.param = "x"}, %y: tensor<4x3xf32> {gpt.param = "y"})
    -> (tensor<f32> {gpt.output = "loss"}, tensor<3x3xf32> {gpt.grad = "w"},
        tensor<3x3xf32> {gpt.grad = "v"}, tensor<3xf32> {gpt.grad = "b"}) {
  %gw = gpt.matmul %x, %y {transpose_a} : tensor<4x3xf32>, tensor<4x3xf32> -> tensor<3x3xf32>
  %gv = gpt.matmul %x, %y {transpose_a} : tensor<4x3xf32>, tensor<4x3xf32> -> tensor<3x3xf32>
  %l = gpt.reduce_sum %gv : tensor<3x3xf32> -> tensor<f32>
  %gb = gpt.reduce_sum %y {axes = [0]} : tensor<4x3xf32> -> tensor<3xf32>
  return %l, %gw, %gv, %gb : tensor<f32>, tensor<3x3xf32>, tensor<3x3xf32>, tensor<3xf32>
}

// -----

// A gradient that is not float32: no grads_accumulate (the runtime then
// refuses --grad-accum in one line).
// CHECK: %1  grad       bf16[3] {{.*}} x{{$}}
// CHECK: func grads: 1 launches
// CHECK-NOT: func grads_accumulate
func.func @grads(%x: tensor<4x3xbf16> {gpt.param = "x"})
    -> (tensor<3xbf16> {gpt.grad = "x"}) {
  %g = gpt.reduce_sum %x {axes = [0]} : tensor<4x3xbf16> -> tensor<3xbf16>
  return %g : tensor<3xbf16>
}

// -----

// A tied table's gradient (LowerToKernels.cpp's writeTableGradientInPlace):
// in grads the lm_head-like GEMM writes its [5, 2] product straight into
// the gradient, and the scatter-add adds to it in place (accumulate: the
// gradient as its last operand, no addend). Of the product only
// grads_accumulate's temp is left: that function keeps the addend form
// (the host's rounding, old + (addend + sum); here through the add, which
// keeps one gradient).
// CHECK-LABEL: param {{ *}}f32[3x5] {{.*}} dl_tied
// CHECK: %[[GT:[0-9]+]] {{ *}}grad {{ *}}f32[5x2] {{.*}} t
// CHECK: temp {{ *}}f32[5x2] {{.*}} %0.acc
// Each function's scatter-add reads its ids sorted (sortEmbeddingIds).
// CHECK: func grads: 3 launches
// CHECK: %[[K:[0-9]+]] = sort_ids(%{{[0-9]+}}) {position_bits=2, rows=5} : i32[3] @
// CHECK-NEXT: %[[GT]] = matmul(%{{[0-9]+}}, %{{[0-9]+}}) {transpose_a=1} : f32[5x2] @
// CHECK-NEXT: %[[GT]] = embedding_grad(%{{[0-9]+}}, %[[K]], %[[GT]]) {accumulate=1, position_bits=2} : f32[5x2]
// CHECK: func grads_accumulate: 4 launches
// CHECK: %[[KA:[0-9]+]] = sort_ids(
// CHECK-NEXT: %[[P:[0-9]+]] = matmul(%{{[0-9]+}}, %{{[0-9]+}}) {transpose_a=1} : f32[5x2]
// CHECK-NEXT: = embedding_grad(%{{[0-9]+}}, %[[KA]], %[[P]]) {position_bits=2} : f32[5x2]
func.func @grads(%dl: tensor<3x5xf32> {gpt.param = "dl_tied"}, %x: tensor<3x2xf32> {gpt.param = "x"},
                 %dy: tensor<3x2xf32> {gpt.param = "dy"}, %ids: tensor<3xi32> {gpt.input = "tokens"})
    -> (tensor<5x2xf32> {gpt.grad = "t"}) {
  %mm = gpt.matmul %dl, %x {transpose_a} : tensor<3x5xf32>, tensor<3x2xf32> -> tensor<5x2xf32>
  %g = gpt.embedding_grad %dy, %ids, %mm : tensor<3x2xf32>, tensor<3xi32>, tensor<5x2xf32> -> tensor<5x2xf32>
  return %g : tensor<5x2xf32>
}

// -----

// A padded product (the table has its leading 5 of 8 rows, as GPT-2's
// wte 50257 of the lm_head's 50304): the gradient grows to the product's
// [8, 2], which the GEMM writes whole (cuBLASLt's n keeps the padding's
// multiple: written as the leading rows alone, GPT-2's took 2.70 ms a
// call on an H200 against 1.62), and every other reader takes the table as
// a view of its leading rows: grads' result, the scatter-add in place,
// grads_accumulate's argument and its sum. The product's temp is gone.
// CHECK-LABEL: param {{ *}}f32[3x8] {{.*}} dl_padded
// CHECK: %[[G:[0-9]+]] {{ *}}grad {{ *}}f32[8x2] {{.*}} t{{$}}
// CHECK-NOT: temp {{ *}}f32[8x2] {{.*}} %0{{$}}
// CHECK: %[[V:[0-9]+]] {{ *}}grad {{ *}}f32[5x2] {{.*}} t (view of %[[G]])
// CHECK: func grads: 3 launches
// CHECK: results: %[[V]]{{$}}
// CHECK: %[[G]] = matmul(%{{[0-9]+}}, %{{[0-9]+}}) {transpose_a=1} : f32[8x2] @
// CHECK-NEXT: // %[[V]] = view of %[[G]] : f32[5x2]
// CHECK-NEXT: %[[V]] = embedding_grad(%{{[0-9]+}}, %{{[0-9]+}}, %[[V]]) {accumulate=1, position_bits=2} : f32[5x2]
// CHECK: func grads_accumulate: 4 launches
// CHECK-NEXT: arguments: {{.*}} %[[V]]{{$}}
// CHECK-NEXT: results: %[[V]]{{$}}
func.func @grads(%dl: tensor<3x8xf32> {gpt.param = "dl_padded"}, %x: tensor<3x2xf32> {gpt.param = "x"},
                 %dy: tensor<3x2xf32> {gpt.param = "dy"}, %ids: tensor<3xi32> {gpt.input = "tokens"})
    -> (tensor<5x2xf32> {gpt.grad = "t"}) {
  %mm = gpt.matmul %dl, %x {transpose_a} : tensor<3x8xf32>, tensor<3x2xf32> -> tensor<8x2xf32>
  %head = gpt.slice %mm : tensor<8x2xf32> -> tensor<5x2xf32>
  %g = gpt.embedding_grad %dy, %ids, %head : tensor<3x2xf32>, tensor<3xi32>, tensor<5x2xf32> -> tensor<5x2xf32>
  return %g : tensor<5x2xf32>
}

// -----

// Declined: another launch reads the product too (its sum, here a
// gradient of its own), so it keeps its temp and the scatter-add its
// addend.
// CHECK-LABEL: param {{ *}}f32[3x8] {{.*}} dl_read
// CHECK: func grads: 4 launches
// CHECK: %[[P:[0-9]+]] = matmul(%{{[0-9]+}}, %{{[0-9]+}}) {transpose_a=1} : f32[8x2]
// CHECK: = reduce_sum(%[[P]])
// CHECK: = embedding_grad(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}) {position_bits=2} : f32[5x2]
// CHECK-NEXT: func grads_accumulate
func.func @grads(%dl: tensor<3x8xf32> {gpt.param = "dl_read"}, %x: tensor<3x2xf32> {gpt.param = "x"},
                 %dy: tensor<3x2xf32> {gpt.param = "dy"}, %ids: tensor<3xi32> {gpt.input = "tokens"})
    -> (tensor<5x2xf32> {gpt.grad = "t"}, tensor<f32> {gpt.grad = "s"}) {
  %mm = gpt.matmul %dl, %x {transpose_a} : tensor<3x8xf32>, tensor<3x2xf32> -> tensor<8x2xf32>
  %s = gpt.reduce_sum %mm : tensor<8x2xf32> -> tensor<f32>
  %head = gpt.slice %mm : tensor<8x2xf32> -> tensor<5x2xf32>
  %g = gpt.embedding_grad %dy, %ids, %head : tensor<3x2xf32>, tensor<3xi32>, tensor<5x2xf32> -> tensor<5x2xf32>
  return %g, %s : tensor<5x2xf32>, tensor<f32>
}

// -----

// Declined: the addend is no GEMM's product (a parameter), so nothing can
// write the gradient before the scatter-add.
// CHECK-LABEL: param {{ *}}f32[5x2] {{.*}} h_param
// CHECK: func grads: 2 launches
// CHECK-NEXT: arguments:
// CHECK-NEXT: results:
// CHECK-NEXT: = sort_ids(
// CHECK-NEXT: = embedding_grad(%{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}) {position_bits=2} : f32[5x2]
func.func @grads(%h: tensor<5x2xf32> {gpt.param = "h_param"},
                 %dy: tensor<3x2xf32> {gpt.param = "dy"}, %ids: tensor<3xi32> {gpt.input = "tokens"})
    -> (tensor<5x2xf32> {gpt.grad = "t"}) {
  %g = gpt.embedding_grad %dy, %ids, %h : tensor<3x2xf32>, tensor<3xi32>, tensor<5x2xf32> -> tensor<5x2xf32>
  return %g : tensor<5x2xf32>
}

// -----

// sortEmbeddingIds: a scatter-add reads its ids sorted where the keys fit,
// the sort placed after the last launch that writes the ids (here a
// transpose of the tokens), and both scatter-adds of the same ids and
// table height share it. 32,768 positions (the most the sort's one block
// takes) of a table of 65,535 rows: 16 bits for the row (the height
// itself: an id outside sorts as it) and 15 for the position, 31.
// CHECK-LABEL: param {{ *}}f32[65535x2] {{.*}} sorted_t
// CHECK: func grads: 4 launches
// CHECK: %[[IDS:[0-9]+]] = transpose(
// CHECK-NEXT: %[[K:[0-9]+]] = sort_ids(%[[IDS]]) {position_bits=15, rows=65535} : i32[32768] @
// CHECK-NEXT: = embedding_grad(%{{[0-9]+}}, %[[K]]) {position_bits=15} : f32[65535x2]
// CHECK-NEXT: = embedding_grad(%{{[0-9]+}}, %[[K]]) {position_bits=15} : f32[65535x2]
func.func @grads(%t: tensor<65535x2xf32> {gpt.param = "sorted_t"},
                 %dy: tensor<16384x2x2xf32> {gpt.param = "dy"}, %tokens: tensor<2x16384xi32> {gpt.input = "tokens"})
    -> (tensor<65535x2xf32> {gpt.grad = "a"}, tensor<65535x2xf32> {gpt.grad = "b"}) {
  %ids = gpt.transpose %tokens [1, 0] : tensor<2x16384xi32> -> tensor<16384x2xi32>
  %a = gpt.embedding_grad %dy, %ids : tensor<16384x2x2xf32>, tensor<16384x2xi32> -> tensor<65535x2xf32>
  %b = gpt.embedding_grad %dy, %ids : tensor<16384x2x2xf32>, tensor<16384x2xi32> -> tensor<65535x2xf32>
  return %a, %b : tensor<65535x2xf32>, tensor<65535x2xf32>
}

// -----

// Declined where the keys would not fit: 32,769 positions (past the sort's
// one block), and 65,536 rows with 32,768 positions (17 bits and 15).
// CHECK-LABEL: param {{ *}}f32[8x2] {{.*}} unsorted_t
// CHECK: func grads: 2 launches
// CHECK-NOT: sort_ids
// CHECK: = embedding_grad(%{{[0-9]+}}, %{{[0-9]+}}) : f32[8x2]
// CHECK-NEXT: = embedding_grad(%{{[0-9]+}}, %{{[0-9]+}}) : f32[65536x2]
// CHECK-NEXT: func grads_accumulate
func.func @grads(%t: tensor<8x2xf32> {gpt.param = "unsorted_t"},
                 %dy: tensor<32769x2xf32> {gpt.param = "dy"}, %ids: tensor<32769xi32> {gpt.input = "tokens"},
                 %dy2: tensor<32768x2xf32> {gpt.param = "dy2"}, %ids2: tensor<32768xi32> {gpt.input = "targets"})
    -> (tensor<8x2xf32> {gpt.grad = "a"}, tensor<65536x2xf32> {gpt.grad = "b"}) {
  %a = gpt.embedding_grad %dy, %ids : tensor<32769x2xf32>, tensor<32769xi32> -> tensor<8x2xf32>
  %b = gpt.embedding_grad %dy2, %ids2 : tensor<32768x2xf32>, tensor<32768xi32> -> tensor<65536x2xf32>
  return %a, %b : tensor<8x2xf32>, tensor<65536x2xf32>
}
