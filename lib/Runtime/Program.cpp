//===- Program.cpp - the kernel-level training program --------------------===//
//
// The small accessors of gptc/Runtime/Program.h. No MLIR here.
//
//===----------------------------------------------------------------------===//

#include "gptc/Runtime/Program.h"
#include "gptc/Executor/Precision.h"  // bf16BitsOf, halfBitsOf
#include "gptc/Formats/Safetensors.h" // bf16ToFloat, halfToFloat

#include <algorithm>
#include <cstring>

namespace gptc::rt {

const char *dtypeName(DType t) {
  switch (t) {
  case DType::F32:
    return "f32";
  case DType::BF16:
    return "bf16";
  case DType::F16:
    return "f16";
  case DType::I32:
    return "i32";
  }
  return "?";
}

int64_t dtypeBytes(DType t) {
  return t == DType::BF16 || t == DType::F16 ? 2 : 4;
}

double elementValue(const uint8_t *at, DType t) {
  switch (t) {
  case DType::F32: {
    float x;
    std::memcpy(&x, at, 4);
    return x;
  }
  case DType::I32: {
    int32_t x;
    std::memcpy(&x, at, 4);
    return x;
  }
  case DType::BF16:
  case DType::F16: {
    uint16_t x;
    std::memcpy(&x, at, 2);
    return t == DType::BF16 ? bf16ToFloat(x) : halfToFloat(x);
  }
  }
  return 0;
}

std::vector<uint8_t> encodeFloats(const std::vector<float> &v, DType t) {
  std::vector<uint8_t> bytes(v.size() * size_t(dtypeBytes(t)));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (t) {
    case DType::F32:
      std::memcpy(&bytes[4 * i], &v[i], 4);
      break;
    case DType::I32: {
      int32_t x = int32_t(v[i]);
      std::memcpy(&bytes[4 * i], &x, 4);
      break;
    }
    case DType::BF16: {
      uint16_t x = exec::bf16BitsOf(v[i]);
      std::memcpy(&bytes[2 * i], &x, 2);
      break;
    }
    case DType::F16: {
      uint16_t x = exec::halfBitsOf(v[i]);
      std::memcpy(&bytes[2 * i], &x, 2);
      break;
    }
    }
  }
  return bytes;
}

std::vector<uint8_t> paramCopyBytes(const Buffer &copy, const float *param,
                                    const std::vector<int64_t> &paramShape) {
  exec::HostTensor p = exec::HostTensor::floats(paramShape);
  std::copy(param, param + p.numel(), p.f32.begin());
  exec::StorageKind kind = copy.dtype == DType::BF16  ? exec::StorageKind::BF16
                           : copy.dtype == DType::F16 ? exec::StorageKind::F16
                                                      : exec::StorageKind::F32;
  return encodeFloats(exec::paramCopy(p, copy.shape, kind).f32, copy.dtype);
}

std::vector<uint32_t> dynamicSharedBytes(const Program &p) {
  std::vector<uint32_t> bytes(p.kernels.size(), 0);
  for (size_t k = 0; k < p.kernels.size(); ++k)
    bytes[k] = gemmFallbackSharedBytes(p.kernels[k].name);
  for (const Function &f : p.functions)
    for (const Launch &l : f.launches)
      for (const LaunchVariant &v : launchCandidates(l))
        if (v.deviceKernel >= 0 && size_t(v.deviceKernel) < bytes.size())
          bytes[v.deviceKernel] = std::max(bytes[v.deviceKernel], v.sharedBytes);
  return bytes;
}

namespace {
/// The kernel and launch shape, from a Launch or LaunchVariant to another.
template <typename To, typename From>
void copyKernelChoice(To &to, const From &from) {
  to.deviceKernel = from.deviceKernel;
  for (int d = 0; d < 3; ++d) {
    to.grid[d] = from.grid[d];
    to.block[d] = from.block[d];
  }
  to.sharedBytes = from.sharedBytes;
  to.cluster = from.cluster;
}
} // namespace

