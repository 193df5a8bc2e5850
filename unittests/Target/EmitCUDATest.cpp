//===- EmitCUDATest.cpp - every launch kind compiles with NVRTC -----------===//
//
// A hand-built Program with one launch of each kind at GPT-2 124M shapes
// (T=1024, C=768, 12 heads of 64, the padded vocabulary), in bf16 and f32,
// through the CUDA emitter and NVRTC for sm_90a: every kernel compiles and
// the hot ones do not spill. No GPU needed.
//
//===----------------------------------------------------------------------===//

#include "TargetTestUtil.h"

#include "gptc/Runtime/Backend.h"
#include "gptc/Runtime/NVRTC.h"
#include "gptc/Target/CUDA/CompileKernels.h"
#include "gptc/Target/CUDA/EmitCUDA.h"

#include <gtest/gtest.h>

#include <array>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

using namespace gptc;
using namespace gptc::test;
using rt::DType;
using Shape = std::vector<int64_t>;

namespace {

/// A fresh kernel cache for this binary's NVRTC compiles.
FreshKernelCache freshKernelCache;

/// GELU(x + b) as the fuser writes it: two arguments, one result.
exec::ScalarProgram geluBias() {
  ScalarBuilder b(2);
  auto [y, x] = emitGeluOfSum(b);
  return b.finish({y, x});
}

/// p' = p - lr · (m + p · wd): three per-tensor arguments, two scalars.
exec::ScalarProgram adamLike() {
  using exec::Opcode;
  ScalarBuilder b(4); // p, m, lr, wd
  int decay = b.emit(Opcode::Mul, 0, 3);
  int step = b.emit(Opcode::Mul, 2, b.emit(Opcode::Add, 1, decay));
  int p = b.emit(Opcode::Sub, 0, step);
  int m = b.emit(Opcode::Mul, 1, 3);
  return b.finish({p, m});
}

/// One launch of every kind with activations, logits and attention
/// operands of dtype `act`.
rt::Program gpt2Launches(DType act) {
  const int64_t B = 4, T = 1024, C = 768, H = 12, D = 64, V = 50304,
                Vr = 50257;
  Builder b(/*withLocs=*/true);
  DType f32 = DType::F32, i32 = DType::I32;
  int x = b.buf(f32, {B, T, C}), xa = b.buf(act, {B, T, C});
  b.launch("cast", {x}, {xa});
  b.launch("iota", {}, {b.buf(i32, {T})});
  b.launch("transpose", {b.buf(act, {B, T, H, D})}, {b.buf(act, {B, H, T, D})})
      .lists["permutation"] = {0, 2, 1, 3};
  int wte = b.buf(f32, {Vr, C});
  b.launch("pad", {wte}, {b.buf(f32, {V, C})}).ints["value"] = 0;
  int targets = b.buf(i32, {B, T});
  b.launch("pad", {b.buf(i32, {B, 1000})}, {targets}).ints["value"] = -1;
  int logits = b.buf(act, {B, T, V});
  b.launch("slice", {logits}, {b.buf(f32, {B, T, Vr})});
  int qkv = b.buf(f32, {B, T, 3 * C});
  std::vector<int> parts = {b.buf(f32, {B, T, C}), b.buf(f32, {B, T, C}),
                            b.buf(f32, {B, T, C})};
  b.launch("split", {qkv}, parts).ints["axis"] = 2;
  b.launch("concat", parts, {b.buf(f32, {B, T, 3 * C})}).ints["axis"] = 2;
  b.launch("embedding", {wte, targets}, {b.buf(f32, {B, T, C})});
  b.launch("embedding_grad", {x, targets}, {b.buf(f32, {Vr, C})});
  int gamma = b.buf(f32, {C}), beta = b.buf(f32, {C});
  b.launch("layernorm", {x, gamma, beta}, {xa}).floats["epsilon"] = 1e-5;
  b.launch("layernorm_grad", {x, gamma, x},
           {b.buf(f32, {B, T, C}), b.buf(f32, {C}), b.buf(f32, {C})})
      .floats["epsilon"] = 1e-5;
  b.launch("reduce_sum", {x}, {b.buf(f32, {C})});
  b.launch("reduce_sum", {x}, {b.buf(f32, {T, C})});
  b.launch("reduce_sum", {wte}, {b.buf(f32, {})});
  int loss = b.buf(f32, {}), dloss = b.buf(f32, {});
  auto &ce = b.launch("cross_entropy", {logits, targets}, {loss});
  ce.ints["num_classes"] = Vr;
  ce.ints["ignore_index"] = -1;
  auto &ceg = b.launch("cross_entropy_with_grad", {logits, targets, dloss},
                       {loss, b.buf(act, {B, T, V})});
  ceg.ints["num_classes"] = Vr;
  ceg.ints["ignore_index"] = -1;
  int q = b.buf(act, {B, H, T, D}), k = b.buf(act, {B, H, T, D}),
      v = b.buf(act, {B, H, T, D}), o = b.buf(act, {B, H, T, D}),
      lse = b.buf(f32, {B, H, T});
  auto &fa = b.launch("flash_attention", {q, k, v}, {o, lse});
  fa.ints["causal"] = 1;
  fa.floats["scale"] = 0.125;
  int delta = b.rowDot(o, o, {B, H, T});
  auto &fag = b.launch("flash_attention_grad", {q, k, v, o, lse, o, delta},
                       {b.buf(act, {B, H, T, D}), b.buf(act, {B, H, T, D}),
                        b.buf(act, {B, H, T, D})});
  fag.ints["causal"] = 1;
  fag.floats["scale"] = 0.125;
  auto &fe = b.launch("fused_elementwise", {xa, gamma},
                      {b.buf(act, {B, T, C}), b.buf(f32, {B, T, C})});
  fe.body = geluBias();
  // Two tensors updated in place, plus two shared scalars.
  int p0 = b.buf(f32, {C, 3 * C}), p1 = b.buf(f32, {C});
  int m0 = b.buf(f32, {C, 3 * C}), m1 = b.buf(f32, {C});
  int lr = b.buf(f32, {}), wd = b.buf(f32, {});
  auto &mt = b.launch("multi_tensor_elementwise", {p0, p1, m0, m1, lr, wd},
                      {p0, p1, m0, m1});
  mt.ints["num_tensors"] = 2;
  mt.body = adamLike();
  // Attention on GPT-2's packed c_attn output, both directions.
  int packed = b.buf(act, {B, T, 3 * C}), y = b.buf(act, {B, T, C}),
      ylse = b.buf(f32, {B, H, T});
  auto &pa = b.launch("flash_attention_qkv", {packed}, {y, ylse});
  pa.ints = {{"causal", 1}, {"num_heads", H}};
  pa.floats["scale"] = 0.125;
  int ydelta = b.rowDot(y, y, {B, H, T}, H);
  auto &pag = b.launch("flash_attention_qkv_grad",
                       {packed, y, ylse, y, ydelta},
                       {b.buf(act, {B, T, 3 * C})});
  pag.ints = {{"causal", 1}, {"num_heads", H}};
  pag.floats["scale"] = 0.125;
  return b.p;
}

const cuda::KernelResources *find(const std::vector<cuda::KernelResources> &rs,
                                  const std::string &name) {
  for (const cuda::KernelResources &r : rs)
    if (r.name == name)
      return &r;
  return nullptr;
}

void compileAll(DType act, const std::string &arch) {
  rt::Program p = gpt2Launches(act);
  std::ostringstream report;
  std::vector<cuda::KernelResources> rs;
  try {
    rs = compileKernelsReporting(p, arch, report);
  } catch (const rt::DeviceError &e) {
    FAIL() << e.what();
  }
  SCOPED_TRACE(report.str());
  for (const rt::Launch &l : p.functions[0].launches) {
    ASSERT_GE(l.deviceKernel, 0) << l.kernel;
    EXPECT_FALSE(p.kernels[l.deviceKernel].cubin.empty());
    EXPECT_GE(l.block[0], 32u) << l.kernel;
  }
  for (const cuda::KernelResources &r : rs) {
    EXPECT_GT(r.registers, 0) << r.name;
    // The layernorms' denser twins trade registers for a block an SM and
    // may spill: the runtime times them against their own kernels.
    if (r.name.size() > 7 && r.name.rfind("_denser") == r.name.size() - 7) {
      EXPECT_EQ(r.launches, 0) << r.name;
      EXPECT_GT(r.variantLaunches, 0) << r.name;
      continue;
    }
    // The tensor-core attention backward runs 3 blocks an SM and the
    // layernorm gradients 2, each at a small spill (Emitter.h,
    // EmitTemplates.cpp); nothing else spills.
    bool backward = (act == DType::BF16 &&
                     r.name.find("attention") != std::string::npos &&
                     r.name.find("_grad_") != std::string::npos) ||
                    r.name.find("layernorm_grad") != std::string::npos;
    EXPECT_LE(r.spillStores, backward ? 99 : 0) << r.name;
    EXPECT_LE(r.localBytes, backward ? 99 : 0) << r.name;
  }
  for (const char *name :
       {"flash_attention_0", "flash_attention_qkv_0", "flash_attention_qkv_grad_0"}) {
    const cuda::KernelResources *fa = find(rs, name);
    ASSERT_TRUE(fa) << name;
    if (act == DType::BF16)
      EXPECT_GT(fa->sharedBytes, 0) << name; // the tensor-core path stages tiles
  }
}

} // namespace

