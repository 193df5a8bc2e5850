//===- HostKernels.h - generated CUDA kernels compiled for the CPU -*- C++ -*-===//
//
// The CUDA emitter's kernels as host C++: every kernel source of a Program
// (types.cuh swapped for a small emulation of the CUDA built-ins and of the
// inline PTX: mma.m16n8k16, ldmatrix, cp.async) compiled with the host
// compiler into a shared library, one runner per launch. Each block's
// threads run as coroutines, so barriers, warp shuffles, ballots, shared
// memory and the module-scope scratch of the last-block reductions behave
// as on a GPU, and a race checker sees every access to shared memory and
// to the memory a launch writes (the kernels are compiled with
// -fsanitize=thread's instrumentation; a missing barrier would otherwise
// pass here, where threads run one after another). HostKernelBackend puts that behind rt::Backend, so a whole
// program can be checked launch by launch against the CPU backend, as
// `train_gpt2 --check-kernels` does on a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_UNITTESTS_TARGET_HOSTKERNELS_H
#define GPTC_UNITTESTS_TARGET_HOSTKERNELS_H

#include "gptc/Runtime/Backend.h"
#include "gptc/Runtime/Program.h"
#include "gptc/Target/CUDA/EmitCUDA.h"

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace gptc::test {

/// Which target's code paths the host build takes: Sm90a adds the
/// warpgroup-MMA (wgmma) kernels that NVRTC compiles for sm_90a.
enum class HostTarget { Sm80, Sm90a };

/// The kernels of a Program, compiled for the host.
class HostKernels {
public:
  /// Compiles the kernel sources `p` holds (cuda::emitCUDA wrote them);
  /// ok() says whether that worked, error what the compiler said.
  explicit HostKernels(const rt::Program &p,
                       HostTarget target = HostTarget::Sm80);
  ~HostKernels();
  HostKernels(const HostKernels &) = delete;
  HostKernels &operator=(const HostKernels &) = delete;

  bool ok() const { return handle != nullptr; }
  /// Runs launch `launch` of function `function` over every block of its
  /// grid, in clusters of `cluster` along x (which must divide the grid's
  /// x; 0: the launch's own, Launch::cluster); `pointers` are its inputs',
  /// then its outputs' host addresses. Throws std::runtime_error on a race
  /// within a block (or cluster).
  void run(size_t function, size_t launch, std::vector<void *> pointers,
           unsigned cluster = 0);
  /// run() in the first function.
  void run(size_t launch, std::vector<void *> pointers) {
    run(0, launch, std::move(pointers));
  }
  /// Runs the GEMM-epilogue fallback `name` on a grid of gx x gy blocks,
  /// in clusters of `cluster` blocks along x (emulation/threads.h:
  /// runCluster), which must divide gx. The blocks run one after another,
  /// in blockIdx order, or with `lastFirst` from the last to the first (a
  /// GPU may run them in any order: a kernel whose blocks meet through
  /// global memory should give the same bits both ways).
  void call(const std::string &name, std::vector<uint64_t> args, unsigned gx,
            unsigned gy = 1, unsigned cluster = 1, bool lastFirst = false);
  /// The address of a tensor map (emulation/tma.h's layout) of the bf16
  /// operand at `base` as `map` describes it, kept while this lives: what
  /// the wgmma GEMMs take where the runtime passes the driver's maps.
  /// Throws std::invalid_argument where cuTensorMapEncodeTiled would refuse.
  uint64_t tensorMap(const void *base, const rt::WgmmaOperandMap &map);

  std::string error;

private:
  void *symbol(const std::string &name) const;
  /// Throws std::runtime_error naming the first race (in shared or global
  /// memory) the emulation saw since the last launch (emulation/threads.h,
  /// namespace race).
  void throwOnRaces();

  std::string dir;
  void *handle = nullptr;
  struct alignas(64) MapBytes {
    uint64_t opaque[16];
  };
  std::deque<MapBytes> maps;
};

/// The bf16 attention backward the emitter picks (EmitOptions).
using cuda::AttentionBackward;

/// Its --attention-backward label.
inline const char *backwardName(AttentionBackward backward) {
  return cuda::attentionAlgorithmLabel(backward);
}

/// The forward attention a host run for `target` takes for `chosen`: on
/// Sm90a the mma.sync forwards' warpgroup counterparts (mma128's is
/// wgmma128, the others' wgmma), as sm_90a's programs run; on Sm80 the
/// wgmma forwards' mma.sync ones (wgmma128's is mma128, the others' mma),
/// which their sources fall back to there.
cuda::AttentionForward hostForward(cuda::AttentionForward chosen,
                                   HostTarget target);

/// `opts` with `backward`'s algorithm selected.
cuda::EmitOptions withBackward(cuda::EmitOptions opts,
                               AttentionBackward backward);

/// Emits `p`'s kernels for `target` and returns it, for HostKernels, with
/// the forward attention `target` may run (hostForward).
rt::Program &emitForHost(rt::Program &p, HostTarget target = HostTarget::Sm80,
                         AttentionBackward backward = AttentionBackward::Split);
/// The same with the emitter's other choices (the forward mapped as
/// above).
rt::Program &emitForHost(rt::Program &p, HostTarget target,
                         cuda::EmitOptions opts);

/// rt::Backend over HostKernels: a host arena laid out by the program's
/// memory plan, each generated kernel run from its CUDA source, and the
/// GEMMs (cuBLASLt's on a GPU) on an inner CPU backend, their operands
/// copied across. load() needs the kernel sources (emitForHost); `target`
/// picks the code paths, as for HostKernels.
std::unique_ptr<rt::Backend>
makeHostKernelBackend(HostTarget target = HostTarget::Sm80);

} // namespace gptc::test

#endif // GPTC_UNITTESTS_TARGET_HOSTKERNELS_H
