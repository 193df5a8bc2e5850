//===- EmitCUDA.cpp - CUDA C++ for a Program's launches -------------------===//
//
// The driver: one source per launch (Emitter::run picks the kind's emitter,
// in one of the Emit*.cpp files Emitter.h lists, and prepends the templates
// it needs), identical sources merged into one DeviceKernel.
//
//===----------------------------------------------------------------------===//

#include "Emitter.h"
#include "gptc/Runtime/NVRTC.h"
#include "gptc/Target/CUDA/CompileKernels.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

namespace gptc::cuda {

namespace detail {

namespace {
struct EmbeddedHeader {
  const char *name, *text;
};
#include "KernelSources.inc" // kKernelHeaders[], from kernels/*.cuh
} // namespace

const char *embedded(const std::string &name) {
  for (const EmbeddedHeader &h : kKernelHeaders)
    if (name == h.name)
      return h.text;
  throw EmitError("internal error: no embedded kernel header " + name);
}

std::string Emitter::parameters() const {
  std::set<int> storages;
  bool aliased = false;
  for (int id : l.inputs)
    storages.insert(storageOf(p, id));
  for (int id : l.outputs)
    aliased |= !storages.insert(storageOf(p, id)).second;
  const char *restrict = aliased ? "" : "__restrict__ ";
  std::string s;
  for (size_t i = 0; i < l.inputs.size(); ++i)
    s += (s.empty() ? "" : ", ") + std::string("const ") + tin(i) + " *" +
         restrict + "in" + std::to_string(i);
  for (size_t i = 0; i < l.outputs.size(); ++i)
    s += (s.empty() ? "" : ", ") + std::string(tout(i)) + " *" + restrict +
         "out" + std::to_string(i);
  return s;
}

void Emitter::begin(const std::string &name, int launchBounds,
                    int minBlocks) {
  os << "extern \"C\" __global__ void __launch_bounds__(" << launchBounds;
  if (minBlocks && opts.capRegisters)
    os << ", " << minBlocks;
  os << ")\n" << name << "(" << parameters() << ") {\n  awaitPriorKernels();\n";
}

void Emitter::elementLoop(int64_t n) {
  l.block[0] = 256;
  l.grid[0] = toGrid(ceilDiv(n, 256));
  os << "  for (i64 i = i64(blockIdx.x) * blockDim.x + threadIdx.x; i < "
     << i64Literal(n) << "; i += i64(gridDim.x) * blockDim.x) {\n";
}

void Emitter::digits(const Shape &shape, const std::string &index,
                     const std::string &prefix, const std::string &indent,
                     const std::vector<bool> &needed) {
  // Peel digits from the innermost dimension out to the outermost needed.
  size_t outermost = shape.size();
  for (size_t d = 0; d < shape.size() && outermost == shape.size(); ++d)
    if (shape[d] > 1 && (needed.empty() || needed[d]))
      outermost = d;
  if (outermost == shape.size())
    return;
  os << indent << "i64 rest = " << index << ";\n";
  for (size_t d = shape.size(); d-- > outermost;) {
    if (shape[d] > 1 && (needed.empty() || needed[d]))
      os << indent << "const i64 " << prefix << d << " = rest % " << shape[d]
         << ";\n";
    if (d > outermost)
      os << indent << "rest /= " << shape[d] << ";\n";
  }
}

std::string Emitter::offsetExpr(const Shape &shape, const Shape &strides,
                                const std::string &prefix) {
  std::string e;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1 || strides[d] == 0)
      continue;
    e += (e.empty() ? "" : " + ") + prefix + std::to_string(d);
    if (strides[d] != 1)
      e += " * " + i64Literal(strides[d]);
  }
  return e.empty() ? "0" : e;
}

std::string Emitter::broadcastOffset(const Shape &operand, const Shape &shape,
                                     const std::string &prefix) {
  Shape strides(shape.size(), 0), own = rowMajorStrides(operand);
  size_t offset = shape.size() - operand.size();
  for (size_t i = 0; i < operand.size(); ++i)
    strides[offset + i] = operand[i] == 1 ? 0 : own[i];
  return offsetExpr(shape, strides, prefix);
}