LaunchVariant ownVariant(const Launch &l) {
  LaunchVariant v;
  v.label = l.variant;
  copyKernelChoice(v, l);
  return v;
}

void setOwnVariant(Launch &l, const LaunchVariant &v) {
  l.variant = v.label;
  copyKernelChoice(l, v);
}

std::vector<LaunchVariant> launchCandidates(const Launch &l) {
  std::vector<LaunchVariant> all{ownVariant(l)};
  all.insert(all.end(), l.variants.begin(), l.variants.end());
  return all;
}

bool isGemm(const std::string &kernel) {
  return kernel == "matmul" || kernel == "matmul_epilogue" ||
         kernel == "matmul_gelu_grad" || kernel == "matmul_bias_grad";
}

LaunchCost launchCost(const Program &p, const Launch &l) {
  LaunchCost c;
  for (int id : l.inputs)
    c.bytes += p.buffers.at(id).bytes();
  // A reduction of a corner (gpt.reduce_sum's) reads only the corner.
  if (auto corner = l.lists.find("corner");
      l.kernel == "reduce_sum" && corner != l.lists.end() &&
      !l.inputs.empty()) {
    const Buffer &x = p.buffers.at(l.inputs[0]);
    int64_t elements = 1;
    for (int64_t d : corner->second)
      elements *= d;
    c.bytes += elements * dtypeBytes(x.dtype) - x.bytes();
  }
  // c_attn's bias gradient reads dq, the first third of each row of dqkv.
  if (l.kernel == "attention_bias_grad" && !l.inputs.empty()) {
    const Buffer &dqkv = p.buffers.at(l.inputs[0]);
    c.bytes -= dqkv.bytes() - dqkv.bytes() / 3;
  }
  for (int id : l.outputs)
    c.bytes += p.buffers.at(id).bytes();
  // The scatter-add in place (dy, ids, the table): at most one row of the
  // table read and written a position.
  if (l.kernel == "embedding_grad" && accumulates(l) && l.inputs.size() == 3 &&
      l.outputs.size() == 1) {
    const Buffer &table = p.buffers.at(l.outputs[0]);
    const int64_t positions = p.buffers.at(l.inputs[1]).numel();
    if (table.shape.size() == 2 && positions < table.shape[0])
      c.bytes -= 2 * (table.shape[0] - positions) * table.shape[1] *
                 dtypeBytes(table.dtype);
  }
  auto flag = [&](const char *name) {
    auto it = l.ints.find(name);
    return it != l.ints.end() && it->second != 0;
  };
  if (isGemm(l.kernel) && l.inputs.size() >= 2 && !l.outputs.empty()) {
    const std::vector<int64_t> &a = p.buffers.at(l.inputs[0]).shape;
    if (a.size() >= 2) {
      int64_t k = flag("transpose_a") ? a[a.size() - 2] : a.back();
      c.flops = 2.0 * double(p.buffers.at(l.outputs[0]).numel()) * double(k);
    }
    return c;
  }
  // Heads, query rows T, key rows S and head size D.
  double heads = 0, T = 0, S = 0, D = 0;
  bool forward = l.kernel == "flash_attention" ||
                 l.kernel == "flash_attention_qkv";
  bool backward = l.kernel == "flash_attention_grad" ||
                  l.kernel == "flash_attention_qkv_grad";
  if (!(forward || backward) || l.inputs.empty())
    return c;
  const std::vector<int64_t> &x = p.buffers.at(l.inputs[0]).shape;
  if (l.kernel == "flash_attention" || l.kernel == "flash_attention_grad") {
    if (x.size() < 2 || l.inputs.size() < 2)
      return c;
    const std::vector<int64_t> &k = p.buffers.at(l.inputs[1]).shape;
    T = double(x[x.size() - 2]);
    D = double(x.back());
    S = k.size() >= 2 ? double(k[k.size() - 2]) : 0;
    heads = double(p.buffers.at(l.inputs[0]).numel()) / (T * D);
  } else {
    auto h = l.ints.find("num_heads");
    if (x.size() != 3 || h == l.ints.end() || h->second <= 0)
      return c;
    T = S = double(x[1]);
    heads = double(x[0]) * double(h->second);
    D = double(x[2]) / 3.0 / double(h->second);
  }
  c.flops = 4.0 * heads * T * S * D * (flag("causal") ? 0.5 : 1.0) *
            (backward ? 2.5 : 1.0);
  return c;
}