TEST(EmitCUDA, EveryLaunchGetsAKernelAndDuplicatesShareOne) {
  rt::Program p = gpt2Launches(DType::BF16);
  // A second identical layernorm at another location shares the kernel.
  rt::Launch again = p.functions[0].launches[10];
  ASSERT_EQ(again.kernel, "layernorm");
  again.loc = "elsewhere:1:1";
  p.functions[0].launches.push_back(again);
  cuda::emitCUDA(p, "sm_90a");
  const auto &ls = p.functions[0].launches;
  EXPECT_EQ(ls[10].deviceKernel, ls.back().deviceKernel);
  EXPECT_EQ(p.kernels[ls[10].deviceKernel].fuses.size(), 2u);
  for (const rt::DeviceKernel &k : p.kernels)
    EXPECT_NE(k.source.find("extern \"C\" __global__"), std::string::npos);
  // The forward attention is mma.sync unless wgmma is asked for; then the
  // source picks by the arch NVRTC compiles for.
  ASSERT_EQ(ls[17].kernel, "flash_attention");
  EXPECT_NE(p.kernels[ls[17].deviceKernel].source.find(
                "  attentionForwardMma<"),
            std::string::npos);
  cuda::EmitOptions wgmma;
  wgmma.attentionForward = cuda::AttentionForward::Wgmma;
  cuda::emitCUDA(p, "sm_90a", wgmma);
  EXPECT_NE(p.kernels[ls[17].deviceKernel].source.find(
                "  attentionForwardTensorCores<"),
            std::string::npos);
}