void Emitter::deviceScratch(const std::string &type, const std::string &name,
                            int64_t count) {
  pre << "__device__ ";
  // Arrays 16-byte aligned: the kernels read partial sums four at a time.
  if (count >= 0)
    pre << "__align__(16) " << type << " " << name << "[" << count << "]";
  else
    pre << type << " " << name;
  pre << ";\n";
  scratchBytes += (type == "double" ? 8 : 4) * std::max<int64_t>(count, 1);
}

std::string Emitter::run(const std::string &name) {
  entry = name;
  scratchBytes = 0;
  l.grid[0] = l.grid[1] = l.grid[2] = 1;
  l.block[0] = l.block[1] = l.block[2] = 1;
  l.sharedBytes = 0;
  const std::string &k = l.kernel;
  if (k == "cast")
    emitMap();
  else if (k == "iota")
    emitIota();
  else if (k == "transpose")
    emitTranspose();
  else if (k == "pad")
    emitPad();
  else if (k == "slice")
    emitSlice();
  else if (k == "split")
    emitSplit();
  else if (k == "concat")
    emitConcat();
  else if (k == "embedding")
    emitEmbedding();
  else if (k == "embedding_grad")
    emitEmbeddingGrad();
  else if (k == "sort_ids")
    emitSortIds();
  else if (k == "layernorm")
    emitLayernorm();
  else if (k == "layernorm_grad")
    emitLayernormGrad();
  else if (k == "fused_layernorm")
    emitFusedLayernorm();
  else if (k == "fused_layernorm_grad")
    emitFusedLayernormGrad();
  else if (k == "reduce_sum")
    emitReduceSum();
  else if (k == "attention_bias_grad")
    emitAttentionBiasGrad();
  else if (k == "cross_entropy")
    emitCrossEntropy(false);
  else if (k == "cross_entropy_with_grad")
    emitCrossEntropy(true);
  else if (k == "flash_attention")
    emitFlashAttention(false);
  else if (k == "flash_attention_grad")
    emitFlashAttention(true);
  else if (k == "flash_attention_qkv")
    emitFlashAttentionQKV(false);
  else if (k == "flash_attention_qkv_grad")
    emitFlashAttentionQKV(true);
  else if (k == "attention_row_dot")
    emitAttentionRowDot();
  else if (k == "fused_elementwise")
    emitElementwise(l.body);
  else if (k == "multi_tensor_elementwise")
    emitMultiTensor();
  else if (k == "multi_tensor_reduce")
    emitMultiTensorReduce();
  else
    unsupported("no kernel template for this op");

  std::string src = "// gptc: gpt." + k + (l.loc.empty() ? "" : " at " + l.loc) +
                    "\n";
  src += embedded("types.cuh");
  src += std::string("\n") + embedded("common.cuh");
  for (const std::string &h : headers)
    src += std::string("\n") + embedded(h);
  src += "\n//===--- generated ---===//\n\n" + pre.str() + os.str();
  return src;
}

} // namespace detail

