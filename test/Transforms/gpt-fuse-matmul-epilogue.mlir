// RUN: gptc-opt %s -split-input-file -gpt-fuse-matmul-epilogue -verify-diagnostics | FileCheck %s

// fp32: matmul then a [N] bias add is the BIAS epilogue; the add is gone.
// CHECK-LABEL: func.func @bias
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x8x8xf32>, %[[W:[^:]+]]: tensor<8x16xf32>, %[[B:[^:]+]]: tensor<16xf32>)
// CHECK-NEXT: %[[Y:.+]] = gpt.matmul_epilogue %[[X]], %[[W]], %[[B]] : tensor<2x8x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<2x8x16xf32>
// CHECK-NEXT: return %[[Y]]
func.func @bias(%x: tensor<2x8x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<2x8x16xf32> {
  %mm = gpt.matmul %x, %w : tensor<2x8x8xf32>, tensor<8x16xf32> -> tensor<2x8x16xf32>
  %h = gpt.add %mm, %b : tensor<2x8x16xf32>, tensor<16xf32> -> tensor<2x8x16xf32>
  return %h : tensor<2x8x16xf32>
}

// -----

// bf16 autocast: the widening cast after the GEMM is seen through; the
// epilogue rounds once, after the bias, to the operands' bf16 (as
// autocast's linear writes it), reading a bf16 copy of the bias (cuBLASLt
// keeps the bias in D's type), and its float32 reader (the residual add
// after an output projection) gets a widening cast. Bias + product in
// either order; transpose_b carries over.
// CHECK-LABEL: func.func @bf16_bias_transposed
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x8x8xf32>, %[[W:[^:]+]]: tensor<16x8xf32>, %[[B:[^:]+]]: tensor<16xf32>, %[[R:[^:]+]]: tensor<2x8x16xf32>)
// CHECK: %[[BL:.+]] = gpt.cast %[[B]] : tensor<16xf32> -> tensor<16xbf16>
// CHECK: %[[XL:.+]] = gpt.cast %[[X]]
// CHECK: %[[WL:.+]] = gpt.cast %[[W]]
// CHECK-NEXT: %[[Y:.+]] = gpt.matmul_epilogue %[[XL]], %[[WL]], %[[BL]] {transpose_b} : tensor<2x8x8xbf16>, tensor<16x8xbf16>, tensor<16xbf16> -> tensor<2x8x16xbf16>
// CHECK-NEXT: %[[YW:.+]] = gpt.cast %[[Y]] : tensor<2x8x16xbf16> -> tensor<2x8x16xf32>
// CHECK-NEXT: %[[S:.+]] = gpt.add %[[R]], %[[YW]]
// CHECK-NEXT: return %[[S]]
func.func @bf16_bias_transposed(%x: tensor<2x8x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf32>, %r: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  %xl = gpt.cast %x : tensor<2x8x8xf32> -> tensor<2x8x8xbf16>
  %wl = gpt.cast %w : tensor<16x8xf32> -> tensor<16x8xbf16>
  %mm = gpt.matmul %xl, %wl {transpose_b} : tensor<2x8x8xbf16>, tensor<16x8xbf16> -> tensor<2x8x16xbf16>
  %y = gpt.cast %mm : tensor<2x8x16xbf16> -> tensor<2x8x16xf32>
  %h = gpt.add %b, %y : tensor<16xf32>, tensor<2x8x16xf32> -> tensor<2x8x16xf32>
  %s = gpt.add %r, %h : tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<2x8x16xf32>
  return %s : tensor<2x8x16xf32>
}

// -----

// Bias and tanh GELU whose pre-activation the backward's gelu_grad reads:
// GELU_AUX_BIAS, the aux result serves the gelu_grad. Both are bf16, and
// widened for their float32 readers.
// CHECK-LABEL: func.func @gelu_aux
// CHECK-SAME: (%[[X:[^:]+]]: tensor<2x8x8xf32>, %[[W:[^:]+]]: tensor<8x16xf32>, %[[B:[^:]+]]: tensor<16xf32>, %[[DY:[^:]+]]: tensor<2x8x16xf32>)
// CHECK: %[[H:[^ ,]+]], %[[PRE:[^ ]+]] = gpt.matmul_epilogue %{{.+}}, %{{.+}}, %{{.+}} {gelu} : tensor<2x8x8xbf16>, tensor<8x16xbf16>, tensor<16xbf16> -> tensor<2x8x16xbf16>, tensor<2x8x16xbf16>
// CHECK-NOT: gpt.gelu %
// CHECK-DAG: %[[PW:.+]] = gpt.cast %[[PRE]] : tensor<2x8x16xbf16> -> tensor<2x8x16xf32>
// CHECK-DAG: %[[HW:.+]] = gpt.cast %[[H]] : tensor<2x8x16xbf16> -> tensor<2x8x16xf32>
// CHECK: %[[DX:.+]] = gpt.gelu_grad %[[PW]], %[[DY]]
// CHECK: return %[[HW]], %[[DX]]
func.func @gelu_aux(%x: tensor<2x8x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>, %dy: tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>) {
  %xl = gpt.cast %x : tensor<2x8x8xf32> -> tensor<2x8x8xbf16>
  %wl = gpt.cast %w : tensor<8x16xf32> -> tensor<8x16xbf16>
  %mm = gpt.matmul %xl, %wl : tensor<2x8x8xbf16>, tensor<8x16xbf16> -> tensor<2x8x16xbf16>
  %y = gpt.cast %mm : tensor<2x8x16xbf16> -> tensor<2x8x16xf32>
  %h = gpt.add %y, %b : tensor<2x8x16xf32>, tensor<16xf32> -> tensor<2x8x16xf32>
  %g = gpt.gelu %h : tensor<2x8x16xf32>
  %dx = gpt.gelu_grad %h, %dy : tensor<2x8x16xf32>
  return %g, %dx : tensor<2x8x16xf32>, tensor<2x8x16xf32>
}