namespace {
/// A launch with no variant but emitCUDA's twins: for the bf16 loss
/// gradient its max-first form (the own kernel labelled "online") and,
/// where `hopper` (sm_90a), its cluster forms (2 and 4 blocks a row in
/// clusters of as many, each with a slice of the row in shared memory);
/// and where `hopper`, for a layernorm gradient its staged form (the own
/// kernel labelled "own"), launched alike in more shared memory.
void expectOnlyTwinVariants(const rt::Launch &l, bool hopper) {
  if (hopper &&
      (l.kernel == "layernorm_grad" || l.kernel == "fused_layernorm_grad")) {
    ASSERT_EQ(l.variants.size(), 1u);
    EXPECT_EQ(l.variant, "own");
    EXPECT_EQ(l.variants[0].label, cuda::kStagedLabel);
    EXPECT_GT(l.variants[0].sharedBytes, l.sharedBytes);
    for (int d = 0; d < 3; ++d) {
      EXPECT_EQ(l.variants[0].grid[d], l.grid[d]);
      EXPECT_EQ(l.variants[0].block[d], l.block[d]);
    }
    return;
  }
  if (l.kernel != "cross_entropy_with_grad") {
    EXPECT_TRUE(l.variants.empty());
    EXPECT_EQ(l.variant, "");
    return;
  }
  ASSERT_EQ(l.variants.size(), hopper ? 3u : 1u);
  EXPECT_EQ(l.variant, cuda::kOnlineLabel);
  EXPECT_EQ(l.variants[0].label, cuda::kMaxFirstLabel);
  EXPECT_EQ(l.variants[0].cluster, 1u);
  if (!hopper)
    return;
  for (uint32_t ctas : {2u, 4u}) {
    const rt::LaunchVariant &v = l.variants[ctas / 2];
    EXPECT_EQ(v.label, ctas == 2 ? cuda::kCluster2Label : cuda::kCluster4Label);
    EXPECT_EQ(v.cluster, ctas);
    EXPECT_EQ(v.grid[0], l.grid[0] * ctas);
    EXPECT_EQ(v.block[0], l.block[0] / ctas);
    // The row's slice, then the pairs: (V·2 / ctas rounded up to 16) + 8·ctas.
    const uint32_t slice = (l.sharedBytes / 16 + ctas - 1) / ctas * 16;
    EXPECT_EQ(v.sharedBytes, slice + 8 * ctas);
  }
}
} // namespace

