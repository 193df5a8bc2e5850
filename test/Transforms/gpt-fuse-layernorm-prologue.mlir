// RUN: gptc-opt %s -split-input-file -gpt-fuse-elementwise -verify-diagnostics | FileCheck %s

// GPT-2's residual add and the next block's layernorm: one
// gpt.fused_layernorm whose body is the add. The sum is read again later
// (the next residual add), so the op writes it too: the body yields it as
// the value to normalise and as the one value. The epsilon carries over.
// CHECK-LABEL: func.func @residual_layernorm
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x4x8xf32>, %[[H:[^:]+]]: tensor<2x4x8xf32>, %[[G:[^:]+]]: tensor<8xf32>, %[[B:[^:]+]]: tensor<8xf32>)
// CHECK: %[[N:.+]], %[[S:.+]] = gpt.fused_layernorm(%[[X]], %[[H]] : tensor<2x4x8xf32>, tensor<2x4x8xf32>) norm %[[G]], %[[B]] : tensor<8xf32>, tensor<8xf32> {epsilon = 2.{{[0-9]+}}e-05 : f32} -> tensor<2x4x8xf32>, tensor<2x4x8xf32> {
// CHECK-NEXT: ^bb0(%[[A0:.+]]: f32, %[[A1:.+]]: f32):
// CHECK-NEXT: %[[SUM:.+]] = arith.addf %[[A0]], %[[A1]] : f32
// CHECK-NEXT: gpt.yield %[[SUM]], %[[SUM]] : f32, f32
// CHECK-NOT: gpt.layernorm
// CHECK: %[[M:.+]] = gpt.matmul %[[N]]
// CHECK: gpt.fused_elementwise(%[[S]], %[[M]]
func.func @residual_layernorm(%x: tensor<2x4x8xf32>, %h: tensor<2x4x8xf32>, %gamma: tensor<8xf32>, %beta: tensor<8xf32>) -> tensor<2x4x8xf32> {
  %s = gpt.add %x, %h : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  %n = gpt.layernorm %s, %gamma, %beta {epsilon = 2.0e-5 : f32} : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %w = gpt.constant dense<0.5> : tensor<8x8xf32>
  %m = gpt.matmul %n, %w : tensor<2x4x8xf32>, tensor<8x8xf32> -> tensor<2x4x8xf32>
  %r = gpt.add %s, %m : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  return %r : tensor<2x4x8xf32>
}

// -----

// A chain whose value only the layernorm reads (ln_f of the eval forward):
// nothing but the normalised result is written. A broadcast input (the
// position embedding) keeps its shape; the body's order is the chain's.
// CHECK-LABEL: func.func @prologue_only
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x4x8xf32>, %[[P:[^:]+]]: tensor<4x8xf32>, %[[G:[^:]+]]: tensor<8xf32>, %[[B:[^:]+]]: tensor<8xf32>)
// CHECK: %[[N:.+]] = gpt.fused_layernorm(%[[X]], %[[P]] : tensor<2x4x8xf32>, tensor<4x8xf32>) norm %[[G]], %[[B]] : tensor<8xf32>, tensor<8xf32> -> tensor<2x4x8xf32> {
// CHECK: arith.addf
// CHECK: %[[T:.+]] = math.tanh
// CHECK-NEXT: gpt.yield %[[T]] : f32
// CHECK-NOT: gpt.fused_elementwise
// CHECK: return %[[N]]
func.func @prologue_only(%x: tensor<2x4x8xf32>, %p: tensor<4x8xf32>, %gamma: tensor<8xf32>, %beta: tensor<8xf32>) -> tensor<2x4x8xf32> {
  %s = gpt.add %x, %p : tensor<2x4x8xf32>, tensor<4x8xf32> -> tensor<2x4x8xf32>
  %t = gpt.tanh %s : tensor<2x4x8xf32>
  %n = gpt.layernorm %t, %gamma, %beta : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
  return %n : tensor<2x4x8xf32>
}

// -----

// Declined: the sum is also read before the layernorm, and the fused op
// would run at the layernorm. The pair stays.
// CHECK-LABEL: func.func @used_before
// CHECK: %[[S:.+]] = gpt.fused_elementwise
// CHECK: gpt.reduce_sum %[[S]]
// CHECK: gpt.layernorm %[[S]]
// CHECK-NOT: gpt.fused_layernorm
func.func @used_before(%x: tensor<2x4x8xf32>, %h: tensor<2x4x8xf32>, %gamma: tensor<8xf32>, %beta: tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>) {
  %s = gpt.add %x, %h : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  %sum = gpt.reduce_sum %s : tensor<2x4x8xf32> -> tensor<8xf32>
  // expected-remark @+1 {{did not fuse the 'gpt.fused_elementwise' that computes its input into 'gpt.layernorm' as a prologue: its value is also used by 'gpt.reduce_sum' before the layernorm runs, and fusing would compute it twice}}
  %n = gpt.layernorm %s, %gamma, %beta : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
  return %n, %sum : tensor<2x4x8xf32>, tensor<8xf32>
}

// -----

