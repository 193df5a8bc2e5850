//===- Checkpoint.h - training checkpoints on disk --------------*- C++ -*-===//
//
// A checkpoint of step N is the folder <dir>/step_<NNNNNN>/ holding
//
//   model.safetensors  the weights, F32, Hugging Face GPT-2 names (what
//                      `gptc eval --init-from` and HF readers load)
//   state.safetensors  AdamW moments as adam_m.<param> and adam_v.<param>,
//                      and the training state as string metadata
//   DONE               written last; a folder without it is not a checkpoint
//
// Saving writes both files into step_<N>.tmp/ (each synced, see AtomicFile),
// renames the folder to step_<N>/, syncs <dir>, and then writes DONE. A
// crash or a full disk at any point leaves earlier checkpoints whole and no
// folder that latestCheckpoint() would pick.
//
// No MLIR: the GPU runtime writes the same checkpoints.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TRAIN_CHECKPOINT_H
#define GPTC_TRAIN_CHECKPOINT_H

#include "gptc/Executor/HostTensor.h"

#include <map>
#include <string>

namespace gptc::train {

struct Checkpoint {
  std::map<std::string, exec::HostTensor> params;
  std::map<std::string, exec::HostTensor> adamM; ///< by parameter name
  std::map<std::string, exec::HostTensor> adamV;
  std::map<std::string, std::string> metadata;
};

/// "step_000012".
std::string checkpointName(int64_t step);

/// Saves `ckpt` as step `step` in `dir` (created if missing) and returns the
/// folder. Refuses to replace a complete checkpoint of the same step. Throws
/// FormatError, after removing what it wrote.
std::string saveCheckpoint(const std::string &dir, int64_t step,
                           const Checkpoint &ckpt);

/// The complete checkpoint (with DONE) of the highest step in `dir`, or ""
/// if there is none (or no `dir`).
std::string latestCheckpoint(const std::string &dir);

/// Reads a checkpoint folder. Throws FormatError if DONE is missing, a file
/// is unreadable or truncated, a tensor is not F32 or holds a NaN or an
/// infinity, or the moments do not match the parameters one to one.
Checkpoint loadCheckpoint(const std::string &folder);

} // namespace gptc::train

#endif // GPTC_TRAIN_CHECKPOINT_H