/// --attention-forward=auto and --attention-backward=auto: each bf16
/// attention launch keeps the default algorithm as its own kernel and gets
/// every other one the arch has as a variant, each exactly the kernel (and
/// launch shape) its own flag gives. Nothing else gets variants (but the
/// bf16 loss gradient its max-first form), and an algorithm that gives a
/// launch the same kernel (float32 attention) is not one.
TEST(EmitCUDA, AutoAttentionCarriesEveryAlgorithmAsAVariant) {
  // Each flag value's algorithm, written out here rather than taken from
  // selectAttentionAlgorithm (the wgmma labels with their direction).
  auto withFlag = [](const std::string &label) {
    using Fwd = cuda::AttentionForward;
    using Bwd = cuda::AttentionBackward;
    static const std::map<std::string, Fwd> forwards = {
        {"mma", Fwd::Mma},
        {"mma128", Fwd::Mma128},
        {"mma2", Fwd::Mma2},
        {"mma-pipe", Fwd::MmaPipe},
        {"wgmma-forward", Fwd::Wgmma},
        {"wgmma-overlap-forward", Fwd::WgmmaOverlap},
        {"wgmma128-forward", Fwd::Wgmma128},
        {"wgmma-k128-forward", Fwd::WgmmaK128},
        {"wgmma-ss-forward", Fwd::WgmmaSs}};
    static const std::map<std::string, Bwd> backwards = {
        {"split", Bwd::Split},
        {"atomic", Bwd::Atomic},
        {"atomic128", Bwd::Atomic128},
        {"wgmma-backward", Bwd::Wgmma},
        {"wgmma-overlap-backward", Bwd::WgmmaOverlap},
        {"wgmma-split-backward", Bwd::WgmmaSplit},
        {"wgmma-split-ss-backward", Bwd::WgmmaSplitSs},
        {"wgmma-ds-backward", Bwd::WgmmaDs},
        {"wgmma-bulk-backward", Bwd::WgmmaBulk},
        {"wgmma-ordered-backward", Bwd::WgmmaOrdered}};
    cuda::EmitOptions o;
    if (auto it = forwards.find(label); it != forwards.end())
      o.attentionForward = it->second;
    else
      o.attentionBackward = backwards.at(label);
    return o;
  };
  cuda::EmitOptions autoBoth;
  autoBoth.forwardVariants = autoBoth.backwardVariants =
      cuda::AttentionVariants::All;
  for (const std::string arch : {"sm_90a", "sm_80"}) {
    SCOPED_TRACE(arch);
    rt::Program p = gpt2Launches(DType::BF16);
    cuda::emitCUDA(p, arch, autoBoth);
    const bool hopper = arch == "sm_90a";
    int attention = 0;
    for (const rt::Launch &l : p.functions[0].launches) {
      SCOPED_TRACE(l.kernel);
      const bool forward = l.kernel == "flash_attention" ||
                           l.kernel == "flash_attention_qkv";
      const bool backward = l.kernel == "flash_attention_grad" ||
                            l.kernel == "flash_attention_qkv_grad";
      if (!forward && !backward) {
        expectOnlyTwinVariants(l, hopper);
        continue;
      }
      ++attention;
      std::vector<std::string> labels;
      for (const rt::LaunchVariant &v : rt::launchCandidates(l))
        labels.push_back(v.label);
      std::vector<std::string> expected =
          forward ? std::vector<std::string>{"mma", "mma128", "mma2"}
                  : std::vector<std::string>{"split", "atomic", "atomic128"};
      if (hopper)
        expected.insert(expected.end(), {"wgmma", "wgmma-overlap"});
      if (forward) // (last: the kernels' numbers in scripts stay)
        expected.push_back("mma-pipe");
      if (hopper && forward)
        expected.insert(expected.end(), {"wgmma128", "wgmma-k128", "wgmma-ss"});
      if (hopper && backward)
        expected.insert(expected.end(),
                        {"wgmma-split", "wgmma-split-ss", "wgmma-ds",
                         "wgmma-bulk", "wgmma-ordered"});
      EXPECT_EQ(labels, expected);
      std::set<int> kernels;
      for (const rt::LaunchVariant &v : rt::launchCandidates(l)) {
        kernels.insert(v.deviceKernel);
        rt::Launch alone = l;
        const std::string flag =
            v.label.rfind("wgmma", 0) == 0
                ? v.label + (forward ? "-forward" : "-backward")
                : v.label;
        const rt::DeviceKernel &k = p.kernels[v.deviceKernel];
        EXPECT_EQ(cuda::emitLaunch(p, alone, k.name, withFlag(flag)), k.source)
            << v.label;
        for (int d = 0; d < 3; ++d) {
          EXPECT_EQ(alone.grid[d], v.grid[d]) << v.label;
          EXPECT_EQ(alone.block[d], v.block[d]) << v.label;
        }
        EXPECT_EQ(alone.sharedBytes, v.sharedBytes) << v.label;
      }
      EXPECT_EQ(kernels.size(), labels.size()) << "one kernel each";
    }
    EXPECT_EQ(attention, 4);
  }
  // One direction alone; and float32 attention has one algorithm.
  cuda::EmitOptions autoForward;
  autoForward.forwardVariants = cuda::AttentionVariants::All;
  rt::Program p = gpt2Launches(DType::BF16);
  cuda::emitCUDA(p, "sm_90a", autoForward);
  for (const rt::Launch &l : p.functions[0].launches)
    EXPECT_EQ(
        l.variants.size(),
        l.kernel == "flash_attention" || l.kernel == "flash_attention_qkv" ? 8u
        : l.kernel == "cross_entropy_with_grad" ? 3u // maxfirst, cluster2, 4
        : l.kernel == "layernorm_grad"          ? 1u
                                                : 0u)
        << l.kernel;
  // --attention-backward=deterministic (sm_90a's default): the backwards
  // without float atomics alone, split, wgmma-split and wgmma-split-ss
  // (wgmma-ds, also
  // deterministic, is not among them: its scratch); on sm_80, split
  // alone, so no variants.
  cuda::EmitOptions deterministic;
  deterministic.backwardVariants = cuda::AttentionVariants::Deterministic;
  for (const std::string arch : {"sm_90a", "sm_80"}) {
    rt::Program d = gpt2Launches(DType::BF16);
    cuda::emitCUDA(d, arch, deterministic);
    for (const rt::Launch &l : d.functions[0].launches) {
      if (l.kernel != "flash_attention_grad" &&
          l.kernel != "flash_attention_qkv_grad") {
        SCOPED_TRACE(l.kernel);
        expectOnlyTwinVariants(l, arch == "sm_90a");
        continue;
      }
      std::vector<std::string> labels;
      for (const rt::LaunchVariant &v : rt::launchCandidates(l))
        labels.push_back(v.label);
      if (arch == "sm_80") { // one algorithm: no variants, no label
        EXPECT_TRUE(l.variants.empty());
        EXPECT_EQ(l.variant, "");
        continue;
      }
      const std::vector<std::string> expected = {"split", "wgmma-split",
                                                 "wgmma-split-ss"};
      EXPECT_EQ(labels, expected);
    }
  }
  rt::Program f32 = gpt2Launches(DType::F32);
  cuda::emitCUDA(f32, "sm_90a", autoBoth);
  for (const rt::Launch &l : f32.functions[0].launches) {
    SCOPED_TRACE(l.kernel);
    if (l.kernel == "cross_entropy_with_grad") { // (float32's: one form)
      EXPECT_TRUE(l.variants.empty());
      EXPECT_EQ(l.variant, "");
    } else {
      expectOnlyTwinVariants(l, true);
    }
  }
}