// Not a candidate: the layernorm's input is no fused op (a GEMM's result);
// quiet, and a bf16 layernorm is left alone.
// CHECK-LABEL: func.func @no_prologue
// CHECK: gpt.layernorm %arg0
// CHECK: gpt.layernorm %arg1
// CHECK-NOT: gpt.fused_layernorm
func.func @no_prologue(%x: tensor<2x8xf32>, %y: tensor<2x8xbf16>, %gamma: tensor<8xf32>, %beta: tensor<8xf32>, %g16: tensor<8xbf16>, %b16: tensor<8xbf16>) -> (tensor<2x8xf32>, tensor<2x8xbf16>) {
  %n = gpt.layernorm %x, %gamma, %beta : tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>
  %m = gpt.layernorm %y, %g16, %b16 : tensor<2x8xbf16>, tensor<8xbf16>, tensor<8xbf16>
  return %n, %m : tensor<2x8xf32>, tensor<2x8xbf16>
}

// -----

// The verifier: the body yields the value to normalise (f32) first.
func.func @bad_yield(%x: tensor<2x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{'gpt.fused_layernorm' op body yields 2 values of types 'f32', 'f32', expected the result element types 'f32'}}
  %n = gpt.fused_layernorm(%x : tensor<2x8xf32>) norm %g, %b : tensor<8xf32>, tensor<8xf32> -> tensor<2x8xf32> {
  ^bb0(%a: f32):
    gpt.yield %a, %a : f32, f32
  }
  return %n : tensor<2x8xf32>
}

// -----

func.func @bad_gamma(%x: tensor<2x8xf32>, %g: tensor<4xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{'gpt.fused_layernorm' op gamma and beta must be [8], found 4}}
  %n = gpt.fused_layernorm(%x : tensor<2x8xf32>) norm %g, %b : tensor<4xf32>, tensor<8xf32> -> tensor<2x8xf32> {
  ^bb0(%a: f32):
    gpt.yield %a : f32
  }
  return %n : tensor<2x8xf32>
}

// -----

// The backward's residual gradient: layernorm_grad's dx read only by the
// add into the gradient flowing past the block. One gpt.fused_layernorm_grad
// at the add's place; dx is the body's first argument and never written.
// CHECK-LABEL: func.func @grad_epilogue
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x4x8xf32>, %[[G:[^:]+]]: tensor<8xf32>, %[[DY:[^:]+]]: tensor<2x4x8xf32>, %[[R:[^:]+]]: tensor<2x4x8xf32>)
// CHECK: %[[DG:[^,]+]], %[[DB:[^,]+]], %[[V:.+]] = gpt.fused_layernorm_grad %[[X]], %[[G]], %[[DY]] : tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32> epilogue(%[[R]] : tensor<2x4x8xf32>) -> tensor<8xf32>, tensor<8xf32>, tensor<2x4x8xf32> {
// CHECK-NEXT: ^bb0(%[[D:.+]]: f32, %[[A:.+]]: f32):
// CHECK-NEXT: %[[S:.+]] = arith.addf %[[A]], %[[D]] : f32
// CHECK-NEXT: gpt.yield %[[S]] : f32
// CHECK-NOT: gpt.layernorm_grad
// CHECK: return %[[V]], %[[DG]], %[[DB]]
func.func @grad_epilogue(%x: tensor<2x4x8xf32>, %gamma: tensor<8xf32>, %dy: tensor<2x4x8xf32>, %r: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %dx, %dg, %db = gpt.layernorm_grad %x, %gamma, %dy : tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>
  %s = gpt.add %r, %dx : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  return %s, %dg, %db : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
}

// -----

// Declined: dgamma is read before the add, where the fused op would go.
// A dx that something else reads too (ln_f's, read by the GEMMs) is no
// candidate and stays quiet.
// CHECK-LABEL: func.func @grad_declined
// CHECK: gpt.layernorm_grad
// CHECK: gpt.layernorm_grad
// CHECK-NOT: gpt.fused_layernorm_grad
func.func @grad_declined(%x: tensor<2x4x8xf32>, %gamma: tensor<8xf32>, %dy: tensor<2x4x8xf32>, %r: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  // expected-remark @+1 {{did not fuse its dx into the 'gpt.fused_elementwise' that reads it as an epilogue: dgamma or dbeta is used by 'gpt.reduce_sum' before that op runs}}
  %dx, %dg, %db = gpt.layernorm_grad %x, %gamma, %dy : tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>
  %n = gpt.reduce_sum %dg : tensor<8xf32> -> tensor<f32>
  %e = gpt.mul %dx, %n : tensor<2x4x8xf32>, tensor<f32> -> tensor<2x4x8xf32>
  %s = gpt.add %r, %e : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  %dx2, %dg2, %db2 = gpt.layernorm_grad %x, %gamma, %s : tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>
  %w = gpt.constant dense<0.5> : tensor<8x8xf32>
  %m = gpt.matmul %dx2, %w : tensor<2x4x8xf32>, tensor<8x8xf32> -> tensor<2x4x8xf32>
  %t = gpt.add %dx2, %r : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x8xf32>
  return %s, %db, %m, %t : tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
}