namespace {

/// The name stem of a launch kind's kernels: "layernorm_grad".
std::string stem(const std::string &kind) {
  std::string s;
  for (char c : kind)
    s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return s;
}

/// Sources are generated under this name first, so that launches whose
/// kernels differ only in their source location share one kernel.
const std::string kPlaceholder = "GPTC_KERNEL_NAME";

/// What makes two sources one kernel: all but the first line, which names
/// the op and its location.
std::string sourceKey(const std::string &src) {
  return src.substr(src.find('\n') + 1);
}

/// `text` with every `from` replaced by `to`.
std::string renamed(std::string text, const std::string &from,
                    const std::string &to) {
  for (size_t at = 0; (at = text.find(from, at)) != std::string::npos;
       at += to.size())
    text.replace(at, from.size(), to);
  return text;
}

/// A kernel named `name` from a source emitted under kPlaceholder.
rt::DeviceKernel namedKernel(const std::string &name, const std::string &src,
                             int64_t scratchBytes) {
  rt::DeviceKernel k;
  k.name = name;
  k.source = renamed(src, kPlaceholder, name);
  k.scratchBytes = scratchBytes;
  return k;
}

/// The attention algorithms a launch of `kind` is emitted with when opts
/// asks for variants in its direction: each flag value with the options
/// that emit it, the default first. Empty: the launch's kernel alone.
std::vector<std::pair<std::string, EmitOptions>>
attentionAlgorithms(const std::string &kind, const std::string &arch,
                    const EmitOptions &opts) {
  const bool forward = kind == "flash_attention" ||
                       kind == "flash_attention_qkv";
  const bool backward = kind == "flash_attention_grad" ||
                        kind == "flash_attention_qkv_grad";
  std::vector<std::pair<std::string, EmitOptions>> all;
  const AttentionVariants variants = forward    ? opts.forwardVariants
                                     : backward ? opts.backwardVariants
                                                : AttentionVariants::None;
  if (variants == AttentionVariants::None)
    return all;
  for (const std::string &label : attentionAlgorithmLabels(forward)) {
    if (attentionAlgorithmNeedsSm90a(label) && arch != "sm_90a")
      continue;
    if (variants == AttentionVariants::Deterministic &&
        !attentionAlgorithmIsDeterministicCandidate(forward, label))
      continue;
    EmitOptions o = opts;
    selectAttentionAlgorithm(o, forward, label);
    all.push_back({label, o});
  }
  return all;
}

} // namespace

using namespace detail;

namespace {
// Each direction's algorithms in their labels' order.
constexpr AttentionForward kForwards[] = {
    AttentionForward::Mma,          AttentionForward::Mma128,
    AttentionForward::Mma2,         AttentionForward::Wgmma,
    AttentionForward::WgmmaOverlap, AttentionForward::MmaPipe,
    AttentionForward::Wgmma128,     AttentionForward::WgmmaK128,
    AttentionForward::WgmmaSs};
constexpr AttentionBackward kBackwards[] = {
    AttentionBackward::Split,        AttentionBackward::Atomic,
    AttentionBackward::Atomic128,    AttentionBackward::Wgmma,
    AttentionBackward::WgmmaOverlap, AttentionBackward::WgmmaSplit,
    AttentionBackward::WgmmaSplitSs, AttentionBackward::WgmmaDs,
    AttentionBackward::WgmmaBulk,    AttentionBackward::WgmmaOrdered};

template <typename Algorithm, size_t N>
std::vector<std::string> labelsOf(const Algorithm (&all)[N]) {
  std::vector<std::string> labels;
  for (Algorithm a : all)
    labels.push_back(attentionAlgorithmLabel(a));
  return labels;
}

template <typename Algorithm, size_t N>
bool selectByLabel(Algorithm &chosen, const Algorithm (&all)[N],
                   const std::string &label) {
  for (Algorithm a : all)
    if (label == attentionAlgorithmLabel(a)) {
      chosen = a;
      return true;
    }
  return false;
}
} // namespace

const char *attentionAlgorithmLabel(AttentionForward algorithm) {
  switch (algorithm) {
  case AttentionForward::Mma:
    return "mma";
  case AttentionForward::Mma128:
    return "mma128";
  case AttentionForward::Mma2:
    return "mma2";
  case AttentionForward::Wgmma:
    return "wgmma";
  case AttentionForward::WgmmaOverlap:
    return "wgmma-overlap";
  case AttentionForward::MmaPipe:
    return "mma-pipe";
  case AttentionForward::Wgmma128:
    return "wgmma128";
  case AttentionForward::WgmmaK128:
    return "wgmma-k128";
  case AttentionForward::WgmmaSs:
    return "wgmma-ss";
  }
  return "?";
}

const char *attentionAlgorithmLabel(AttentionBackward algorithm) {
  switch (algorithm) {
  case AttentionBackward::Split:
    return "split";
  case AttentionBackward::Atomic:
    return "atomic";
  case AttentionBackward::Atomic128:
    return "atomic128";
  case AttentionBackward::Wgmma:
    return "wgmma";
  case AttentionBackward::WgmmaOverlap:
    return "wgmma-overlap";
  case AttentionBackward::WgmmaSplit:
    return "wgmma-split";
  case AttentionBackward::WgmmaSplitSs:
    return "wgmma-split-ss";
  case AttentionBackward::WgmmaDs:
    return "wgmma-ds";
  case AttentionBackward::WgmmaBulk:
    return "wgmma-bulk";
  case AttentionBackward::WgmmaOrdered:
    return "wgmma-ordered";
  }
  return "?";
}