// The loss gradient's cluster forms come with clusters: sm_90 and sm_90a
// on, not sm_89 or sm_80; and NVRTC compiles them for sm_90, whose
// types.cuh has the cluster helpers but not wgmma.
TEST(EmitCUDA, ClusterFormsComeWithClusters) {
  for (const std::string arch : {"sm_80", "sm_89", "sm_90", "sm_90a"}) {
    SCOPED_TRACE(arch);
    rt::Program p = gpt2Launches(DType::BF16);
    cuda::emitCUDA(p, arch);
    int losses = 0;
    for (const rt::Launch &l : p.functions[0].launches)
      if (l.kernel == "cross_entropy_with_grad") {
        ++losses;
        EXPECT_EQ(l.variants.size(), arch.rfind("sm_9", 0) == 0 ? 3u : 1u);
      }
    EXPECT_EQ(losses, 1);
    if (arch != "sm_90")
      continue;
    std::ostringstream report;
    try {
      compileKernelsReporting(p, arch, report);
    } catch (const rt::DeviceError &e) {
      ADD_FAILURE() << e.what();
    }
  }
}

// ptxas spilled some kernels (here: said to have) under the registers
// their blocks an SM leave: each launch of one that declares blocks an SM
// gets the same kernel without them as an "uncapped" variant, launched
// alike; kernels with no cap to drop get none.
TEST(EmitCUDA, ASpilledKernelGetsItsUncappedTwinAsAVariant) {
  for (bool autoBackward : {false, true}) {
    SCOPED_TRACE(autoBackward ? "--attention-backward=auto" : "defaults");
    cuda::EmitOptions opts;
    if (autoBackward)
      opts.backwardVariants = cuda::AttentionVariants::All;
    rt::Program p = gpt2Launches(DType::BF16);
    cuda::emitCUDA(p, "sm_90a", opts);
    // Say every own kernel spilled: those that cap registers get a twin.
    const size_t kernels = p.kernels.size();
    std::vector<bool> spilled(kernels, false);
    for (const rt::Launch &l : p.functions[0].launches)
      if (l.deviceKernel >= 0)
        spilled[size_t(l.deviceKernel)] = true;
    size_t added = cuda::addUncappedVariants(p, "sm_90a", spilled, opts);
    EXPECT_EQ(p.kernels.size(), kernels + added);
    std::set<std::string> twins;
    for (const rt::Launch &l : p.functions[0].launches) {
      SCOPED_TRACE(l.kernel);
      if (l.deviceKernel < 0)
        continue;
      const std::string &ownSource = p.kernels[size_t(l.deviceKernel)].source;
      // Does the own kernel declare blocks an SM? Its entry line says.
      const std::string &name = p.kernels[size_t(l.deviceKernel)].name;
      size_t entry = ownSource.find("\n" + name + "(");
      ASSERT_NE(entry, std::string::npos);
      size_t bounds = ownSource.rfind("__launch_bounds__(", entry);
      const bool declaresBlocks =
          ownSource.find(',', bounds) < ownSource.find(')', bounds);
      if (!declaresBlocks) {
        for (const rt::LaunchVariant &v : l.variants)
          EXPECT_NE(v.label, cuda::kUncappedLabel);
        continue;
      }
      ASSERT_FALSE(l.variants.empty());
      const rt::LaunchVariant &v = l.variants.back();
      EXPECT_EQ(v.label, cuda::kUncappedLabel);
      const rt::DeviceKernel &twin = p.kernels[size_t(v.deviceKernel)];
      EXPECT_EQ(twin.name, name + "_uncapped");
      twins.insert(twin.name);
      // The own kernel's label: an attention algorithm's, else "capped".
      const bool algorithms = autoBackward &&
                              (l.kernel == "flash_attention_grad" ||
                               l.kernel == "flash_attention_qkv_grad");
      EXPECT_EQ(l.variant, algorithms ? "split"
                           : l.kernel == "cross_entropy_with_grad"
                               ? cuda::kOnlineLabel
                           : l.kernel == "layernorm_grad" // (staged twin's)
                               ? "own"
                               : cuda::kCappedLabel);
      cuda::EmitOptions uncapped;
      uncapped.capRegisters = false;
      rt::Launch alone = l;
      EXPECT_EQ(cuda::emitLaunch(p, alone, twin.name, uncapped), twin.source);
      for (int d = 0; d < 3; ++d) {
        EXPECT_EQ(v.grid[d], l.grid[d]);
        EXPECT_EQ(v.block[d], l.block[d]);
      }
      EXPECT_EQ(v.sharedBytes, l.sharedBytes);
      // The same source but for the entry's name and its blocks an SM.
      std::string expected = ownSource;
      for (size_t at; (at = expected.find(name + "(")) != std::string::npos;)
        expected.replace(at, name.size(), twin.name);
      size_t blocks = expected.find(',', expected.rfind("__launch_bounds__("));
      expected.erase(blocks, expected.find(')', blocks) - blocks);
      EXPECT_EQ(twin.source, expected);
    }
    // The layernorm gradient, the cross entropy and every tensor-core
    // attention declare blocks an SM.
    EXPECT_EQ(twins.size(), added);
    for (const char *kind : {"layernorm_grad", "cross_entropy_with_grad",
                             "flash_attention_qkv_0", "flash_attention_qkv_grad"})
      EXPECT_TRUE(std::any_of(twins.begin(), twins.end(),
                              [&](const std::string &n) {
                                return n.find(kind) != std::string::npos;
                              }))
          << kind;
  }
  // Spills for a different kernel list: an internal error, no change.
  rt::Program p = gpt2Launches(DType::BF16);
  cuda::emitCUDA(p, "sm_90a");
  const size_t kernels = p.kernels.size();
  EXPECT_THROW(cuda::addUncappedVariants(
                   p, "sm_90a", std::vector<bool>(kernels + 1, true)),
               cuda::EmitError);
  EXPECT_EQ(p.kernels.size(), kernels);
  // Nothing spilled: nothing changes.
  EXPECT_EQ(cuda::addUncappedVariants(p, "sm_90a",
                                      std::vector<bool>(kernels, false)),
            0u);
  for (const rt::Launch &l : p.functions[0].launches)
    expectOnlyTwinVariants(l, true);
}

