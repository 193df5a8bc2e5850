//===- ExecutorEngine.h - the training step on the CPU executor -*- C++ -*-===//
//
// gptc train's Engine: runs the compiled step functions (Pipeline.h) through
// the CPU executor, binding arguments and results by their attributes
// (StepFunction.h), with the weights in host tensors.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TRAIN_EXECUTORENGINE_H
#define GPTC_TRAIN_EXECUTORENGINE_H

#include "gptc/Pipeline/Pipeline.h"
#include "gptc/Train/Engine.h"

#include <memory>

namespace gptc::train {

/// Reads the roles of the program's functions; fails with an error at a
/// function that lacks one the trainer needs. `program` must outlive the
/// engine.
mlir::FailureOr<std::unique_ptr<Engine>>
makeExecutorEngine(const TrainingProgram &program);

} // namespace gptc::train

#endif // GPTC_TRAIN_EXECUTORENGINE_H