const std::vector<std::string> &attentionAlgorithmLabels(bool forward) {
  static const std::vector<std::string> forwards = labelsOf(kForwards);
  static const std::vector<std::string> backwards = labelsOf(kBackwards);
  return forward ? forwards : backwards;
}

bool attentionAlgorithmNeedsSm90a(const std::string &label) {
  return label.rfind("wgmma", 0) == 0;
}

bool attentionAlgorithmIsDeterministic(bool forward, const std::string &label) {
  return forward || label == "split" || label == "wgmma-split" ||
         label == "wgmma-split-ss" || label == "wgmma-ds" ||
         label == "wgmma-ordered";
}

bool attentionAlgorithmIsDeterministicCandidate(bool forward,
                                                const std::string &label) {
  return attentionAlgorithmIsDeterministic(forward, label) &&
         label != "wgmma-ds" && label != "wgmma-ordered";
}

bool selectAttentionAlgorithm(EmitOptions &o, bool forward,
                              const std::string &label) {
  return forward ? selectByLabel(o.attentionForward, kForwards, label)
                 : selectByLabel(o.attentionBackward, kBackwards, label);
}

std::string kernelTemplate(const std::string &name) { return embedded(name); }

std::string emitLaunch(const rt::Program &p, Launch &launch,
                       const std::string &name, const EmitOptions &opts) {
  return Emitter(p, launch, opts).run(name);
}

namespace {
/// What a twin may launch differently from the own kernel (addTwin).
enum class TwinGeometry {
  Same,           ///< grid, block, shared bytes and cluster
  OwnSharedBytes, ///< its dynamic shared memory
  Own,            ///< all of it (the loss gradient's cluster forms)
};
void addTwin(rt::Program &p, Launch &l, const EmitOptions &options,
             const char *label, const char *ownLabel, const char *change,
             std::map<std::string, int> &bySource,
             TwinGeometry geometry = TwinGeometry::Same);

/// Whether l has a variant labelled `label`.
bool hasVariant(const Launch &l, const char *label) {
  for (const rt::LaunchVariant &v : l.variants)
    if (v.label == label)
      return true;
  return false;
}

/// Whether `arch` ("sm_90a") launches blocks in clusters: sm_90 on.
bool hasClusters(const std::string &arch) {
  return arch.size() >= 5 && std::atoi(arch.c_str() + 3) >= 90;
}
} // namespace