namespace {
/// emitCUDA(p, "sm_80") fails with exactly `message`.
void expectEmitError(rt::Program p, const std::string &message) {
  try {
    cuda::emitCUDA(p, "sm_80");
    ADD_FAILURE() << "no error; expected " << message;
  } catch (const cuda::EmitError &e) {
    EXPECT_EQ(e.what(), message);
  }
}
} // namespace

TEST(EmitCUDA, RejectsUnknownArchAndKinds) {
  rt::Program p = gpt2Launches(DType::F32);
  EXPECT_THROW(cuda::emitCUDA(p, "sm_75"), cuda::EmitError);
  EXPECT_THROW(cuda::emitCUDA(p, "compute_90"), cuda::EmitError);
  // A cast that reshapes (the gpt op cannot; a program file could).
  rt::Program reshaping = p;
  rt::Launch &cast = reshaping.functions[0].launches[0];
  ASSERT_EQ(cast.kernel, "cast");
  rt::Buffer &to = reshaping.buffers[cast.outputs[0]];
  to.shape = {to.shape[0] * to.shape[1], to.shape[2]};
  expectEmitError(reshaping, "no CUDA kernel for gpt.cast at test:1:1: "
                             "operand and result shapes differ");
  // Attention gradients without the row dot's delta (gpt-autodiff always
  // writes one).
  for (const char *kind : {"flash_attention_grad", "flash_attention_qkv_grad"}) {
    rt::Program noDelta = p;
    for (rt::Launch &l : noDelta.functions[0].launches)
      if (l.kernel == kind) {
        l.inputs.pop_back();
        expectEmitError(noDelta, "no CUDA kernel for gpt." + std::string(kind) +
                                     " at " + l.loc +
                                     ": no delta operand "
                                     "(gpt.attention_row_dot's result, which "
                                     "gpt-autodiff writes)");
      }
  }
  p.functions[0].launches[0].kernel = "softmax";
  expectEmitError(p, "no CUDA kernel for gpt.softmax at test:1:1: no kernel "
                     "template for this op");
  // More heads than a grid dimension takes: 65536 for the simple kernels'
  // y, 65537 (a prime: groups of one) for the tensor cores' z.
  for (auto [heads, t] : {std::pair{int64_t(65536), DType::F32},
                          std::pair{int64_t(65537), DType::BF16}}) {
    Builder b(/*withLocs=*/true);
    Shape rows = {heads, 64, 64};
    auto &l = b.launch("flash_attention",
                       {b.buf(t, rows), b.buf(t, rows), b.buf(t, rows)},
                       {b.buf(t, rows), b.buf(DType::F32, {heads, 64})});
    l.ints["causal"] = 1;
    expectEmitError(b.p, std::string("no CUDA kernel for gpt.flash_attention "
                                     "at test:1:1: more than 65535 ") +
                             (t == DType::F32 ? "heads (B·H) for the grid's y"
                                              : "groups of heads for the "
                                                "grid's z"));
  }
}

// embedding_grad: dy's offsets are 32-bit, so 2^31 elements or more are
// refused; any row width fits (a block takes a 256-column slice), and the
// grid is the row groups by the slices.
TEST(EmitCUDA, EmbeddingGradLimitsAndGrid) {
  const DType f32 = DType::F32, i32 = DType::I32;
  {
    Builder b(/*withLocs=*/true);
    b.launch("embedding_grad",
             {b.buf(f32, {int64_t(1) << 21, 1024}),
              b.buf(i32, {int64_t(1) << 21})},
             {b.buf(f32, {100, 1024})});
    expectEmitError(b.p, "no CUDA kernel for gpt.embedding_grad at "
                         "test:1:1: dy has 2147483648 elements; the "
                         "kernel's offsets are 32-bit");
  }
  // C = 20000 was refused when a block held whole rows; 50257 rows of it
  // are 1571 groups of up to 32 by 79 slices.
  Builder b(/*withLocs=*/true);
  b.launch("embedding_grad", {b.buf(f32, {64, 20000}), b.buf(i32, {64})},
           {b.buf(f32, {50257, 20000})});
  cuda::emitCUDA(b.p, "sm_80");
  const rt::Launch &l = b.p.functions[0].launches[0];
  EXPECT_EQ(l.grid[0], 1571u * 79u);
  EXPECT_EQ(l.block[0], 128u);
}

