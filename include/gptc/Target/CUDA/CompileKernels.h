//===- CompileKernels.h - NVRTC for every kernel of a Program ---*- C++ -*-===//
//
// What `gptc compile` does after lowering: emit the CUDA kernels
// (EmitCUDA.h), compile each unique one with NVRTC for the target arch (in
// parallel, through the disk cache of gptc/Runtime/NVRTC.h), store the
// cubins in the Program, and optionally dump the sources and print the
// resource report. A kernel that spilled under a register cap is emitted
// and compiled once more without it, as a variant of its launches. No MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TARGET_CUDA_COMPILEKERNELS_H
#define GPTC_TARGET_CUDA_COMPILEKERNELS_H

#include "gptc/Runtime/Program.h"
#include "gptc/Target/CUDA/EmitCUDA.h"

#include <ostream>
#include <string>
#include <vector>

namespace gptc::cuda {

/// What ptxas said about one kernel. sharedBytes: a block's, the static
/// bytes ptxas reports plus the most dynamic bytes a launch of it asks for.
struct KernelResources {
  std::string name;
  int launches = 0;        ///< launches it is the own kernel of
  int variantLaunches = 0; ///< launches it is a variant of
  int registers = -1, sharedBytes = -1, localBytes = -1;
  int spillStores = -1, spillLoads = -1;
  size_t cubinBytes = 0;
  int threads = 0;      ///< a block's, the most any launch of it asks for
  int blocksPerSM = -1; ///< residentBlocks for the arch; -1: no table
};

/// How many blocks of `threads` threads at `registers` registers a thread
/// and `sharedBytes` of shared memory (static and dynamic) one SM of `arch`
/// holds at once, as the CUDA occupancy calculator counts: registers
/// allocated 256 to a warp, shared memory 128 bytes at a time plus 1 KiB a
/// block, the most shared memory the SM can give, threads and blocks an SM.
/// -1 for an arch without a table (sm_80, sm_86, sm_89, sm_90, sm_90a).
int residentBlocks(const std::string &arch, int threads, int registers,
                   int sharedBytes);

/// The most registers a thread (at most 255) at which `blocks` blocks of
/// `threads` threads and `sharedBytes` fit one SM of `arch`
/// (residentBlocks); -1 where none do (shared memory, threads, no table).
int registersForBlocks(const std::string &arch, int threads, int sharedBytes,
                       int blocks);

struct CompileKernelsOptions {
  /// Non-empty: write NAME.cu, NAME.log and NAME.cubin per kernel,
  /// nvrtc-options.txt and manifest.json (each kernel's launches: function,
  /// index, op, loc, grid, block, dynamic shared bytes) here, once
  /// everything compiled.
  std::string dumpDir;
  /// Non-null: the resource table, one line per kernel.
  std::ostream *report = nullptr;
  /// Compiler threads; 0: one per core.
  unsigned threads = 0;
  /// What the emitter chooses (EmitCUDA.h).
  EmitOptions emit;
  /// A kernel ptxas spilled under its blocks an SM's register cap gets its
  /// uncapped twin as a variant (addUncappedVariants), compiled too.
  bool uncappedVariants = true;
  /// A layernorm kernel whose registers leave room for fewer blocks an SM
  /// than its shared memory and threads would gets a twin at one block
  /// more as a variant (addDenserVariants), compiled too.
  bool denserVariants = true;
};

/// Emits p's kernels for `arch` (rt::isSupportedArch, else EmitError with
/// one line before anything is written) and compiles them, filling each
/// DeviceKernel's cubin and arch. Throws EmitError, rt::DeviceError (NVRTC
/// missing, a kernel that does not compile) or FormatError (the dump).
std::vector<KernelResources> compileKernels(rt::Program &p,
                                            const std::string &arch,
                                            const CompileKernelsOptions &opts);

/// The report's text for `resources`; `repeatsOnce`: the launch counts
/// took grads_accumulate's repeats of grads' launches once, in grads
/// (rt::repeatsGrads), which the legend then says. After the table, the
/// kernels whose registers alone hold them to fewer blocks an SM than
/// their shared memory and threads allow, each with the registers a thread
/// that one block more needs.
void printKernelReport(const std::vector<KernelResources> &resources,
                       const std::string &arch, std::ostream &os,
                       bool repeatsOnce = false);

} // namespace gptc::cuda

#endif // GPTC_TARGET_CUDA_COMPILEKERNELS_H