void emitCUDA(rt::Program &p, const std::string &arch,
              const EmitOptions &opts) {
  if (!rt::isSupportedArch(arch))
    throw EmitError("unknown GPU architecture '" + arch +
                    "' (expected sm_80, sm_86, sm_89, sm_90, sm_90a, ...)");
  p.kernels.clear();
  std::map<std::string, int> bySource;
  std::map<std::string, int> perStem;
  // Emits l with `o` (setting its grid, block and shared bytes): the
  // kernel's index, a new one unless another launch has its source.
  auto kernelFor = [&](Launch &l, const EmitOptions &o) {
    Emitter emitter(p, l, o);
    std::string src = emitter.run(kPlaceholder);
    auto [it, added] =
        bySource.try_emplace(sourceKey(src), int(p.kernels.size()));
    if (added)
      p.kernels.push_back(namedKernel(
          stem(l.kernel) + "_" + std::to_string(perStem[l.kernel]++), src,
          emitter.scratchBytes));
    p.kernels[it->second].fuses.push_back(
        rt::launchOp(l) + (l.loc.empty() ? "" : " at " + l.loc));
    return it->second;
  };
  for (rt::Function &f : p.functions)
    for (Launch &l : f.launches) {
      l.deviceKernel = -1;
      l.variant.clear();
      l.variants.clear();
      if (rt::isGemm(l.kernel))
        continue; // cuBLASLt, epilogues and all
      std::vector<std::pair<std::string, EmitOptions>> algorithms =
          attentionAlgorithms(l.kernel, arch, opts);
      if (algorithms.empty()) {
        l.deviceKernel = kernelFor(l, opts);
        continue;
      }
      // The first algorithm is the launch's own kernel; each other that
      // gives another kernel is a variant.
      std::vector<rt::LaunchVariant> candidates;
      for (const auto &[label, o] : algorithms) {
        Launch copy = l;
        copy.variant = label;
        copy.deviceKernel = kernelFor(copy, o);
        bool seen = false;
        for (const rt::LaunchVariant &c : candidates)
          seen |= c.deviceKernel == copy.deviceKernel;
        if (seen)
          p.kernels[copy.deviceKernel].fuses.pop_back();
        else
          candidates.push_back(rt::ownVariant(copy));
      }
      rt::setOwnVariant(l, candidates[0]);
      l.variants.assign(candidates.begin() + 1, candidates.end());
      if (l.variants.empty())
        l.variant.clear();
    }
  // The loss gradient's max-first form, timed at load against the online
  // one (which launches have it: those whose source it changes).
  if (!opts.maxFirstCrossEntropy) {
    EmitOptions maxFirst = opts;
    maxFirst.maxFirstCrossEntropy = true;
    std::map<std::string, int> twins;
    for (rt::Function &f : p.functions)
      for (Launch &l : f.launches)
        if (l.kernel == "cross_entropy_with_grad" && l.deviceKernel >= 0)
          addTwin(p, l, maxFirst, kMaxFirstLabel, kOnlineLabel,
                  "in its max-first form", twins);
  }
  // Its cluster forms, on GPUs with clusters: timed at load as well (the
  // launches the max-first form changes, its variant or own kernel).
  if (!opts.crossEntropyCluster && hasClusters(arch)) {
    for (auto [ctas, label] : {std::pair<int, const char *>{2, kCluster2Label},
                               {4, kCluster4Label}}) {
      EmitOptions cluster = opts;
      cluster.maxFirstCrossEntropy = true;
      cluster.crossEntropyCluster = ctas;
      std::map<std::string, int> twins;
      for (rt::Function &f : p.functions)
        for (Launch &l : f.launches)
          if (l.kernel == "cross_entropy_with_grad" && l.deviceKernel >= 0 &&
              (opts.maxFirstCrossEntropy || hasVariant(l, kMaxFirstLabel)))
            addTwin(p, l, cluster, label,
                    opts.maxFirstCrossEntropy ? kMaxFirstLabel : kOnlineLabel,
                    "in its cluster form", twins, TwinGeometry::Own);
    }
  }
  // The layernorm gradients' staged form (the next row's copies under this
  // row's work, in more shared memory), timed at load against the own
  // kernel, where two blocks an SM still fit: on GPUs whose SM holds two
  // of the largest stage (sm_90's 228 KB; not sm_80's 164).
  if (!opts.layernormStaged &&
      residentBlocks(arch, 256, 0, int(kLayernormGradStagedSharedBytes)) >= 2) {
    EmitOptions staged = opts;
    staged.layernormStaged = true;
    std::map<std::string, int> twins;
    for (rt::Function &f : p.functions)
      for (Launch &l : f.launches)
        if ((l.kernel == "layernorm_grad" ||
             l.kernel == "fused_layernorm_grad") &&
            l.deviceKernel >= 0) {
          // (None where the stage does not fit: the same source.)
          addTwin(p, l, staged, kStagedLabel, "own", "staged", twins,
                  TwinGeometry::OwnSharedBytes);
        }
  }
  addGemmFallbackKernels(p, arch);
}

bool isLayernormKernel(const std::string &kind) {
  return kind == "layernorm" || kind == "fused_layernorm" ||
         kind == "layernorm_grad" || kind == "fused_layernorm_grad";
}