// The sorted form (sortEmbeddingIds): sort_ids is one block of 1,024
// threads with its keys and digit counts in dynamic shared memory (16,384
// positions: 64 KiB and 32 KiB); the scatter-add's grid is 32 keys a block
// by 256-column slices, plus, where rows no id hits are written (an
// addend), blocks of 128 rows. Keys that cannot hold the ids, as a program
// file could ask for, are refused in one line naming the launch and its op.
TEST(EmitCUDA, SortedEmbeddingGradLaunchesAndLimits) {
  const DType f32 = DType::F32, i32 = DType::I32;
  Builder b(/*withLocs=*/true);
  int ids = b.buf(i32, {16, 1024}), keys = b.buf(i32, {16384});
  b.launch("sort_ids", {ids}, {keys}).ints = {{"rows", 50257},
                                              {"position_bits", 14}};
  int dy = b.buf(f32, {16384, 768}), add = b.buf(f32, {50257, 768}),
      table = b.buf(f32, {50257, 768});
  b.launch("embedding_grad", {dy, keys, table}, {table}).ints = {
      {"position_bits", 14}, {"accumulate", 1}};
  b.launch("embedding_grad", {dy, keys, add}, {b.buf(f32, {50257, 768})})
      .ints = {{"position_bits", 14}};
  rt::Program ok = b.p;
  cuda::emitCUDA(ok, "sm_90a");
  const auto &ls = ok.functions[0].launches;
  EXPECT_EQ(ls[0].grid[0], 1u);
  EXPECT_EQ(ls[0].block[0], 1024u);
  EXPECT_EQ(ls[0].sharedBytes, 16384u * 4 + 16 * 1024 * 2);
  EXPECT_EQ(ls[1].grid[0], 512u * 3);          // in place: windows alone
  EXPECT_EQ(ls[2].grid[0], (512u + 393u) * 3); // and the rows' blocks
  EXPECT_EQ(ls[1].block[0], 128u);

  rt::Program narrow = b.p;
  narrow.functions[0].launches[0].ints["position_bits"] = 13;
  expectEmitError(narrow, "no CUDA kernel for sort_ids (of "
                          "gpt.embedding_grad) at test:1:1: 16384 ids of a "
                          "table of 50257 rows do not fit keys of 13 "
                          "position bits");
  rt::Program tall = b.p;
  tall.functions[0].launches[0].ints["rows"] = 1 << 17;
  expectEmitError(tall, "no CUDA kernel for sort_ids (of gpt.embedding_grad) "
                        "at test:1:1: 16384 ids of a table of 131072 rows do "
                        "not fit keys of 14 position bits");
  rt::Program unsorted = b.p;
  unsorted.functions[0].launches[1].inputs[1] = ids; // [16, 1024], not keys
  expectEmitError(unsorted, "no CUDA kernel for gpt.embedding_grad at "
                            "test:2:1: sorted ids of 16384 positions and 14 "
                            "position bits do not fit a table of 50257 rows");
}

namespace {
/// The grids of a causal packed attention, forward and backward, at
/// T = 1024 and H heads of 64 (GPT-2 124M: B = 16, H = 12), bf16 (the
/// tensor-core kernels) or float32 (the simple ones).
std::pair<std::array<uint32_t, 3>, std::array<uint32_t, 3>>
attentionGrids(int64_t B, int64_t H, DType t,
               const cuda::EmitOptions &opts = {}) {
  const int64_t T = 1024, C = H * 64;
  Builder b(/*withLocs=*/true);
  int qkv = b.buf(t, {B, T, 3 * C}), dout = b.buf(t, {B, T, C});
  int o = b.buf(t, {B, T, C}), lse = b.buf(DType::F32, {B, H, T});
  b.launch("flash_attention_qkv", {qkv}, {o, lse}).ints = {{"causal", 1},
                                                          {"num_heads", H}};
  int delta = b.rowDot(o, dout, {B, H, T}, H);
  b.launch("flash_attention_qkv_grad", {qkv, o, lse, dout, delta},
           {b.buf(t, {B, T, 3 * C})})
      .ints = {{"causal", 1}, {"num_heads", H}};
  cuda::emitCUDA(b.p, "sm_90a", opts);
  const auto &ls = b.p.functions[0].launches;
  return {{ls[0].grid[0], ls[0].grid[1], ls[0].grid[2]},
          {ls[2].grid[0], ls[2].grid[1], ls[2].grid[2]}};
}
using Grid = std::array<uint32_t, 3>;
} // namespace

// The tensor-core attention grids are (heads of a group, blocks a head,
// groups), taken longest first within a group (attention.cuh's
// blockWork). A group holds the most heads that divide B·H and whose
// shared operands fit 24 MiB: k and v for the forward (256 KiB a head at
// GPT-2's sizes, so 96 of its 192 heads); q, k, v, dout and the row terms
// for the split backward, q, dout, the row terms and dq's float32 sums for
// the atomic one (520 KiB: at most 47, so 32).
TEST(EmitCUDA, AttentionGridsTakeHeadsInGroupsLongestFirst) {
  auto [forward, backward] = attentionGrids(16, 12, DType::BF16);
  EXPECT_EQ(forward, (Grid{96, 16, 2}));
  EXPECT_EQ(backward, (Grid{32, 32, 6})); // 16 dq and 16 dk/dv blocks
  cuda::EmitOptions opts;
  opts.attentionBackward = cuda::AttentionBackward::Atomic;
  EXPECT_EQ(attentionGrids(16, 12, DType::BF16, opts).second, (Grid{32, 16, 6}));
  opts.attentionBackward = cuda::AttentionBackward::Atomic128;
  opts.attentionForward = cuda::AttentionForward::Mma128;
  std::tie(forward, backward) = attentionGrids(16, 12, DType::BF16, opts);
  EXPECT_EQ(forward, (Grid{96, 8, 2}));
  EXPECT_EQ(backward, (Grid{32, 8, 6}));
  opts.attentionForward = cuda::AttentionForward::Mma2; // 4 warps of 32 rows
  EXPECT_EQ(attentionGrids(16, 12, DType::BF16, opts).first,
            (Grid{96, 8, 2}));
  // B·H = 16·97: groups of 16 heads, the largest divisor up to 47 (or 96).
  std::tie(forward, backward) = attentionGrids(16, 97, DType::BF16);
  EXPECT_EQ(forward, (Grid{16, 16, 97}));
  EXPECT_EQ(backward, (Grid{16, 32, 97}));
  // A prime count of heads over the limit: groups of one, head by head.
  std::tie(forward, backward) = attentionGrids(1, 97, DType::BF16);
  EXPECT_EQ(forward, (Grid{1, 16, 97}));
  EXPECT_EQ(backward, (Grid{1, 32, 97}));
  // The simple kernels keep (blocks a head, heads).
  std::tie(forward, backward) = attentionGrids(16, 12, DType::F32);
  EXPECT_EQ(forward, (Grid{16, 192, 1}));
  EXPECT_EQ(backward, (Grid{32, 192, 1}));
}