// -----

// gpt-recompute's copy of the GELU for the backward (fused<"recompute">),
// whose use comes first in the use list: the forward GELU, the first in the
// block, is the one fused; the copy reads the aux, widened, quietly.
// CHECK-LABEL: func.func @gelu_recomputed
// CHECK: %[[H:[^ ,]+]], %[[PRE:[^ ]+]] = gpt.matmul_epilogue %{{.+}}, %{{.+}}, %{{.+}} {gelu}
// CHECK: %[[PW:.+]] = gpt.cast %[[PRE]] : tensor<2x8x16xbf16> -> tensor<2x8x16xf32>
// CHECK: %[[HW:.+]] = gpt.cast %[[H]] : tensor<2x8x16xbf16> -> tensor<2x8x16xf32>
// CHECK: %[[DX:.+]] = gpt.gelu_grad %[[PW]]
// CHECK: %[[G2:.+]] = gpt.gelu %[[PW]]
// CHECK: return %[[HW]], %[[DX]], %[[G2]]
func.func @gelu_recomputed(%x: tensor<2x8x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>, %dy: tensor<2x8x16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) {
  %xl = gpt.cast %x : tensor<2x8x8xf32> -> tensor<2x8x8xbf16>
  %wl = gpt.cast %w : tensor<8x16xf32> -> tensor<8x16xbf16>
  %mm = gpt.matmul %xl, %wl : tensor<2x8x8xbf16>, tensor<8x16xbf16> -> tensor<2x8x16xbf16>
  %y = gpt.cast %mm : tensor<2x8x16xbf16> -> tensor<2x8x16xf32>
  %h = gpt.add %y, %b : tensor<2x8x16xf32>, tensor<16xf32> -> tensor<2x8x16xf32>
  %g = gpt.gelu %h : tensor<2x8x16xf32>
  %dx = gpt.gelu_grad %h, %dy : tensor<2x8x16xf32> loc(fused<"vjp">["model.cpp":2:1])
  %g2 = gpt.gelu %h : tensor<2x8x16xf32> loc(fused<"recompute">["model.cpp":2:1])
  return %g, %dx, %g2 : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
}

// -----

