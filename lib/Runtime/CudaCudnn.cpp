//===- CudaCudnn.cpp - cuDNN's fused attention as launch candidates -------===//
//
// Where an attention launch has variants timed at load (--attention-*
// auto or deterministic), the backend adds cuDNN's fused flash attention
// to its candidates (CudnnAttention.h): timed, and checked against the
// launch's own kernel, like gptc's. GPTC_CUDNN says which:
// - 1 (the default): the forward ("cudnn"), and the backward whose dq is
//   dS·k straight ("cudnn"; the graph cudnn-frontend builds for its
//   deterministic algorithm);
// - all: also the backward that adds dq in float32 sums across key tiles
//   ("cudnn-dq-sums": the fastest cuDNN has, not the same bits every run);
// - 0: none.
// A launch cuDNN cannot take (not bf16, a head dimension not a multiple of
// 8 or over 128, a GPU before sm_80, no libcudnn.so.9, no engine for the
// graph) keeps its own candidates; the stderr line of its timing says why.
// Also here: the trial row dot that lets cuDNN's backward and gptc's agree
// at load (agreeRowDot), the plans not chosen freed after it, and the row
// dot launches that only cuDNN's backward would read, skipped.
//
//===----------------------------------------------------------------------===//

#include "CudaBackendImpl.h"

#ifdef GPTC_HAVE_CUDA_HEADERS

#include "CudnnAttention.h"
#include "gptc/Executor/Kernels.h"