TEST(EmitCUDA, Bf16KernelsCompileForSm90a) {
  if (!haveNvrtc())
    GTEST_SKIP() << "no NVRTC";
  compileAll(DType::BF16, "sm_90a");
}

TEST(EmitCUDA, F32KernelsCompileForSm80) {
  if (!haveNvrtc())
    GTEST_SKIP() << "no NVRTC";
  compileAll(DType::F32, "sm_80");
}

// The kernel report's blocks an SM, as the CUDA occupancy calculator
// counts them (figures for H100 kernels checked against ncu's theoretical
// occupancy in the twelfth session: 2 blocks at 216 registers).
TEST(CompileKernels, ResidentBlocksAsTheOccupancyCalculatorCounts) {
  // The split attention backward: registers allow 12 warps, 3 blocks.
  EXPECT_EQ(cuda::residentBlocks("sm_90a", 128, 168, 37888), 3);
  // Uncapped at 216 registers: 9 warps, 2 blocks (ncu: 12.5%).
  EXPECT_EQ(cuda::residentBlocks("sm_90a", 128, 216, 37888), 2);
  // GPT-2 large's layernorm gradient: 2 blocks capped (shared memory and
  // registers both), 1 uncapped at 239 registers (7680 a warp).
  EXPECT_EQ(cuda::residentBlocks("sm_90a", 256, 128, 81936), 2);
  EXPECT_EQ(cuda::residentBlocks("sm_90a", 256, 239, 81936), 1);
  // Shared memory: 3 blocks of 74 KiB and 1 KiB each fit an H100 SM's
  // 228 KiB, of 76 KiB 2; an A100's 164 KiB 2.
  EXPECT_EQ(cuda::residentBlocks("sm_90", 128, 32, 76 * 1024), 2);
  EXPECT_EQ(cuda::residentBlocks("sm_90", 128, 32, 74 * 1024), 3);
  EXPECT_EQ(cuda::residentBlocks("sm_80", 128, 32, 74 * 1024), 2);
  // Threads: 1536 an SM on sm_86 and sm_89; blocks: 32 at most on sm_90.
  EXPECT_EQ(cuda::residentBlocks("sm_86", 256, 32, 0), 6);
  EXPECT_EQ(cuda::residentBlocks("sm_89", 1024, 32, 0), 1);
  EXPECT_EQ(cuda::residentBlocks("sm_90a", 32, 16, 0), 32);
  EXPECT_EQ(cuda::residentBlocks("sm_86", 32, 16, 0), 16);
  // No table, or no launch to size it: -1.
  EXPECT_EQ(cuda::residentBlocks("sm_75", 128, 32, 0), -1);
  EXPECT_EQ(cuda::residentBlocks("sm_90a", 0, 32, 0), -1);
}

// The registers one block more needs, which the kernel report gives each
// register-bound kernel: 256 a warp at a time, so multiples of 8 a thread.
TEST(CompileKernels, RegistersForBlocksIsTheMostThatFit) {
  // The wgmma forward (128 threads, 40 KiB): 5 blocks at 96 registers
  // (20 warps of 3,072), not 97 (3,328); 4 at 128; 6 never (shared memory).
  EXPECT_EQ(cuda::registersForBlocks("sm_90a", 128, 40960, 5), 96);
  EXPECT_EQ(cuda::residentBlocks("sm_90a", 128, 97, 40960), 4);
  EXPECT_EQ(cuda::registersForBlocks("sm_90a", 128, 40960, 4), 128);
  EXPECT_EQ(cuda::registersForBlocks("sm_90a", 128, 40960, 6), -1);
  // One block of 1024 threads: up to 64 registers; more threads than an
  // SM holds, or no table: -1.
  EXPECT_EQ(cuda::registersForBlocks("sm_90a", 1024, 0, 1), 64);
  EXPECT_EQ(cuda::registersForBlocks("sm_86", 1024, 0, 2), -1);
  EXPECT_EQ(cuda::registersForBlocks("sm_75", 128, 0, 1), -1);
}

TEST(NVRTC, ParsesPtxasResourceLines) {
  rt::CompiledKernel k;
  rt::parsePtxasInfo(
      "ptxas info    : Function properties for k\n"
      "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 "
      "bytes spill loads\n"
      "ptxas info    : Used 40 registers, used 1 barriers, 8192 bytes smem\n",
      k);
  EXPECT_EQ(k.registers, 40);
  EXPECT_EQ(k.sharedBytes, 8192);
  EXPECT_EQ(k.localBytes, 16);
  EXPECT_EQ(k.spillStores, 8);
  EXPECT_EQ(k.spillLoads, 4);
}
