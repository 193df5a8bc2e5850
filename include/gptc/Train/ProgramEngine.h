//===- ProgramEngine.h - the training step as a kernel schedule -*- C++ -*-===//
//
// The training program's Engine: runs a kernel-level Program
// (gptc/Runtime/Program.h) on a Backend. The weights and moments live in the
// backend's arena for the whole run: uploaded once, updated in place by the
// update function, downloaded only for a checkpoint and at the end. Per
// micro-batch the host uploads the tokens, the targets and the hypers and
// reads back the loss; the update's first launches [0, normLaunches) give
// the gradient norm before anything is written in place, so a skipped step
// leaves the weights as they were.
//
// Gradient accumulation over K > 1 micro-batches sums the gradients on the
// host (download, add, upload), in the executor's order, so both engines
// give the same bits; a device-side sum is left for later.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TRAIN_PROGRAMENGINE_H
#define GPTC_TRAIN_PROGRAMENGINE_H

#include "gptc/Models/GPT2Config.h"
#include "gptc/Pipeline/OptimizerOptions.h"
#include "gptc/Runtime/Backend.h"
#include "gptc/Train/Engine.h"
#include "gptc/Train/TrainState.h"

#include <memory>

namespace gptc::train {

/// Loads `program` into `backend` (both must outlive the engine). Throws
/// TrainError (one line) if the program lacks a function, a buffer or the
/// norm split the trainer needs, rt::DeviceError if the backend fails.
std::unique_ptr<Engine> makeProgramEngine(const rt::Program &program,
                                          rt::Backend &backend);

/// What the program was compiled for, read off its meta (LowerToKernels.h
/// lists the keys); each throws TrainError naming a missing or malformed
/// key.
struct CompiledSettings {
  models::GPT2Config model;
  int64_t batch = 0, seq = 0, padMultiple = 0;
  OptimizerOptions optimizer;
};
CompiledSettings compiledSettings(const rt::Program &program);

/// Training FLOPs per token, llm.c's count: 6N + 6·L·C·T (the matmuls
/// forward and backward, plus attention's scores and values).
double flopsPerToken(const models::GPT2Config &config, int64_t parameters,
                     int64_t seq);

/// The MFU settings of `opts` for `backend`: set where it is a GPU whose
/// peak is known, untouched elsewhere.
void setMfu(TrainOptions &opts, rt::Backend &backend,
            const models::GPT2Config &config, int64_t parameters);

/// "memory (bf16): params 474.7 MiB | grads ... | adam m+v ... | io ... |
/// temporaries ... | arena ...": the planned arena by role; withKernels:
/// and " | kernel scratch ..." where the CUDA kernels declare module scratch
/// beside it (DeviceKernel::scratchBytes).
std::string programMemoryLine(const rt::Program &program,
                              bool withKernels = false);

} // namespace gptc::train

#endif // GPTC_TRAIN_PROGRAMENGINE_H
