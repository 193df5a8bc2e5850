// RUN: gptc-opt %s -split-input-file -gpt-fuse-elementwise | FileCheck %s
// RUN: gptc-opt %s -split-input-file -gpt-fuse-elementwise=fold-casts=false | FileCheck %s --check-prefix=NOCASTS

// The q third of each row of a bf16 dq|dk|dv, widened and summed (what
// gpt-attention-bias-grad writes): one reduction reads the bf16 rows in
// place, its corner the slice's shape. Neither the slice nor the widened
// copy is written.
// CHECK-LABEL: func.func @corner_of_widened
// CHECK-NEXT: %[[R:.+]] = gpt.reshape %arg0 : tensor<2x4x24xbf16> -> tensor<8x3x8xbf16>
// CHECK-NEXT: %[[S:.+]] = gpt.reduce_sum %[[R]] {corner = array<i64: 8, 1, 8>} : tensor<8x3x8xbf16> -> tensor<8xf32>
// CHECK-NEXT: return %[[S]]
// Without cast folding the slice still goes; the widened copy stays.
// NOCASTS-LABEL: func.func @corner_of_widened
// NOCASTS: %[[W:.+]] = gpt.cast %arg0 : tensor<2x4x24xbf16> -> tensor<2x4x24xf32>
// NOCASTS: %[[R:.+]] = gpt.reshape %[[W]] : tensor<2x4x24xf32> -> tensor<8x3x8xf32>
// NOCASTS: gpt.reduce_sum %[[R]] {corner = array<i64: 8, 1, 8>} : tensor<8x3x8xf32> -> tensor<8xf32>
// NOCASTS-NOT: gpt.slice
func.func @corner_of_widened(%g: tensor<2x4x24xbf16>) -> tensor<8xf32> {
  %w = gpt.cast %g : tensor<2x4x24xbf16> -> tensor<2x4x24xf32>
  %r = gpt.reshape %w : tensor<2x4x24xf32> -> tensor<8x3x8xf32>
  %q = gpt.slice %r : tensor<8x3x8xf32> -> tensor<8x1x8xf32>
  %s = gpt.reduce_sum %q : tensor<8x1x8xf32> -> tensor<8xf32>
  return %s : tensor<8xf32>
}

// -----

// A widened value that something else reads as well: the sum reads the
// narrow one; the cast stays for the other reader.
// CHECK-LABEL: func.func @widened_also_read
// CHECK: %[[W:.+]] = gpt.cast %arg0 : tensor<4x8xbf16> -> tensor<4x8xf32>
// CHECK: %[[S:.+]] = gpt.reduce_sum %arg0 : tensor<4x8xbf16> -> tensor<8xf32>
// CHECK: return %[[S]], %[[W]]
// NOCASTS-LABEL: func.func @widened_also_read
// NOCASTS: %[[W:.+]] = gpt.cast %arg0
// NOCASTS: gpt.reduce_sum %[[W]] : tensor<4x8xf32> -> tensor<8xf32>
func.func @widened_also_read(%d: tensor<4x8xbf16>) -> (tensor<8xf32>, tensor<4x8xf32>) {
  %w = gpt.cast %d : tensor<4x8xbf16> -> tensor<4x8xf32>
  %s = gpt.reduce_sum %w : tensor<4x8xf32> -> tensor<8xf32>
  return %s, %w : tensor<8xf32>, tensor<4x8xf32>
}

// -----

// A corner of a corner is the smaller one.
// CHECK-LABEL: func.func @corner_of_corner
// CHECK-NEXT: %[[S:.+]] = gpt.reduce_sum %arg0 {corner = array<i64: 2, 3, 5>} : tensor<4x6x8xf32> -> tensor<5xf32>
// CHECK-NEXT: return %[[S]]
func.func @corner_of_corner(%x: tensor<4x6x8xf32>) -> tensor<5xf32> {
  %a = gpt.slice %x : tensor<4x6x8xf32> -> tensor<3x3x8xf32>
  %b = gpt.slice %a : tensor<3x3x8xf32> -> tensor<2x3x5xf32>
  %s = gpt.reduce_sum %b : tensor<2x3x5xf32> -> tensor<5xf32>
  return %s : tensor<5xf32>
}

// -----

// Left alone: a slice that narrows (its terms are rounded: the sum would
// change), a narrowing cast, and a slice whose sum is narrower than its
// source.
// CHECK-LABEL: func.func @rounded_terms
// CHECK: %[[N:.+]] = gpt.slice %arg0 : tensor<4x8xf32> -> tensor<2x8xbf16>
// CHECK: gpt.reduce_sum %[[N]] : tensor<2x8xbf16> -> tensor<8xbf16>
// CHECK: %[[C:.+]] = gpt.cast %arg0 : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK: gpt.reduce_sum %[[C]] : tensor<4x8xbf16> -> tensor<8xbf16>
func.func @rounded_terms(%x: tensor<4x8xf32>) -> (tensor<8xbf16>, tensor<8xbf16>) {
  %n = gpt.slice %x : tensor<4x8xf32> -> tensor<2x8xbf16>
  %a = gpt.reduce_sum %n : tensor<2x8xbf16> -> tensor<8xbf16>
  %c = gpt.cast %x : tensor<4x8xf32> -> tensor<4x8xbf16>
  %b = gpt.reduce_sum %c : tensor<4x8xbf16> -> tensor<8xbf16>
  return %a, %b : tensor<8xbf16>, tensor<8xbf16>
}