// Declined: a second GELU of the same pre-activation that is not such a
// copy. The first is fused, the second reads the aux, with a remark.
// CHECK-LABEL: func.func @gelu_twice
// CHECK: %[[H:[^ ,]+]], %[[PRE:[^ ]+]] = gpt.matmul_epilogue %{{.+}}, %{{.+}}, %{{.+}} {gelu}
// CHECK: gpt.gelu %[[PRE]]
func.func @gelu_twice(%x: tensor<16x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> (tensor<16x16xf32>, tensor<16x16xf32>) {
  %mm = gpt.matmul %x, %w : tensor<16x8xf32>, tensor<8x16xf32> -> tensor<16x16xf32>
  %h = gpt.add %mm, %b : tensor<16x16xf32>, tensor<16xf32> -> tensor<16x16xf32>
  %g = gpt.gelu %h : tensor<16x16xf32>
  // expected-remark @+1 {{a second GELU of the same pre-activation stays unfused}}
  %g2 = gpt.gelu %h : tensor<16x16xf32>
  return %g, %g2 : tensor<16x16xf32>, tensor<16x16xf32>
}

// -----

// GELU with no other reader of the pre-activation: GELU_BIAS, one result.
// CHECK-LABEL: func.func @gelu_no_aux
// CHECK-NEXT: %[[G:.+]] = gpt.matmul_epilogue %{{.+}}, %{{.+}}, %{{.+}} {gelu} : tensor<16x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<16x16xf32>
// CHECK-NEXT: return %[[G]]
func.func @gelu_no_aux(%x: tensor<16x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<16x16xf32> {
  %mm = gpt.matmul %x, %w : tensor<16x8xf32>, tensor<8x16xf32> -> tensor<16x16xf32>
  %h = gpt.add %mm, %b : tensor<16x16xf32>, tensor<16xf32> -> tensor<16x16xf32>
  %g = gpt.gelu %h {approximate = "tanh"} : tensor<16x16xf32>
  return %g : tensor<16x16xf32>
}

// -----

// The erf GELU is not cuBLASLt's: only the bias is fused.
// CHECK-LABEL: func.func @erf_gelu
// CHECK-NEXT: %[[Y:.+]] = gpt.matmul_epilogue
// CHECK-NOT: gelu}
// CHECK-NEXT: %[[G:.+]] = gpt.gelu %[[Y]] {approximate = "none"}
// CHECK-NEXT: return %[[G]]
func.func @erf_gelu(%x: tensor<16x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<16x16xf32> {
  %mm = gpt.matmul %x, %w : tensor<16x8xf32>, tensor<8x16xf32> -> tensor<16x16xf32>
  %h = gpt.add %mm, %b : tensor<16x16xf32>, tensor<16xf32> -> tensor<16x16xf32>
  // expected-remark @+1 {{did not fuse into the matmul epilogue: the GELU is the erf form (approximate = "none"); the epilogue's, as cuBLASLt's, is the tanh form; only the bias is fused}}
  %g = gpt.gelu %h {approximate = "none"} : tensor<16x16xf32>
  return %g : tensor<16x16xf32>
}

// -----

// A full-shape addend (a residual) is no bias at all: nothing to explain.
// CHECK-LABEL: func.func @not_a_bias
// CHECK: gpt.matmul %
// CHECK-NOT: gpt.matmul_epilogue
func.func @not_a_bias(%x: tensor<16x8xf32>, %w: tensor<8x16xf32>, %r: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %mm = gpt.matmul %x, %w : tensor<16x8xf32>, tensor<8x16xf32> -> tensor<16x16xf32>
  %h = gpt.add %mm, %r : tensor<16x16xf32>, tensor<16x16xf32> -> tensor<16x16xf32>
  return %h : tensor<16x16xf32>
}

// -----

// A bias along the rows ([M, 1]) is not the epilogue's either.
// CHECK-LABEL: func.func @row_bias
// CHECK-NOT: gpt.matmul_epilogue
func.func @row_bias(%x: tensor<16x8xf32>, %w: tensor<8x32xf32>, %b: tensor<16x1xf32>) -> tensor<16x32xf32> {
  %mm = gpt.matmul %x, %w : tensor<16x8xf32>, tensor<8x32xf32> -> tensor<16x32xf32>
  // expected-remark @+1 {{did not fuse into the matmul epilogue: the addend 'tensor<16x1xf32>' is not a float32 [32] bias broadcast along the last dimension}}
  %h = gpt.add %mm, %b : tensor<16x32xf32>, tensor<16x1xf32> -> tensor<16x32xf32>
  return %h : tensor<16x32xf32>
}

// -----

// The product without its bias is also read: the epilogue cannot serve it.
// CHECK-LABEL: func.func @product_used_twice
// CHECK-NOT: gpt.matmul_epilogue
func.func @product_used_twice(%x: tensor<16x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> (tensor<16x16xf32>, tensor<16x16xf32>) {
  %xl = gpt.cast %x : tensor<16x8xf32> -> tensor<16x8xbf16>
  %wl = gpt.cast %w : tensor<8x16xf32> -> tensor<8x16xbf16>
  %mm = gpt.matmul %xl, %wl : tensor<16x8xbf16>, tensor<8x16xbf16> -> tensor<16x16xbf16>
  %y = gpt.cast %mm : tensor<16x16xbf16> -> tensor<16x16xf32>
  // expected-remark @+1 {{did not fuse into the matmul epilogue: the product before its bias add is also used elsewhere, and the epilogue writes only the biased value}}
  %h = gpt.add %y, %b : tensor<16x16xf32>, tensor<16xf32> -> tensor<16x16xf32>
  return %h, %y : tensor<16x16xf32>, tensor<16x16xf32>
}

// -----

// A batched right operand is not a projection by a weight.
// CHECK-LABEL: func.func @batched_weight
// CHECK-NOT: gpt.matmul_epilogue
func.func @batched_weight(%x: tensor<2x16x8xf32>, %w: tensor<2x8x16xf32>, %b: tensor<16xf32>) -> tensor<2x16x16xf32> {
  %mm = gpt.matmul %x, %w : tensor<2x16x8xf32>, tensor<2x8x16xf32> -> tensor<2x16x16xf32>
  // expected-remark @+1 {{did not fuse into the matmul epilogue: the right operand is batched (rank 3); the epilogue's bias belongs to a 2-D weight}}
  %h = gpt.add %mm, %b : tensor<2x16x16xf32>, tensor<16xf32> -> tensor<2x16x16xf32>
  return %h : tensor<2x16x16xf32>
}

// -----

// A batched left operand read transposed is one GEMM per batch.
// CHECK-LABEL: func.func @batched_transposed
// CHECK-NOT: gpt.matmul_epilogue
func.func @batched_transposed(%x: tensor<2x8x16xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<2x16x16xf32> {
  %mm = gpt.matmul %x, %w {transpose_a} : tensor<2x8x16xf32>, tensor<8x16xf32> -> tensor<2x16x16xf32>
  // expected-remark @+1 {{did not fuse into the matmul epilogue: the left operand is batched and transposed, one GEMM per batch (the epilogue belongs to one GEMM)}}
  %h = gpt.add %mm, %b : tensor<2x16x16xf32>, tensor<16xf32> -> tensor<2x16x16xf32>
  return %h : tensor<2x16x16xf32>
}

// -----

// gpt-pad-dims padded N and slices the product back before the bias: the
// epilogue would need a padded bias. Declined, with a word.
// CHECK-LABEL: func.func @padded_n
// CHECK-NOT: gpt.matmul_epilogue
func.func @padded_n(%x: tensor<16x64xbf16>, %w: tensor<64x64xbf16>, %b: tensor<48xf32>) -> tensor<16x48xf32> {
  %mm = gpt.matmul %x, %w : tensor<16x64xbf16>, tensor<64x64xbf16> -> tensor<16x64xbf16>
  %y = gpt.cast %mm : tensor<16x64xbf16> -> tensor<16x64xf32>
  %s = gpt.slice %y : tensor<16x64xf32> -> tensor<16x48xf32>
  // expected-remark @+1 {{did not fuse into the matmul epilogue: the product is sliced back from dimensions gpt-pad-dims padded before its bias add (the epilogue would need the bias padded too)}}
  %h = gpt.add %s, %b : tensor<16x48xf32>, tensor<48xf32> -> tensor<16x48xf32>
  return %h : tensor<16x48xf32>
}

// -----

// The backward of the MLP's GELU in bf16: the GEMM dh = dy W^T, its widening
// cast, gelu_grad and the bias gradient's sum become one
// gpt.matmul_gelu_grad (DGELU_BGRAD); the bf16 copy for the next GEMMs
// stays.
// CHECK-LABEL: func.func @gelu_grad_bias
// CHECK-SAME: (%[[DY:[^:]+]]: tensor<2x8x16xbf16>, %[[W:[^:]+]]: tensor<32x16xbf16>, %[[PRE:[^:]+]]: tensor<2x8x32xf32>)
// CHECK-NEXT: %[[DP:[^ ,]+]], %[[DB:[^ ]+]] = gpt.matmul_gelu_grad %[[DY]], %[[W]], %[[PRE]] {transpose_b} : tensor<2x8x16xbf16>, tensor<32x16xbf16>, tensor<2x8x32xf32> -> tensor<2x8x32xf32>, tensor<32xf32>
// CHECK-NEXT: %[[L:.+]] = gpt.cast %[[DP]]
// CHECK-NEXT: return %[[L]], %[[DB]]
func.func @gelu_grad_bias(%dy: tensor<2x8x16xbf16>, %w: tensor<32x16xbf16>, %pre: tensor<2x8x32xf32>) -> (tensor<2x8x32xbf16>, tensor<32xf32>) {
  %mm = gpt.matmul %dy, %w {transpose_b} : tensor<2x8x16xbf16>, tensor<32x16xbf16> -> tensor<2x8x32xbf16>
  %dh = gpt.cast %mm : tensor<2x8x32xbf16> -> tensor<2x8x32xf32>
  %dp = gpt.gelu_grad %pre, %dh : tensor<2x8x32xf32>
  %db = gpt.reduce_sum %dp : tensor<2x8x32xf32> -> tensor<32xf32>
  %l = gpt.cast %dp : tensor<2x8x32xf32> -> tensor<2x8x32xbf16>
  return %l, %db : tensor<2x8x32xbf16>, tensor<32xf32>
}

// -----

// As above, with c_fc's weight-gradient GEMM reading the derivative's bf16
// copy: the bias gradient goes to that GEMM (BGRADA, summing the bf16
// copy it reads) and the derivative's GEMM is DGELU alone, writing the
// bf16 copy both GEMMs read.
// CHECK-LABEL: func.func @gelu_grad_bias_to_weight_grad
// CHECK-SAME: (%[[DY:[^:]+]]: tensor<2x8x16xbf16>, %[[W:[^:]+]]: tensor<32x16xbf16>, %[[PRE:[^:]+]]: tensor<2x8x32xbf16>, %[[X:[^:]+]]: tensor<16x8xbf16>)
// CHECK-NEXT: %[[DP:.+]] = gpt.matmul_gelu_grad %[[DY]], %[[W]], %[[PRE]] {transpose_b} : tensor<2x8x16xbf16>, tensor<32x16xbf16>, tensor<2x8x32xbf16> -> tensor<2x8x32xbf16>{{$}}
// CHECK-NEXT: %[[DP2:.+]] = gpt.reshape %[[DP]] : tensor<2x8x32xbf16> -> tensor<16x32xbf16>
// CHECK-NEXT: %[[DW:[^ ,]+]], %[[DB:[^ ]+]] = gpt.matmul_bias_grad %[[X]], %[[DP2]] {transpose_a} : tensor<16x8xbf16>, tensor<16x32xbf16> -> tensor<8x32xf32>, tensor<32xf32>
// CHECK-NEXT: return %[[DP]], %[[DW]], %[[DB]]
func.func @gelu_grad_bias_to_weight_grad(%dy: tensor<2x8x16xbf16>, %w: tensor<32x16xbf16>, %prel: tensor<2x8x32xbf16>, %x: tensor<16x8xbf16>) -> (tensor<2x8x32xbf16>, tensor<8x32xf32>, tensor<32xf32>) {
  %pre = gpt.cast %prel : tensor<2x8x32xbf16> -> tensor<2x8x32xf32>
  %mm = gpt.matmul %dy, %w {transpose_b} : tensor<2x8x16xbf16>, tensor<32x16xbf16> -> tensor<2x8x32xbf16>
  %dh = gpt.cast %mm : tensor<2x8x32xbf16> -> tensor<2x8x32xf32>
  %dp = gpt.gelu_grad %pre, %dh : tensor<2x8x32xf32>
  %db = gpt.reduce_sum %dp : tensor<2x8x32xf32> -> tensor<32xf32>
  %l = gpt.cast %dp : tensor<2x8x32xf32> -> tensor<2x8x32xbf16>
  %l2 = gpt.reshape %l : tensor<2x8x32xbf16> -> tensor<16x32xbf16>
  %dwl = gpt.matmul %x, %l2 {transpose_a} : tensor<16x8xbf16>, tensor<16x32xbf16> -> tensor<8x32xbf16>
  %dw = gpt.cast %dwl : tensor<8x32xbf16> -> tensor<8x32xf32>
  return %l, %dw, %db : tensor<2x8x32xbf16>, tensor<8x32xf32>, tensor<32xf32>
}

// -----

// The same, but the bias gradient is read before the weight-gradient GEMM
// (which would compute it): the derivative's GEMM sums it instead
// (DGELU_BGRAD), and the weight gradient stays a plain GEMM.
// CHECK-LABEL: func.func @gelu_grad_bias_read_early
// CHECK: %[[DP:[^ ,]+]], %[[DB:[^ ]+]] = gpt.matmul_gelu_grad {{.+}} -> tensor<2x8x32xbf16>, tensor<32xbf16>
// CHECK: gpt.cast %[[DB]] : tensor<32xbf16> -> tensor<32xf32>
// CHECK: gpt.matmul %{{.+}}, %{{.+}} {transpose_a} : tensor<16x8xbf16>, tensor<16x32xbf16> -> tensor<8x32xf32>
// CHECK-NOT: gpt.matmul_bias_grad
func.func @gelu_grad_bias_read_early(%dy: tensor<2x8x16xbf16>, %w: tensor<32x16xbf16>, %prel: tensor<2x8x32xbf16>, %x: tensor<16x8xbf16>) -> (tensor<2x8x32xbf16>, tensor<8x32xf32>, tensor<32xf32>) {
  %pre = gpt.cast %prel : tensor<2x8x32xbf16> -> tensor<2x8x32xf32>
  %mm = gpt.matmul %dy, %w {transpose_b} : tensor<2x8x16xbf16>, tensor<32x16xbf16> -> tensor<2x8x32xbf16>
  %dh = gpt.cast %mm : tensor<2x8x32xbf16> -> tensor<2x8x32xf32>
  %dp = gpt.gelu_grad %pre, %dh : tensor<2x8x32xf32>
  // expected-remark @+1 {{did not fuse into the matmul epilogue: the bias gradient is read before the weight-gradient GEMM that would compute it}}
  %db = gpt.reduce_sum %dp : tensor<2x8x32xf32> -> tensor<32xf32>
  %db2 = gpt.mul %db, %db : tensor<32xf32>, tensor<32xf32> -> tensor<32xf32>
  %l = gpt.cast %dp : tensor<2x8x32xf32> -> tensor<2x8x32xbf16>
  %l2 = gpt.reshape %l : tensor<2x8x32xbf16> -> tensor<16x32xbf16>
  %dwl = gpt.matmul %x, %l2 {transpose_a} : tensor<16x8xbf16>, tensor<16x32xbf16> -> tensor<8x32xbf16>
  %dw = gpt.cast %dwl : tensor<8x32xbf16> -> tensor<8x32xf32>
  return %l, %dw, %db2 : tensor<2x8x32xbf16>, tensor<8x32xf32>, tensor<32xf32>
}

// -----

// fp32 without a bias gradient: DGELU alone, one result.
// CHECK-LABEL: func.func @gelu_grad_only
// CHECK-NEXT: %[[DP:.+]] = gpt.matmul_gelu_grad %{{.+}}, %{{.+}}, %{{.+}} : tensor<16x16xf32>, tensor<16x32xf32>, tensor<16x32xf32> -> tensor<16x32xf32>{{$}}
// CHECK-NEXT: return %[[DP]]
func.func @gelu_grad_only(%dy: tensor<16x16xf32>, %w: tensor<16x32xf32>, %pre: tensor<16x32xf32>) -> tensor<16x32xf32> {
  %mm = gpt.matmul %dy, %w : tensor<16x16xf32>, tensor<16x32xf32> -> tensor<16x32xf32>
  %dp = gpt.gelu_grad %pre, %mm : tensor<16x32xf32>
  return %dp : tensor<16x32xf32>
}

// -----

// The GEMM's product is read by something else too: the epilogue writes
// only the product times the derivative.
// CHECK-LABEL: func.func @gelu_grad_product_used_twice
// CHECK-NOT: gpt.matmul_gelu_grad
func.func @gelu_grad_product_used_twice(%dy: tensor<16x16xf32>, %w: tensor<16x32xf32>, %pre: tensor<16x32xf32>) -> (tensor<16x32xf32>, tensor<16x32xf32>) {
  %mm = gpt.matmul %dy, %w : tensor<16x16xf32>, tensor<16x32xf32> -> tensor<16x32xf32>
  // expected-remark @+1 {{did not fuse into the matmul epilogue: the product is also used elsewhere, and the epilogue writes only its product with GELU's derivative}}
  %dp = gpt.gelu_grad %pre, %mm : tensor<16x32xf32>
  return %dp, %mm : tensor<16x32xf32>, tensor<16x32xf32>
}

// -----

// A batched right operand: one GEMM per batch, no single epilogue.
// CHECK-LABEL: func.func @gelu_grad_batched
// CHECK-NOT: gpt.matmul_gelu_grad
func.func @gelu_grad_batched(%dy: tensor<2x16x16xf32>, %w: tensor<2x16x32xf32>, %pre: tensor<2x16x32xf32>) -> tensor<2x16x32xf32> {
  %mm = gpt.matmul %dy, %w : tensor<2x16x16xf32>, tensor<2x16x32xf32> -> tensor<2x16x32xf32>
  // expected-remark @+1 {{did not fuse into the matmul epilogue: the product is several GEMMs (a batched right operand, or a batched transposed left one)}}
  %dp = gpt.gelu_grad %pre, %mm : tensor<2x16x32xf32>
  return %dp : tensor<2x16x32xf32>
}

// -----

// The pre-activation only exists after the GEMM: the fused op, which stands
// where the GEMM is, could not read it.
// CHECK-LABEL: func.func @gelu_grad_late_pre
// CHECK-NOT: gpt.matmul_gelu_grad
func.func @gelu_grad_late_pre(%dy: tensor<16x16xf32>, %w: tensor<16x32xf32>, %z: tensor<16x32xf32>) -> tensor<16x32xf32> {
  %mm = gpt.matmul %dy, %w : tensor<16x16xf32>, tensor<16x32xf32> -> tensor<16x32xf32>
  %pre = gpt.neg %z : tensor<16x32xf32>
  // expected-remark @+1 {{did not fuse into the matmul epilogue: the pre-activation is computed after the GEMM that feeds the derivative}}
  %dp = gpt.gelu_grad %pre, %mm : tensor<16x32xf32>
  return %dp : tensor<16x32xf32>
}

// -----

// A projection's weight and bias gradients in bf16: the bias gradient's
// sum moves into the weight-gradient GEMM that reads dy's bf16 copy
// (BGRADA), and the weight gradient's widening cast too: cuBLASLt writes
// the bias gradient in D's type, so D is float32. The input-gradient GEMM
// is untouched.
// CHECK-LABEL: func.func @bias_grad_bf16
// CHECK-SAME: (%[[G:[^:]+]]: tensor<2x8x32xf32>, %[[X:[^:]+]]: tensor<16x8xbf16>, %[[W:[^:]+]]: tensor<8x32xbf16>)
// CHECK-NEXT: %[[GL:.+]] = gpt.cast %[[G]]
// CHECK-NEXT: %[[DX:.+]] = gpt.matmul %[[GL]], %[[W]] {transpose_b}
// CHECK-NEXT: %[[G2:.+]] = gpt.reshape %[[GL]]
// CHECK-NEXT: %[[DW:[^ ,]+]], %[[DB:[^ ]+]] = gpt.matmul_bias_grad %[[X]], %[[G2]] {transpose_a} : tensor<16x8xbf16>, tensor<16x32xbf16> -> tensor<8x32xf32>, tensor<32xf32>
// CHECK-NEXT: return %[[DX]], %[[DW]], %[[DB]]
func.func @bias_grad_bf16(%g: tensor<2x8x32xf32>, %x: tensor<16x8xbf16>, %w: tensor<8x32xbf16>) -> (tensor<2x8x8xbf16>, tensor<8x32xf32>, tensor<32xf32>) {
  %db = gpt.reduce_sum %g : tensor<2x8x32xf32> -> tensor<32xf32>
  %gl = gpt.cast %g : tensor<2x8x32xf32> -> tensor<2x8x32xbf16>
  %dx = gpt.matmul %gl, %w {transpose_b} : tensor<2x8x32xbf16>, tensor<8x32xbf16> -> tensor<2x8x8xbf16>
  %g2 = gpt.reshape %gl : tensor<2x8x32xbf16> -> tensor<16x32xbf16>
  %dw = gpt.matmul %x, %g2 {transpose_a} : tensor<16x8xbf16>, tensor<16x32xbf16> -> tensor<8x32xbf16>
  %dwf = gpt.cast %dw : tensor<8x32xbf16> -> tensor<8x32xf32>
  return %dx, %dwf, %db : tensor<2x8x8xbf16>, tensor<8x32xf32>, tensor<32xf32>
}

// -----

// A bf16 weight gradient that is not widened: cuBLASLt would write the
// bias gradient in bf16 too, so the float32 sum stays a reduction.
// CHECK-LABEL: func.func @bias_grad_bf16_kept
// CHECK-NOT: gpt.matmul_bias_grad
func.func @bias_grad_bf16_kept(%g: tensor<16x32xf32>, %x: tensor<16x8xbf16>) -> (tensor<8x32xbf16>, tensor<32xf32>) {
  // expected-remark @+1 {{did not fuse into the matmul epilogue: the weight gradient is 'bf16' and cuBLASLt writes the bias gradient in its type, not 'f32'}}
  %db = gpt.reduce_sum %g : tensor<16x32xf32> -> tensor<32xf32>
  %gl = gpt.cast %g : tensor<16x32xf32> -> tensor<16x32xbf16>
  %dw = gpt.matmul %x, %gl {transpose_a} : tensor<16x8xbf16>, tensor<16x32xbf16> -> tensor<8x32xbf16>
  return %dw, %db : tensor<8x32xbf16>, tensor<32xf32>
}

// -----

// bf16 autocast, the MLP's up-projection both ways. Its GELU output is
// only narrowed again for the next GEMM, so the epilogue writes bf16: D,
// the aux pre-activation (rounded, as autocast saves GELU's bf16 input)
// and a bf16 copy of the bias (cuBLASLt reads the bias in D's type). The
// backward reads that aux, so its D and bias gradient are bf16 too; the
// bias gradient is widened for the float32 master gradient.
// CHECK-LABEL: func.func @narrow_mlp
// CHECK-SAME: (%[[X:[^:]+]]: tensor<16x8xbf16>, %[[W:[^:]+]]: tensor<8x32xbf16>, %[[B:[^:]+]]: tensor<32xf32>, %[[DY:[^:]+]]: tensor<16x16xbf16>, %[[W2:[^:]+]]: tensor<32x16xbf16>)
// CHECK-NEXT: %[[BL:.+]] = gpt.cast %[[B]] : tensor<32xf32> -> tensor<32xbf16>
// CHECK-NEXT: %[[G:[^ ,]+]], %[[PRE:[^ ]+]] = gpt.matmul_epilogue %[[X]], %[[W]], %[[BL]] {gelu} : tensor<16x8xbf16>, tensor<8x32xbf16>, tensor<32xbf16> -> tensor<16x32xbf16>, tensor<16x32xbf16>
// CHECK-NEXT: %[[DP:[^ ,]+]], %[[DBL:[^ ]+]] = gpt.matmul_gelu_grad %[[DY]], %[[W2]], %[[PRE]] {transpose_b} : tensor<16x16xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16> -> tensor<16x32xbf16>, tensor<32xbf16>
// CHECK-NEXT: %[[DB:.+]] = gpt.cast %[[DBL]] : tensor<32xbf16> -> tensor<32xf32>
// CHECK-NEXT: return %[[G]], %[[DP]], %[[DB]]
func.func @narrow_mlp(%x: tensor<16x8xbf16>, %w: tensor<8x32xbf16>, %b: tensor<32xf32>, %dy: tensor<16x16xbf16>, %w2: tensor<32x16xbf16>) -> (tensor<16x32xbf16>, tensor<16x32xbf16>, tensor<32xf32>) {
  %mm = gpt.matmul %x, %w : tensor<16x8xbf16>, tensor<8x32xbf16> -> tensor<16x32xbf16>
  %y = gpt.cast %mm : tensor<16x32xbf16> -> tensor<16x32xf32>
  %h = gpt.add %y, %b : tensor<16x32xf32>, tensor<32xf32> -> tensor<16x32xf32>
  %g = gpt.gelu %h : tensor<16x32xf32>
  %gl = gpt.cast %g : tensor<16x32xf32> -> tensor<16x32xbf16>
  %mm2 = gpt.matmul %dy, %w2 {transpose_b} : tensor<16x16xbf16>, tensor<32x16xbf16> -> tensor<16x32xbf16>
  %dh = gpt.cast %mm2 : tensor<16x32xbf16> -> tensor<16x32xf32>
  %dp = gpt.gelu_grad %h, %dh : tensor<16x32xf32>
  %db = gpt.reduce_sum %dp : tensor<16x32xf32> -> tensor<32xf32>
  %dpl = gpt.cast %dp : tensor<16x32xf32> -> tensor<16x32xbf16>
  return %gl, %dpl, %db : tensor<16x32xbf16>, tensor<16x32xbf16>, tensor<32xf32>
}

// -----

// As above, but the derivative is also read as float32: cuBLASLt would
// write it in the aux's bf16, so the backward stays unfused (the forward
// still writes bf16; gelu_grad reads its aux widened).
// CHECK-LABEL: func.func @narrow_mlp_f32_derivative
// CHECK: gpt.matmul_epilogue {{.+}} -> tensor<16x32xbf16>, tensor<16x32xbf16>
// CHECK: %[[PREF:.+]] = gpt.cast %{{.+}} : tensor<16x32xbf16> -> tensor<16x32xf32>
// CHECK: gpt.gelu_grad %[[PREF]]
// CHECK-NOT: gpt.matmul_gelu_grad
func.func @narrow_mlp_f32_derivative(%x: tensor<16x8xbf16>, %w: tensor<8x32xbf16>, %b: tensor<32xf32>, %dy: tensor<16x16xbf16>, %w2: tensor<32x16xbf16>) -> (tensor<16x32xbf16>, tensor<16x32xf32>) {
  %mm = gpt.matmul %x, %w : tensor<16x8xbf16>, tensor<8x32xbf16> -> tensor<16x32xbf16>
  %y = gpt.cast %mm : tensor<16x32xbf16> -> tensor<16x32xf32>
  %h = gpt.add %y, %b : tensor<16x32xf32>, tensor<32xf32> -> tensor<16x32xf32>
  %g = gpt.gelu %h : tensor<16x32xf32>
  %gl = gpt.cast %g : tensor<16x32xf32> -> tensor<16x32xbf16>
  %mm2 = gpt.matmul %dy, %w2 {transpose_b} : tensor<16x16xbf16>, tensor<32x16xbf16> -> tensor<16x32xbf16>
  %dh = gpt.cast %mm2 : tensor<16x32xbf16> -> tensor<16x32xf32>
  // expected-remark @+1 {{did not fuse into the matmul epilogue: the derivative is also read as float32, and cuBLASLt writes it in the 'bf16' of the saved pre-activation}}
  %dp = gpt.gelu_grad %h, %dh : tensor<16x32xf32>
  return %gl, %dp : tensor<16x32xbf16>, tensor<16x32xf32>
}

// -----

// fp32, dy already 2-D: no cast, no reshape.
// CHECK-LABEL: func.func @bias_grad_fp32
// CHECK-NEXT: %[[DW:[^ ,]+]], %[[DB:[^ ]+]] = gpt.matmul_bias_grad %{{.+}}, %{{.+}} {transpose_a} : tensor<16x8xf32>, tensor<16x32xf32> -> tensor<8x32xf32>, tensor<32xf32>
// CHECK-NEXT: return %[[DW]], %[[DB]]
func.func @bias_grad_fp32(%g: tensor<16x32xf32>, %x: tensor<16x8xf32>) -> (tensor<8x32xf32>, tensor<32xf32>) {
  %db = gpt.reduce_sum %g : tensor<16x32xf32> -> tensor<32xf32>
  %dw = gpt.matmul %x, %g {transpose_a} : tensor<16x8xf32>, tensor<16x32xf32> -> tensor<8x32xf32>
  return %dw, %db : tensor<8x32xf32>, tensor<32xf32>
}

// -----

// The bias gradient is read before the weight-gradient GEMM: the fused op
// would come too late.
// CHECK-LABEL: func.func @bias_grad_read_early
// CHECK-NOT: gpt.matmul_bias_grad
func.func @bias_grad_read_early(%g: tensor<16x32xf32>, %x: tensor<16x8xf32>) -> (tensor<8x32xf32>, tensor<32xf32>) {
  // expected-remark @+1 {{did not fuse into the matmul epilogue: the bias gradient is read before the weight-gradient GEMM that would compute it}}
  %db = gpt.reduce_sum %g : tensor<16x32xf32> -> tensor<32xf32>
  %db2 = gpt.neg %db : tensor<32xf32>
  %dw = gpt.matmul %x, %g {transpose_a} : tensor<16x8xf32>, tensor<16x32xf32> -> tensor<8x32xf32>
  return %dw, %db2 : tensor<8x32xf32>, tensor<32xf32>
}

// -----

// A sum to [N] with no GEMM reading dy as its right operand (here dy is
// the left one): nothing to fuse, nothing to say.
// CHECK-LABEL: func.func @sum_without_weight_grad
// CHECK: gpt.reduce_sum
// CHECK-NOT: gpt.matmul_bias_grad
func.func @sum_without_weight_grad(%g: tensor<16x32xf32>, %w: tensor<32x8xf32>) -> (tensor<16x8xf32>, tensor<32xf32>) {
  %db = gpt.reduce_sum %g : tensor<16x32xf32> -> tensor<32xf32>
  %dx = gpt.matmul %g, %w : tensor<16x32xf32>, tensor<32x8xf32> -> tensor<16x8xf32>
  return %dx, %db : tensor<16x8xf32>, tensor<32xf32>
}

// -----

// A weight gradient without a bias (x^T dy, 2-D), widened for its master
// weight: the GEMM writes float32 itself. An input gradient (not
// transposed) keeps its cast: a later pass folds that into its reader.
// CHECK-LABEL: func.func @weight_grad_f32
// CHECK-NEXT: %[[DW:.+]] = gpt.matmul %{{.+}}, %{{.+}} {transpose_a} : tensor<16x8xbf16>, tensor<16x32xbf16> -> tensor<8x32xf32>
// CHECK-NEXT: %[[DX:.+]] = gpt.matmul %{{.+}}, %{{.+}} {transpose_b} : tensor<16x32xbf16>, tensor<8x32xbf16> -> tensor<16x8xbf16>
// CHECK-NEXT: %[[DXF:.+]] = gpt.cast %[[DX]]
// CHECK-NEXT: return %[[DW]], %[[DXF]]
func.func @weight_grad_f32(%x: tensor<16x8xbf16>, %g: tensor<16x32xbf16>, %w: tensor<8x32xbf16>) -> (tensor<8x32xf32>, tensor<16x8xf32>) {
  %dw = gpt.matmul %x, %g {transpose_a} : tensor<16x8xbf16>, tensor<16x32xbf16> -> tensor<8x32xbf16>
  %dwf = gpt.cast %dw : tensor<8x32xbf16> -> tensor<8x32xf32>
  %dx = gpt.matmul %g, %w {transpose_b} : tensor<16x32xbf16>, tensor<8x32xbf16> -> tensor<16x8xbf16>
  %dxf = gpt.cast %dx : tensor<16x8xbf16> -> tensor<16x8xf32>
  return %dwf, %dxf : tensor<8x32xf32>, tensor<16x8xf32>
}

// -----

// A float32 GEMM whose biased output is narrowed: cuBLASLt pairs float32
// operands with a float32 D, so the epilogue stays float32 and the cast
// stays after it.
// CHECK-LABEL: func.func @f32_operands_narrowed
// CHECK-NEXT: %[[Y:.+]] = gpt.matmul_epilogue %{{.+}}, %{{.+}}, %{{.+}} : tensor<16x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<16x16xf32>
// CHECK-NEXT: %[[L:.+]] = gpt.cast %[[Y]] : tensor<16x16xf32> -> tensor<16x16xbf16>
// CHECK-NEXT: return %[[L]]
func.func @f32_operands_narrowed(%x: tensor<16x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<16x16xbf16> {
  %mm = gpt.matmul %x, %w : tensor<16x8xf32>, tensor<8x16xf32> -> tensor<16x16xf32>
  %h = gpt.add %mm, %b : tensor<16x16xf32>, tensor<16xf32> -> tensor<16x16xf32>
  %l = gpt.cast %h : tensor<16x16xf32> -> tensor<16x16xbf16>
  return %l : tensor<16x16xbf16>
}

// -----

// A float32 backward GEMM with a bf16 aux (widened for gelu_grad): D stays
// float32, so the op reads the widened aux, all float32 as cuBLASLt wants.
// CHECK-LABEL: func.func @f32_backward_bf16_aux
// CHECK-SAME: (%[[DY:[^:]+]]: tensor<16x16xf32>, %[[W:[^:]+]]: tensor<16x32xf32>, %[[PL:[^:]+]]: tensor<16x32xbf16>)
// CHECK-NEXT: %[[P:.+]] = gpt.cast %[[PL]] : tensor<16x32xbf16> -> tensor<16x32xf32>
// CHECK-NEXT: %[[DP:.+]] = gpt.matmul_gelu_grad %[[DY]], %[[W]], %[[P]] : tensor<16x16xf32>, tensor<16x32xf32>, tensor<16x32xf32> -> tensor<16x32xf32>{{$}}
// CHECK-NEXT: return %[[DP]]
func.func @f32_backward_bf16_aux(%dy: tensor<16x16xf32>, %w: tensor<16x32xf32>, %prel: tensor<16x32xbf16>) -> tensor<16x32xf32> {
  %pre = gpt.cast %prel : tensor<16x32xbf16> -> tensor<16x32xf32>
  %mm = gpt.matmul %dy, %w : tensor<16x16xf32>, tensor<16x32xf32> -> tensor<16x32xf32>
  %dp = gpt.gelu_grad %pre, %mm : tensor<16x32xf32>
  return %dp : tensor<16x32xf32>
}