std::string gemmFallbackKernel(GemmFallback kind, DType t) {
  const char *stem = "";
  switch (kind) {
  case GemmFallback::Bias:
    stem = "gemm_fallback_bias_";
    break;
  case GemmFallback::GeluGrad:
    stem = "gemm_fallback_gelu_grad_";
    break;
  case GemmFallback::Gelu:
    stem = "gemm_fallback_gelu_";
    break;
  case GemmFallback::ColumnPartials:
    stem = "gemm_fallback_column_partials_";
    break;
  case GemmFallback::ColumnSums:
    stem = "gemm_fallback_column_sums_";
    break;
  case GemmFallback::WgmmaBiasGelu:
    stem = "gemm_wgmma_bias_gelu_";
    break;
  case GemmFallback::WgmmaGeluGrad:
    stem = "gemm_wgmma_gelu_grad_";
    break;
  case GemmFallback::WgmmaWideBiasGelu:
    stem = "gemm_wgmma_wide_bias_gelu_";
    break;
  case GemmFallback::WgmmaWideGeluGrad:
    stem = "gemm_wgmma_wide_gelu_grad_";
    break;
  case GemmFallback::WgmmaGeluGradBias:
    stem = "gemm_wgmma_gelu_grad_bias_";
    break;
  case GemmFallback::WgmmaWideGeluGradBias:
    stem = "gemm_wgmma_wide_gelu_grad_bias_";
    break;
  case GemmFallback::WgmmaPlain:
    stem = "gemm_wgmma_plain_";
    break;
  case GemmFallback::WgmmaWidePlain:
    stem = "gemm_wgmma_wide_plain_";
    break;
  case GemmFallback::WgmmaBias:
    stem = "gemm_wgmma_bias_";
    break;
  case GemmFallback::WgmmaWideBias:
    stem = "gemm_wgmma_wide_bias_";
    break;
  case GemmFallback::WgmmaPairedBiasGelu:
    stem = "gemm_wgmma_paired_bias_gelu_";
    break;
  case GemmFallback::WgmmaPairedGeluGrad:
    stem = "gemm_wgmma_paired_gelu_grad_";
    break;
  case GemmFallback::WgmmaPairedGeluGradBias:
    stem = "gemm_wgmma_paired_gelu_grad_bias_";
    break;
  case GemmFallback::WgmmaWeightGrad:
    stem = "gemm_wgmma_weight_grad_";
    break;
  case GemmFallback::WgmmaWideWeightGrad:
    stem = "gemm_wgmma_wide_weight_grad_";
    break;
  case GemmFallback::WgmmaPairedWeightGrad:
    stem = "gemm_wgmma_paired_weight_grad_";
    break;
  }
  return std::string(stem) + dtypeName(t);
}

