//===- KernelCheck.h - every launch on two backends, compared ---*- C++ -*-===//
//
// `train_gpt2 --check-kernels`: the same Program on a device backend and a
// reference backend (the CPU one), launch by launch, with each launch's
// outputs compared. Both start from the same fixed-seed random parameters,
// moments, gradients, token ids and hyperparameters; after each launch the
// reference's outputs are copied into the device, so every kernel is judged
// on exactly the inputs the reference used and errors do not compound.
// Works with any two backends (CPU against CPU must pass everything).
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_RUNTIME_KERNELCHECK_H
#define GPTC_RUNTIME_KERNELCHECK_H

#include "gptc/Runtime/Backend.h"

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace gptc::rt {

struct KernelCheckOptions {
  uint64_t seed = 1234;
  /// Copy the reference's outputs into the device after each launch. Off:
  /// the device runs on its own results (end-to-end drift, looser meaning).
  bool resync = true;
  /// The functions to check, in this order; empty: all, in program order.
  std::vector<std::string> functions;
  /// Non-empty: a folder (created if missing) that gets each failing
  /// launch's outputs, as the device and the reference wrote them (raw,
  /// row-major: <function>-<launch>-out<k>.device / .reference), and
  /// index.txt with one line per file pair: "name dtype[shape]".
  std::string dumpDir;
};

/// Loads `p` into both backends (they must be fresh), fills every Param,
/// Grad, AdamM, AdamV, ParamCopy, Input and Hyper buffer, then runs each
/// function (grads_accumulate: its own launches alone, unless named; the
/// reference runs its repeats of grads') one
/// launch at a time on both and prints one line per launch to `out`:
/// function and index, op, location, max abs and scaled relative error,
/// the tolerance and PASS/FAIL (and the worst element on a FAIL). A launch
/// the device cannot run fails with its error. Returns the number of
/// failed launches.
int checkKernels(const Program &p, Backend &device, Backend &reference,
                 std::ostream &out, const KernelCheckOptions &options = {});

/// The tolerance for `l`'s result number `output`, of `dtype` (see
/// KernelCheck.cpp for why): bf16 2^-7 (the bf16 attention 2^-4, a GELU
/// derivative's bias gradient 2^-6), f16 2^-10, f32 1e-4 (tf32 matmuls
/// 2^-8), i32 exact (0).
double kernelCheckTolerance(const Program &p, const Launch &l, size_t output,
                            DType dtype);

} // namespace gptc::rt

#endif // GPTC_RUNTIME_KERNELCHECK_H
