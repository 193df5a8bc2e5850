// RUN: gptc-opt %s -split-input-file -gpt-fuse-elementwise -verify-diagnostics | FileCheck %s
// RUN: gptc-opt %s -split-input-file -gpt-fuse-elementwise=embedding-grad-addend=false | FileCheck %s --check-prefix=OFF

// A tied table's gradient as gpt-autodiff writes it: the lm_head GEMM's
// weight gradient (padded vocabulary, cut back) plus the embedding's
// scatter-add. The add becomes the scatter-add's addend: no kernel of its
// own. Either operand order.
// CHECK-LABEL: func.func @tied
// CHECK-SAME: (%[[DX:[^:]+]]: tensor<2x3x4xf32>, %[[IDS:[^:]+]]: tensor<2x3xi32>, %[[DL:[^:]+]]: tensor<6x64xf32>, %[[X:[^:]+]]: tensor<6x4xf32>)
// CHECK: %[[MM:.+]] = gpt.matmul %[[DL]], %[[X]] {transpose_a}
// CHECK: %[[HEAD:.+]] = gpt.slice %[[MM]] : tensor<64x4xf32> -> tensor<50x4xf32>
// CHECK: %[[G:.+]] = gpt.embedding_grad %[[DX]], %[[IDS]], %[[HEAD]] : tensor<2x3x4xf32>, tensor<2x3xi32>, tensor<50x4xf32> -> tensor<50x4xf32>
// CHECK-NOT: gpt.fused_elementwise
// CHECK: return %[[G]]
// OFF-LABEL: func.func @tied
// OFF: %[[E:.+]] = gpt.embedding_grad %{{[^,]+}}, %{{[^,]+}} : tensor<2x3x4xf32>, tensor<2x3xi32> -> tensor<50x4xf32>
// OFF: gpt.fused_elementwise(%{{.+}}, %[[E]] : tensor<50x4xf32>, tensor<50x4xf32>)
func.func @tied(%dx: tensor<2x3x4xf32>, %ids: tensor<2x3xi32>, %dlogits: tensor<6x64xf32>, %x: tensor<6x4xf32>) -> tensor<50x4xf32> {
  %mm = gpt.matmul %dlogits, %x {transpose_a} : tensor<6x64xf32>, tensor<6x4xf32> -> tensor<64x4xf32>
  %head = gpt.slice %mm : tensor<64x4xf32> -> tensor<50x4xf32>
  %emb = gpt.embedding_grad %dx, %ids : tensor<2x3x4xf32>, tensor<2x3xi32> -> tensor<50x4xf32>
  %g = gpt.add %head, %emb : tensor<50x4xf32>, tensor<50x4xf32> -> tensor<50x4xf32>
  return %g : tensor<50x4xf32>
}

// -----

// CHECK-LABEL: func.func @scatter_first
// CHECK-SAME: (%[[DX:[^:]+]]: tensor<2x3x4xf32>, %[[IDS:[^:]+]]: tensor<2x3xi32>, %[[H:[^:]+]]: tensor<50x4xf32>)
// CHECK-NEXT: %[[G:.+]] = gpt.embedding_grad %[[DX]], %[[IDS]], %[[H]]
// CHECK-NEXT: return %[[G]]
func.func @scatter_first(%dx: tensor<2x3x4xf32>, %ids: tensor<2x3xi32>, %head: tensor<50x4xf32>) -> tensor<50x4xf32> {
  %emb = gpt.embedding_grad %dx, %ids : tensor<2x3x4xf32>, tensor<2x3xi32> -> tensor<50x4xf32>
  %g = gpt.add %emb, %head : tensor<50x4xf32>, tensor<50x4xf32> -> tensor<50x4xf32>
  return %g : tensor<50x4xf32>
}

// -----

// Declined: the scatter-add is also read on its own (its plain value must
// be written anyway), the other operand broadcasts, or the values are
// bf16 (the add would round twice).
// CHECK-LABEL: func.func @declined
// CHECK: %[[E1:.+]] = gpt.embedding_grad %{{[^,]+}}, %{{[^,]+}} :
// CHECK: gpt.fused_elementwise(%{{.+}}, %[[E1]] :
// CHECK: %[[E2:.+]] = gpt.embedding_grad %{{[^,]+}}, %{{[^,]+}} :
// CHECK: gpt.fused_elementwise(%[[E2]], %{{.+}} :
// CHECK: %[[E3:.+]] = gpt.embedding_grad %{{[^,]+}}, %{{[^,]+}} :
// CHECK: gpt.add %{{.+}}, %[[E3]] : tensor<50x4xbf16>
func.func @declined(%dx: tensor<2x3x4xf32>, %ids: tensor<2x3xi32>, %head: tensor<50x4xf32>, %bias: tensor<4xf32>,
                    %dxl: tensor<2x3x4xbf16>, %headl: tensor<50x4xbf16>)
    -> (tensor<50x4xf32>, tensor<50x4xf32>, tensor<50x4xf32>, tensor<50x4xbf16>) {
  %e1 = gpt.embedding_grad %dx, %ids : tensor<2x3x4xf32>, tensor<2x3xi32> -> tensor<50x4xf32>
  %g1 = gpt.add %head, %e1 : tensor<50x4xf32>, tensor<50x4xf32> -> tensor<50x4xf32>
  %e2 = gpt.embedding_grad %dx, %ids : tensor<2x3x4xf32>, tensor<2x3xi32> -> tensor<50x4xf32>
  %g2 = gpt.add %e2, %bias : tensor<50x4xf32>, tensor<4xf32> -> tensor<50x4xf32>
  %e3 = gpt.embedding_grad %dxl, %ids : tensor<2x3x4xbf16>, tensor<2x3xi32> -> tensor<50x4xbf16>
  %g3 = gpt.add %headl, %e3 : tensor<50x4xbf16>, tensor<50x4xbf16> -> tensor<50x4xbf16>
  return %g1, %e1, %g2, %g3 : tensor<50x4xf32>, tensor<50x4xf32>, tensor<50x4xf32>, tensor<50x4xbf16>
}
