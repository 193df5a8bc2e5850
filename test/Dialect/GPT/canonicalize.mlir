// RUN: gptc-opt %s -split-input-file -canonicalize | FileCheck %s

// The position embedding: rows gathered by gpt.iota are the table's first
// rows. All of them: the table itself (no gather, no iota left).
// CHECK-LABEL: func.func @positions_whole_table
// CHECK-SAME: (%[[WPE:[^:]+]]: tensor<64x8xf32>)
// CHECK-NOT: gpt.embedding
// CHECK-NOT: gpt.iota
// CHECK: return %[[WPE]]
func.func @positions_whole_table(%wpe: tensor<64x8xf32>) -> tensor<64x8xf32> {
  %p = gpt.iota : tensor<64xi32>
  %e = gpt.embedding %wpe, %p : tensor<64x8xf32>, tensor<64xi32> -> tensor<64x8xf32>
  return %e : tensor<64x8xf32>
}

// -----

// Fewer positions than rows (T below the block size): the leading rows.
// CHECK-LABEL: func.func @positions_first_rows
// CHECK: %[[S:.+]] = gpt.slice %{{.+}} : tensor<64x8xf32> -> tensor<16x8xf32>
// CHECK-NOT: gpt.embedding
// CHECK: return %[[S]]
func.func @positions_first_rows(%wpe: tensor<64x8xf32>) -> tensor<16x8xf32> {
  %p = gpt.iota : tensor<16xi32>
  %e = gpt.embedding %wpe, %p : tensor<64x8xf32>, tensor<16xi32> -> tensor<16x8xf32>
  return %e : tensor<16x8xf32>
}

// -----

// Its gradient: one term a row, so dy itself where it has every row...
// CHECK-LABEL: func.func @position_grad_whole_table
// CHECK-SAME: (%[[DY:[^:]+]]: tensor<64x8xf32>)
// CHECK-NOT: gpt.embedding_grad
// CHECK: return %[[DY]]
func.func @position_grad_whole_table(%dy: tensor<64x8xf32>) -> tensor<64x8xf32> {
  %p = gpt.iota : tensor<64xi32>
  %g = gpt.embedding_grad %dy, %p : tensor<64x8xf32>, tensor<64xi32> -> tensor<64x8xf32>
  return %g : tensor<64x8xf32>
}

// -----

// ...and dy padded with zero rows where it has fewer.
// CHECK-LABEL: func.func @position_grad_first_rows
// CHECK: %[[P:.+]] = gpt.pad %{{.+}} : tensor<16x8xf32> -> tensor<64x8xf32>
// CHECK-NOT: gpt.embedding_grad
// CHECK: return %[[P]]
func.func @position_grad_first_rows(%dy: tensor<16x8xf32>) -> tensor<64x8xf32> {
  %p = gpt.iota : tensor<16xi32>
  %g = gpt.embedding_grad %dy, %p : tensor<16x8xf32>, tensor<16xi32> -> tensor<64x8xf32>
  return %g : tensor<64x8xf32>
}

// -----

// Token ids, an addend (the tied table's sum), a narrowing gradient, or
// iota padded with zeros (pad-dims' positions, row 0 repeated): each is a
// real gather or scatter, left alone.
// CHECK-LABEL: func.func @not_positions
// CHECK: gpt.embedding %{{.+}}, %{{.+}} : tensor<64x8xf32>, tensor<2x16xi32>
// CHECK: gpt.embedding_grad %{{.+}}, %{{.+}}, %{{.+}} : tensor<16x8xf32>, tensor<16xi32>, tensor<64x8xf32>
// CHECK: gpt.embedding_grad %{{.+}}, %{{.+}} : tensor<16x8xf32>, tensor<16xi32> -> tensor<64x8xbf16>
// CHECK: gpt.embedding %{{.+}}, %{{.+}} : tensor<64x8xf32>, tensor<16xi32>
func.func @not_positions(%wpe: tensor<64x8xf32>, %ids: tensor<2x16xi32>, %dy: tensor<16x8xf32>, %add: tensor<64x8xf32>) -> (tensor<2x16x8xf32>, tensor<64x8xf32>, tensor<64x8xbf16>, tensor<16x8xf32>) {
  %e = gpt.embedding %wpe, %ids : tensor<64x8xf32>, tensor<2x16xi32> -> tensor<2x16x8xf32>
  %p = gpt.iota : tensor<16xi32>
  %g = gpt.embedding_grad %dy, %p, %add : tensor<16x8xf32>, tensor<16xi32>, tensor<64x8xf32> -> tensor<64x8xf32>
  %n = gpt.embedding_grad %dy, %p : tensor<16x8xf32>, tensor<16xi32> -> tensor<64x8xbf16>
  %q = gpt.iota : tensor<8xi32>
  %qp = gpt.pad %q : tensor<8xi32> -> tensor<16xi32>
  %r = gpt.embedding %wpe, %qp : tensor<64x8xf32>, tensor<16xi32> -> tensor<16x8xf32>
  return %e, %g, %n, %r : tensor<2x16x8xf32>, tensor<64x8xf32>, tensor<64x8xbf16>, tensor<16x8xf32>
}