namespace {
/// wgmmaGemmFit's weight gradients: a matmul with transpose_a, a [k, m]
/// and b [k, n] bf16 (2-D, as the kernel level's views of the tokens give
/// them), the result float32 [m, n], and with accumulate its old value [m,
/// n] last; or a matmul_bias_grad's, whose bias gradient [n] (b's column
/// sums) the runtime's column-sum kernels add after it.
std::optional<WgmmaGemmFit> weightGradFit(const Program &p, const Launch &l,
                                          bool transposeB) {
  const size_t inputs = accumulates(l) ? 3 : 2;
  const bool biasGrad = l.kernel == "matmul_bias_grad";
  if ((l.kernel != "matmul" && !biasGrad) || transposeB ||
      l.inputs.size() != inputs || l.outputs.size() != (biasGrad ? 2u : 1u))
    return std::nullopt;
  const Buffer &a = p.buffers.at(l.inputs[0]), &b = p.buffers.at(l.inputs[1]),
               &out = p.buffers.at(l.outputs[0]);
  if (a.dtype != DType::BF16 || b.dtype != DType::BF16 ||
      out.dtype != DType::F32 || a.shape.size() != 2 || b.shape.size() != 2)
    return std::nullopt;
  WgmmaGemmFit fit{};
  fit.kind = GemmFallback::WgmmaWeightGrad;
  fit.m = a.shape.back();
  fit.n = b.shape.back();
  if (fit.m <= 0 || fit.n <= 0 || fit.m % 128 != 0 || fit.n % 128 != 0)
    return std::nullopt;
  fit.k = a.numel() / fit.m;
  if (fit.k <= 0 || fit.k % 64 != 0 || b.numel() != fit.k * fit.n ||
      out.numel() != fit.m * fit.n ||
      fit.m / 128 * (fit.n / 128) * 4 > kWeightGradCounters ||
      (biasGrad && p.buffers.at(l.outputs[1]).numel() != fit.n))
    return std::nullopt;
  fit.wide = fit.n % 256 == 0;
  fit.paired = fit.wide && fit.m % 256 == 0;
  if (inputs == 3) {
    const Buffer &old = p.buffers.at(l.inputs[2]);
    if (old.dtype != DType::F32 || old.numel() != fit.m * fit.n)
      return std::nullopt;
  }
  return fit;
}
} // namespace

std::optional<WgmmaGemmFit> wgmmaGemmFit(const Program &p, const Launch &l) {
  auto flag = [&](const char *name) {
    auto it = l.ints.find(name);
    return it != l.ints.end() && it->second != 0;
  };
  if (flag("transpose_a"))
    return weightGradFit(p, l, flag("transpose_b"));
  if (accumulates(l))
    return std::nullopt;
  WgmmaGemmFit fit{};
  const bool plain = l.kernel == "matmul" && l.inputs.size() == 2;
  if (!plain && l.inputs.size() != 3)
    return std::nullopt;
  if (plain && l.outputs.size() == 1 && flag("transpose_b"))
    fit.kind = GemmFallback::WgmmaPlain;
  else if (l.kernel == "matmul_epilogue" && flag("gelu") &&
           l.outputs.size() == 2 && !flag("transpose_b"))
    fit.kind = GemmFallback::WgmmaBiasGelu;
  else if (l.kernel == "matmul_epilogue" && !flag("gelu") &&
           l.outputs.size() == 1 && !flag("transpose_b"))
    fit.kind = GemmFallback::WgmmaBias;
  else if (l.kernel == "matmul_gelu_grad" && l.outputs.size() == 1 &&
           flag("transpose_b"))
    fit.kind = GemmFallback::WgmmaGeluGrad;
  else if (l.kernel == "matmul_gelu_grad" && l.outputs.size() == 2 &&
           flag("transpose_b"))
    fit.kind = GemmFallback::WgmmaGeluGradBias;
  else
    return std::nullopt;
  for (const std::vector<int> *ids : {&l.inputs, &l.outputs})
    for (int id : *ids)
      if (p.buffers.at(id).dtype != DType::BF16)
        return std::nullopt;
  const Buffer &a = p.buffers.at(l.inputs[0]), &b = p.buffers.at(l.inputs[1]);
  if (b.shape.size() != 2 || a.shape.empty())
    return std::nullopt;
  // b [k, n] for the forward's epilogues, else [n, k].
  const bool biasGelu = fit.kind == GemmFallback::WgmmaBiasGelu;
  const bool nMajor = biasGelu || fit.kind == GemmFallback::WgmmaBias;
  fit.k = nMajor ? b.shape[0] : b.shape[1];
  fit.n = nMajor ? b.shape[1] : b.shape[0];
  if (fit.k <= 0 || fit.k % 64 != 0 || fit.n % 128 != 0 ||
      a.shape.back() != fit.k || a.numel() % (fit.k * 128) != 0)
    return std::nullopt;
  fit.m = a.numel() / fit.k;
  // The third operand: the bias [n], or the pre-activation [m, n].
  const int64_t third = nMajor ? fit.n : fit.m * fit.n;
  if (fit.m / 128 > 65535 ||
      (!plain && p.buffers.at(l.inputs[2]).numel() != third))
    return std::nullopt;
  // The results: [m, n] each, but a bias gradient's [n].
  for (size_t i = 0; i < l.outputs.size(); ++i)
    if (p.buffers.at(l.outputs[i]).numel() !=
        (i == 1 && !biasGelu ? fit.n : fit.m * fit.n))
      return std::nullopt;
  fit.wide = fit.n % 256 == 0;
  fit.paired =
      fit.wide && fit.m % 256 == 0 && pairedWgmmaGemm(fit.kind) != fit.kind;
  return fit;
}

