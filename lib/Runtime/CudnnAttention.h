//===- CudnnAttention.h - cuDNN's fused attention through dlopen -*- C++
//-*-===//
//
// Private to lib/Runtime. cuDNN 9 is optional (docs: DESIGN.md's
// dependencies): where libcudnn.so.9 loads, the CUDA backend offers its
// fused flash attention as one more candidate of each attention launch
// timed at load (CudaVariants.cpp), checked against the launch's own
// kernel like every other. The graphs are AttentionGraph.h's; here they
// become cuDNN backend descriptors, an execution plan from cuDNN's
// heuristics, and a run on a stream. Nothing of cuDNN is linked.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_LIB_RUNTIME_CUDNNATTENTION_H
#define GPTC_LIB_RUNTIME_CUDNNATTENTION_H

#include "AttentionGraph.h"

#include <map>
#include <memory>
#include <stdexcept>
#include <string>

namespace gptc::rt::cudnn {

/// Why cuDNN cannot do something: not found, a graph its engines do not
/// take, a failed run. The backend drops the candidate and says why.
struct CudnnError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Loads cuDNN once per process ($GPTC_CUDNN_LIBRARY, libcudnn.so.9, then the
/// CUDA toolkit's): its version (91900 for 9.19.0), or throws CudnnError.
int cudnnVersion();

/// Builds every tensor and operation descriptor of `g` and finalizes each,
/// then the operation graph where this cuDNN needs no handle for it
/// (9.8 on); returns how many operations there were. No GPU needed: what a
/// test checks where cuDNN is installed and no GPU is. Throws CudnnError
/// naming the descriptor cuDNN refused.
int checkDescriptors(const attention::AttentionGraph &g);

/// A graph ready to run: a cuDNN handle's execution plan from the first of
/// the heuristics' engine configurations that finalizes on this GPU.
/// Needs the CUDA context current.
class AttentionPlan {
public:
  explicit AttentionPlan(attention::AttentionGraph g);
  ~AttentionPlan();
  AttentionPlan(const AttentionPlan &) = delete;
  AttentionPlan &operator=(const AttentionPlan &) = delete;

  /// Device bytes a run needs beside its operands: cuDNN's workspace, then
  /// the graph's own (AttentionGraph::workspaceBytes).
  int64_t workspaceBytes() const;
  /// "engine 8 of 3 configurations" for the stderr line.
  const std::string &engine() const;
  /// Enqueues one run on `stream` (a CUstream). `operands` binds every
  /// role of the graph but the workspace ones; `workspace` has
  /// workspaceBytes(). Throws CudnnError if cuDNN refuses.
  void run(void *stream, const std::map<attention::GraphRole, void *> &operands,
           void *workspace) const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl;
};

} // namespace gptc::rt::cudnn

#endif // GPTC_LIB_RUNTIME_CUDNNATTENTION_H
