// RUN: gptc-opt %s -split-input-file -gpt-autodiff -gpt-optimizer -verify-diagnostics | FileCheck %s
// RUN: gptc-opt %s -split-input-file -gpt-autodiff -gpt-optimizer="clip=0 weight-decay=0" -verify-diagnostics | FileCheck %s --check-prefix=PLAIN

// Arguments: params, gradient sums, both moments, then the run-time scalars;
// results: new params and moments, then the gradient norm.
// CHECK-LABEL: func.func @adamw_update
// CHECK-SAME: %[[W:[^:]+]]: tensor<4x8xf32> {gpt.param = "w"}, %{{[^:]+}}: tensor<8xf32> {gpt.param = "b"}
// CHECK-SAME: {gpt.grad = "w"}
// CHECK-SAME: {gpt.adam_m = "w"}
// CHECK-SAME: {gpt.adam_v = "w"}
// CHECK-SAME: %[[LR:[^:]+]]: tensor<f32> {gpt.hyper = "lr"}, %[[STEP:[^:]+]]: tensor<f32> {gpt.hyper = "step"}, %[[SCALE:[^:]+]]: tensor<f32> {gpt.hyper = "grad_scale"}
// CHECK-SAME: -> (tensor<4x8xf32> {gpt.param = "w"}, tensor<8xf32> {gpt.param = "b"}, tensor<4x8xf32> {gpt.adam_m = "w"}
// CHECK-SAME: tensor<f32> {gpt.output = "grad_norm"})
// The mean gradient, its norm and the clipping coefficient.
// CHECK: gpt.mul %{{.+}}, %[[SCALE]]
// CHECK: %[[NORM:.+]] = gpt.sqrt
// CHECK: gpt.min
// Decoupled weight decay p · (1 − lr·wd) on every parameter, wd a splat of
// the parameter's shape: 0.1 on the 2-D weight, 0 on the bias (so that
// gpt-fuse-elementwise sees one body with wd per tensor).
// CHECK: %[[WD:.+]] = gpt.constant dense<1.000000e-01> : tensor<4x8xf32>
// CHECK: %[[LRWD:.+]] = gpt.mul %[[LR]], %[[WD]] : tensor<f32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK: %[[DECAY:.+]] = gpt.sub %{{.+}}, %[[LRWD]] : tensor<f32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK: gpt.mul %[[W]], %[[DECAY]] : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK: %[[WD0:.+]] = gpt.constant dense<0.000000e+00> : tensor<8xf32>
// CHECK: %[[LRWD0:.+]] = gpt.mul %[[LR]], %[[WD0]] : tensor<f32>, tensor<8xf32> -> tensor<8xf32>
// CHECK: %[[DECAY0:.+]] = gpt.sub %{{.+}}, %[[LRWD0]] : tensor<f32>, tensor<8xf32> -> tensor<8xf32>
// CHECK: gpt.mul %{{.+}}, %[[DECAY0]] : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
// CHECK: return {{.+}}, %[[NORM]] :

// PLAIN-LABEL: func.func @adamw_update
// PLAIN-NOT: gpt.min
// PLAIN-NOT: gpt.constant dense<0.000000e+00>
// PLAIN: return
func.func @linear(%x: tensor<2x3x4xf32>,
                  %w: tensor<4x8xf32> {gpt.param = "w"},
                  %b: tensor<8xf32> {gpt.param = "b"},
                  %t: tensor<2x3xi32> {gpt.input = "targets"}) -> (tensor<f32> {gpt.output = "loss"}) {
  %y = gpt.matmul %x, %w : tensor<2x3x4xf32>, tensor<4x8xf32> -> tensor<2x3x8xf32>
  %z = gpt.add %y, %b : tensor<2x3x8xf32>, tensor<8xf32> -> tensor<2x3x8xf32>
  %l = gpt.cross_entropy %z, %t : tensor<2x3x8xf32>, tensor<2x3xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// expected-error @+1 {{gpt-optimizer: no gradient function (a function with gpt.grad results); run gpt-autodiff first}}
module {
  func.func @nothing(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}