namespace {

/// Adds to l a twin of its own kernel emitted with `options` (which only
/// change its launch bounds, or what `geometry` lets differ too), as a
/// variant labelled `label`; the own
/// kernel is labelled `ownLabel` where it had none. The twin's kernel is
/// appended (named own + "_" + label), or shared with an earlier launch's
/// of the same source (`bySource`). Nothing where the source comes out the
/// same as the own kernel's. `change` says what differs, for the error if
/// the launch's geometry moved.
void addTwin(rt::Program &p, Launch &l, const EmitOptions &options,
             const char *label, const char *ownLabel, const char *change,
             std::map<std::string, int> &bySource, TwinGeometry geometry) {
  const int own = l.deviceKernel;
  Launch copy = l;
  Emitter emitter(p, copy, options);
  std::string src = emitter.run(kPlaceholder);
  const rt::DeviceKernel &ownKernel = p.kernels[size_t(own)];
  if (sourceKey(src) ==
      renamed(sourceKey(ownKernel.source), ownKernel.name, kPlaceholder))
    return;
  if (geometry != TwinGeometry::Own &&
      (!std::equal(copy.grid, copy.grid + 3, l.grid) ||
       !std::equal(copy.block, copy.block + 3, l.block) ||
       copy.cluster != l.cluster ||
       (geometry == TwinGeometry::Same && copy.sharedBytes != l.sharedBytes)))
    throw EmitError("internal error: " + l.kernel + " launches differently " +
                    change);
  auto [it, added] =
      bySource.try_emplace(sourceKey(src), int(p.kernels.size()));
  if (added)
    p.kernels.push_back(namedKernel(ownKernel.name + "_" + label, src,
                                    emitter.scratchBytes));
  p.kernels[size_t(it->second)].fuses.push_back(
      rt::launchOp(l) + (l.loc.empty() ? "" : " at " + l.loc));
  if (l.variant.empty())
    l.variant = ownLabel;
  rt::LaunchVariant v = rt::ownVariant(copy); // (its geometry)
  v.label = label;
  v.deviceKernel = it->second;
  l.variants.push_back(v);
}

/// Checks that `perKernel` has one entry a kernel of p.
template <typename T>
void expectPerKernel(const rt::Program &p, const std::vector<T> &perKernel,
                     const char *what) {
  if (perKernel.size() != p.kernels.size())
    throw EmitError("internal error: " + std::string(what) + " of " +
                    std::to_string(perKernel.size()) + " kernels for " +
                    std::to_string(p.kernels.size()));
}

} // namespace

size_t addDenserVariants(rt::Program &p, const std::string &arch,
                         const std::vector<int> &blocks,
                         const EmitOptions &opts) {
  expectPerKernel(p, blocks, "denser blocks");
  const size_t before = p.kernels.size();
  (void)arch; // (the layernorms have one algorithm on every arch)
  std::map<std::string, int> bySource; // the new kernels'
  for (rt::Function &f : p.functions)
    for (Launch &l : f.launches) {
      const int own = l.deviceKernel;
      if (own < 0 || !isLayernormKernel(l.kernel) || blocks[size_t(own)] <= 0)
        continue;
      EmitOptions denser = opts;
      denser.layernormBlocks = blocks[size_t(own)];
      addTwin(p, l, denser, kDenserLabel, "own", "at more blocks an SM",
              bySource);
    }
  return p.kernels.size() - before;
}

size_t addUncappedVariants(rt::Program &p, const std::string &arch,
                           const std::vector<bool> &spilled,
                           const EmitOptions &opts) {
  expectPerKernel(p, spilled, "spills");
  const size_t before = p.kernels.size();
  std::map<std::string, int> bySource; // the new kernels'
  for (rt::Function &f : p.functions)
    for (Launch &l : f.launches) {
      const int own = l.deviceKernel;
      if (own < 0 || !spilled[size_t(own)])
        continue;
      // The options the own kernel was emitted with: an attention
      // launch's first algorithm, else opts.
      std::vector<std::pair<std::string, EmitOptions>> algorithms =
          attentionAlgorithms(l.kernel, arch, opts);
      EmitOptions uncapped = algorithms.empty() ? opts : algorithms[0].second;
      uncapped.capRegisters = false;
      // (Without a cap to drop, the source is the own kernel's: no twin.)
      addTwin(p, l, uncapped, kUncappedLabel, kCappedLabel,
              "without its register cap", bySource);
    }
  return p.kernels.size() - before;
}

} // namespace gptc::cuda