namespace gptc::rt::detail {

using attention::AttentionShape;
using attention::GraphRole;

namespace {

bool isForward(const Launch &l) {
  return l.kernel == "flash_attention_qkv" || l.kernel == "flash_attention";
}
bool isBackward(const Launch &l) {
  return l.kernel == "flash_attention_qkv_grad" ||
         l.kernel == "flash_attention_grad";
}
bool isPacked(const Launch &l) {
  return l.kernel == "flash_attention_qkv" ||
         l.kernel == "flash_attention_qkv_grad";
}

} // namespace

std::vector<LaunchVariant> CudaBackendImpl::cudnnCandidates(const Launch &l) {
  std::vector<LaunchVariant> out;
  if (l.variants.empty() || cudnnPolicy == "0" ||
      (!isForward(l) && !isBackward(l)))
    return out;
  LaunchVariant v;
  v.deviceKernel = kCudnnAttention;
  v.label = "cudnn";
  out.push_back(v);
  if (isBackward(l) && cudnnPolicy == "all") {
    v.label = "cudnn-dq-sums";
    out.push_back(v);
  }
  return out;
}

int CudaBackendImpl::cudnnPlan(const Launch &l, const std::string &label,
                               std::string &why) {
  const size_t operands =
      isForward(l) ? (isPacked(l) ? 1 : 3) : (isPacked(l) ? 4 : 6);
  if (l.inputs.empty() || buffer(l.inputs[0]).dtype != DType::BF16) {
    why = std::string("cuDNN's fused attention is bf16 here, not ") +
          (l.inputs.empty() ? "nothing" : dtypeName(buffer(l.inputs[0]).dtype));
    return -1;
  }
  if (l.inputs.size() < operands || l.outputs.empty()) {
    why = "the launch has " + std::to_string(l.inputs.size()) +
          " operands, not " + std::to_string(operands);
    return -1;
  }
  const Buffer &q = buffer(l.inputs[0]);
  AttentionShape s;
  s.causal = l.ints.count("causal") && l.ints.at("causal") != 0;
  s.scale = l.floats.count("scale") ? float(l.floats.at("scale")) : 1.0f;
  if (isPacked(l)) {
    if (q.shape.size() != 3 || !l.ints.count("num_heads")) {
      why = "qkv is not [B, T, 3C]";
      return -1;
    }
    s.batch = q.shape[0];
    s.queries = s.keys = q.shape[1];
    s.heads = l.ints.at("num_heads");
    const int64_t C = q.shape[2] / 3;
    s.headDim = s.heads > 0 ? C / s.heads : 0;
    s.q = s.k = s.v = attention::packedStrides(s.queries, 3 * C, s.headDim);
    s.out = attention::packedStrides(s.queries, C, s.headDim);
  } else {
    const Buffer &k = buffer(l.inputs[1]);
    if (q.shape.size() != 4 || k.shape.size() != 4) {
      why = "q and k are not [B, H, T, D]";
      return -1;
    }
    s.batch = q.shape[0];
    s.heads = q.shape[1];
    s.queries = q.shape[2];
    s.keys = k.shape[2];
    s.headDim = q.shape[3];
    s.q = s.out = attention::headMajorStrides(s.heads, s.queries, s.headDim);
    s.k = s.v = attention::headMajorStrides(s.heads, s.keys, s.headDim);
  }
  if (s.headDim % 8 != 0 || s.headDim > 128) {
    why = "head dimension " + std::to_string(s.headDim) +
          " (cuDNN's: a multiple of 8 up to 128)";
    return -1;
  }
  if (ccMajor < 8) {
    why = "cuDNN's fused attention needs sm_80 or later";
    return -1;
  }
  char key[256];
  std::snprintf(key, sizeof key, "%s %s B%lld H%lld T%lld S%lld D%lld %d %a",
                l.kernel.c_str(), label.c_str(), (long long)s.batch,
                (long long)s.heads, (long long)s.queries, (long long)s.keys,
                (long long)s.headDim, int(s.causal), double(s.scale));
  if (auto it = cudnnPlanIndex.find(key); it != cudnnPlanIndex.end()) {
    why = cudnnPlans[size_t(it->second)].why;
    return cudnnPlans[size_t(it->second)].plan ? it->second : -1;
  }
  CudnnPlan made;
  try {
    attention::AttentionGraph g =
        isForward(l)
            ? attention::attentionForwardGraph(s)
            : attention::attentionBackwardGraph(s, label == "cudnn-dq-sums");
    made.plan = std::make_unique<cudnn::AttentionPlan>(std::move(g));
    made.bytes = std::max<int64_t>(made.plan->workspaceBytes(), 256);
    check(cu.cuMemAlloc(&made.workspace, size_t(made.bytes)),
          "cuMemAlloc (cuDNN's attention workspace)");
  } catch (const cudnn::CudnnError &e) {
    made.plan.reset();
    made.why = e.what();
  }
  why = made.why;
  const int index = int(cudnnPlans.size());
  cudnnPlans.push_back(std::move(made));
  cudnnPlanIndex[key] = index;
  return cudnnPlans.back().plan ? index : -1;
}

void CudaBackendImpl::agreeRowDot(const Launch &l) {
  const bool packed = isPacked(l);
  const size_t outAt = packed ? 1 : 3, doutAt = packed ? 3 : 5,
               deltaAt = packed ? 4 : 6;
  if (!isBackward(l) || l.inputs.size() <= deltaAt ||
      buffer(l.inputs[deltaAt]).dtype != DType::F32)
    return;
  // The CPU backend's row dot (gpt.attention_row_dot) on the trial values.
  auto tensor = [&](int id) {
    const Buffer &b = buffer(id);
    std::vector<uint8_t> bytes(size_t(b.bytes()));
    download(id, bytes.data());
    exec::HostTensor t = exec::HostTensor::floats(b.shape);
    for (size_t i = 0; i < t.f32.size(); ++i)
      t.f32[i] =
          float(elementValue(&bytes[i * size_t(dtypeBytes(b.dtype))], b.dtype));
    return t;
  };
  const exec::HostTensor delta = exec::attentionRowDot(
      tensor(l.inputs[outAt]), tensor(l.inputs[doutAt]),
      packed && l.ints.count("num_heads") ? l.ints.at("num_heads") : 0);
  if (delta.f32.size() == size_t(buffer(l.inputs[deltaAt]).numel()))
    upload(l.inputs[deltaAt], encodeFloats(delta.f32, DType::F32).data());
}

namespace {
/// Whether cuDNN's plan for l leaves its input `at` unread: the backward's
/// row dot (delta), which its graph computes itself.
bool cudnnIgnores(const Launch &l, size_t at) {
  return isBackward(l) && at == (isPacked(l) ? 4u : 6u);
}
} // namespace

void CudaBackendImpl::skipWhatCudnnIgnores() {
  std::map<std::string, int> skipped; // by kernel, for the line
  for (const Function &f : prog->functions) {
    std::vector<Prepared> &pls = launches[&f];
    for (size_t i = 0; i < f.launches.size(); ++i) {
      const Launch &l = f.launches[i];
      if (l.outputs.empty() || isGemm(l.kernel) || l.stream != 0)
        continue;
      // Temps only: nothing outside this function reads them.
      std::set<int> roots;
      bool temps = true;
      for (int out : l.outputs) {
        roots.insert(prog->root(out));
        temps &= prog->buffers[size_t(prog->root(out))].role == Role::Temp;
      }
      int last = -1;
      bool ignored = temps;
      for (size_t j = 0; j < f.launches.size() && ignored; ++j)
        for (size_t k = 0; j != i && k < f.launches[j].inputs.size(); ++k)
          if (roots.count(prog->root(f.launches[j].inputs[k]))) {
            ignored =
                j > i && pls[j].cudnn >= 0 && cudnnIgnores(f.launches[j], k);
            last = std::max(last, int(j));
          }
      if (ignored && last > int(i)) {
        pls[i].ignoredUpTo = last;
        ++skipped[l.kernel];
      }
    }
  }
  for (const auto &[kernel, count] : skipped)
    std::fprintf(stderr,
                 "gptc: %d %s launch%s skipped: only cuDNN's launches read "
                 "their results, and cuDNN computes them itself\n",
                 count, kernel.c_str(), count == 1 ? "" : "es");
}

void CudaBackendImpl::releaseUnusedCudnnPlans() {
  std::set<int> used;
  for (const auto &[f, prepared] : launches)
    for (const Prepared &pl : prepared)
      used.insert(pl.cudnn);
  for (size_t i = 0; i < cudnnPlans.size(); ++i)
    if (CudnnPlan &p = cudnnPlans[i]; p.plan && !used.count(int(i))) {
      if (p.workspace)
        cu.cuMemFree(p.workspace);
      p.workspace = 0;
      p.bytes = 0;
      p.plan.reset();
      p.why = "not chosen, released";
    }
}

void CudaBackendImpl::runCudnn(const Launch &l, const Prepared &pl,
                               CUstream stream) {
  const CudnnPlan &p = cudnnPlans.at(size_t(pl.cudnn));
  std::map<GraphRole, void *> at;
  auto ptr = [&](int id, int64_t elements = 0) {
    return reinterpret_cast<void *>(address(id) +
                                    CUdeviceptr(elements * 2)); // bf16
  };
  if (isPacked(l)) {
    const int64_t C = buffer(l.inputs[0]).shape[2] / 3;
    const bool fwd = isForward(l);
    const int qkv = l.inputs[0], grad = fwd ? -1 : l.outputs[0];
    at[GraphRole::Q] = ptr(qkv);
    at[GraphRole::K] = ptr(qkv, C);
    at[GraphRole::V] = ptr(qkv, 2 * C);
    if (fwd) {
      at[GraphRole::Out] = ptr(l.outputs[0]);
      at[GraphRole::Lse] = ptr(l.outputs[1]);
    } else {
      at[GraphRole::Out] = ptr(l.inputs[1]);
      at[GraphRole::Lse] = ptr(l.inputs[2]);
      at[GraphRole::Dout] = ptr(l.inputs[3]);
      at[GraphRole::Dq] = ptr(grad);
      at[GraphRole::Dk] = ptr(grad, C);
      at[GraphRole::Dv] = ptr(grad, 2 * C);
    }
  } else {
    at[GraphRole::Q] = ptr(l.inputs[0]);
    at[GraphRole::K] = ptr(l.inputs[1]);
    at[GraphRole::V] = ptr(l.inputs[2]);
    if (isForward(l)) {
      at[GraphRole::Out] = ptr(l.outputs[0]);
      at[GraphRole::Lse] = ptr(l.outputs[1]);
    } else {
      at[GraphRole::Out] = ptr(l.inputs[3]);
      at[GraphRole::Lse] = ptr(l.inputs[4]);
      at[GraphRole::Dout] = ptr(l.inputs[5]);
      at[GraphRole::Dq] = ptr(l.outputs[0]);
      at[GraphRole::Dk] = ptr(l.outputs[1]);
      at[GraphRole::Dv] = ptr(l.outputs[2]);
    }
  }
  try {
    p.plan->run(stream, at, reinterpret_cast<void *>(p.workspace));
  } catch (const cudnn::CudnnError &e) {
    throw CudnnRunError("cuDNN failed in " + pl.label + ": " + e.what());
  }
}

} // namespace gptc::rt::detail

#endif // GPTC_HAVE_CUDA_HEADERS