const char *roleName(Role r) {
  switch (r) {
  case Role::Temp:
    return "temp";
  case Role::Param:
    return "param";
  case Role::Grad:
    return "grad";
  case Role::AdamM:
    return "adam_m";
  case Role::AdamV:
    return "adam_v";
  case Role::Input:
    return "input";
  case Role::Hyper:
    return "hyper";
  case Role::Output:
    return "output";
  case Role::Constant:
    return "constant";
  case Role::ParamCopy:
    return "param_copy";
  }
  return "?";
}

int64_t Buffer::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

int64_t Buffer::bytes() const { return numel() * dtypeBytes(dtype); }

const Function *Program::function(std::string_view name) const {
  for (const Function &f : functions)
    if (f.name == name)
      return &f;
  return nullptr;
}

int Program::root(int id) const {
  // Bounded walk: a malformed cycle of views stops here, not in a hang.
  for (size_t steps = 0; buffers.at(id).viewOf >= 0 && steps < buffers.size();
       ++steps)
    id = buffers[id].viewOf;
  return id;
}

std::vector<std::pair<int, int>> liveRanges(const Program &p,
                                            const Function &f) {
  std::vector<std::pair<int, int>> live(p.buffers.size(), {-1, -1});
  for (size_t l = 0; l < f.launches.size(); ++l) {
    const Launch &launch = f.launches[l];
    // A side-stream launch may still run until the main stream joins it.
    const int last = launch.stream == 1 && launch.join > int(l)
                         ? launch.join - 1
                         : int(l);
    for (const std::vector<int> *ids : {&launch.inputs, &launch.outputs})
      for (int id : *ids) {
        if (id < 0 || size_t(id) >= p.buffers.size())
          continue;
        auto &[first, end] = live[p.root(id)];
        if (first < 0)
          first = int(l);
        end = std::max(end, last);
      }
  }
  return live;
}

int Program::gradient(std::string_view param) const {
  const int grad = find(Role::Grad, param);
  auto spec =
      std::find_if(params.begin(), params.end(),
                   [&](const train::ParamSpec &s) { return s.name == param; });
  if (grad < 0 || spec == params.end() || buffers[grad].shape == spec->shape)
    return grad;
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].role == Role::Grad && buffers[i].binding == param &&
        buffers[i].shape == spec->shape && root(int(i)) == grad)
      return int(i);
  return -1;
}

int Program::find(Role role, std::string_view binding) const {
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].role == role && buffers[i].binding == binding &&
        buffers[i].viewOf < 0)
      return int(i);
  return -1;
}

} // namespace gptc::rt
