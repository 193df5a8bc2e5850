//===- CpuBackend.cpp - a Program's launches on the executor's kernels ----===//
//
// The CPU counterpart of the CUDA backend: one host arena laid out by the
// Program's memory plan, and each launch run as the CPU executor runs its op
// (lib/Executor/Executor.cpp): the inputs are read out of the arena into
// float32 (bf16 and f16 widened exactly) or int32 host tensors, the
// executor's kernel computes, and each output is rounded to its buffer's
// dtype (nearest, ties to even: roundTo in Precision.h) and stored. A
// Program run here therefore gives the executor's bits, so comparing the
// two checks the schedule, the memory plan and the reuse of buffers.
//
// To make a wrong plan fail loudly rather than by luck, load() rejects
// buffers that overlap where they must not (live-for-the-run buffers with
// anything; a launch's outputs with its inputs, except an elementwise
// launch writing in place), and every run of a function from its first
// launch fills the temporaries' space with NaN (int32: -1) first, so a read
// of a temporary that was never written shows.
//
// No MLIR: the training program links this (--device=cpu).
//
//===----------------------------------------------------------------------===//

#include "gptc/Runtime/Backend.h"

#include "gptc/Executor/FusedLayerNorm.h"
#include "gptc/Executor/Kernels.h"
#include "gptc/Executor/Precision.h"
#include "gptc/Formats/Safetensors.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <malloc.h>
#include <memory>
#include <optional>
#include <unordered_map>

namespace gptc::rt {

namespace {

using exec::HostTensor;
using Inputs = std::vector<const HostTensor *>;
using Outputs = std::vector<const Buffer *>;


bool flag(const Launch &l, const char *name) {
  auto it = l.ints.find(name);
  return it != l.ints.end() && it->second != 0;
}

/// A GEMM or embedding gradient with `accumulate` (grads_accumulate's
/// gradients) takes its output's old value as one more input, after its
/// `operands`, and adds its result to it: out = old + a·b, one float32
/// addition an element after the result, as cuBLASLt's beta = 1 and the
/// executor's sum += g do.
std::vector<HostTensor> accumulated(const Launch &l, const Inputs &in,
                                    size_t operands,
                                    std::vector<HostTensor> results) {
  if (!accumulates(l))
    return results;
  if (in.size() != operands + 1 || results.empty() ||
      in.back()->numel() != results[0].numel() ||
      in.back()->kind != exec::ElementKind::F32)
    throw exec::KernelError(l.kernel + ": accumulate takes its float32 "
                            "output's old value as its last operand");
  std::vector<float> &sum = results[0].f32;
  const std::vector<float> &old = in.back()->f32;
  for (size_t i = 0; i < sum.size(); ++i)
    sum[i] = old[i] + sum[i];
  return results;
}

int64_t integer(const Launch &l, const char *name, int64_t otherwise) {
  auto it = l.ints.find(name);
  return it == l.ints.end() ? otherwise : it->second;
}

float real(const Launch &l, const char *name, float otherwise) {
  auto it = l.floats.find(name);
  return it == l.floats.end() ? otherwise : float(it->second);
}

/// cross_entropy's gpt-pad-dims attributes, as Executor.cpp reads them.
int64_t numClasses(const Launch &l) { return integer(l, "num_classes", -1); }
std::optional<int32_t> ignoreIndex(const Launch &l) {
  auto it = l.ints.find("ignore_index");
  if (it == l.ints.end())
    return std::nullopt;
  return int32_t(it->second);
}

std::vector<HostTensor> one(HostTensor t) {
  std::vector<HostTensor> v;
  v.push_back(std::move(t));
  return v;
}

std::vector<HostTensor> fusedElementwise(const Launch &l, const Inputs &in,
                                         const Outputs &out) {
  const std::vector<int64_t> &shape = out.at(0)->shape;
  std::vector<HostTensor> results;
  std::vector<float *> outs;
  for (size_t r = 0; r < out.size(); ++r)
    results.push_back(HostTensor::floats(shape));
  for (HostTensor &r : results)
    outs.push_back(r.data());
  exec::runScalarProgram(l.body, {in}, {outs}, {shape});
  return results;
}

/// multi_tensor_elementwise's `per_tensor` constants (k * n + t), as
/// rank-0 tensors; empty if it has none.
std::vector<HostTensor> perTensorConstants(const Launch &l, size_t n) {
  std::vector<HostTensor> constants;
  auto it = l.floatLists.find("per_tensor");
  if (it == l.floatLists.end())
    return constants;
  if (n == 0 || it->second.size() % n != 0)
    throw exec::KernelError("multi_tensor_elementwise: " +
                            std::to_string(it->second.size()) +
                            " per-tensor constants for " +
                            std::to_string(n) + " tensors");
  for (double v : it->second)
    constants.push_back(HostTensor::floats({}, float(v)));
  return constants;
}

/// Operands and results are argument-major (see GPTFusedOps.td): operand
/// j of tensor t is in[j * n + t], then the shared scalars.
std::vector<HostTensor>
multiTensorElementwise(const Launch &l, const Inputs &in, const Outputs &out) {
  size_t n = size_t(integer(l, "num_tensors", 0));
  std::vector<HostTensor> constants = perTensorConstants(l, n);
  size_t perConstant = n ? constants.size() / n : 0;
  // The constants are body arguments that no input feeds.
  size_t numArgs = size_t(l.body.numArgs) - perConstant;
  if (n == 0 || out.size() % n != 0 || in.size() < numArgs ||
      size_t(l.body.numArgs) < perConstant)
    throw exec::KernelError(
        "multi_tensor_elementwise: " + std::to_string(in.size()) +
        " inputs and " + std::to_string(out.size()) +
        " outputs do not fit num_tensors = " + std::to_string(n));
  // in.size() = perTensor * n + scalars, numArgs = perTensor + scalars.
  size_t perTensor = n == 1 ? numArgs : (in.size() - numArgs) / (n - 1);
  size_t scalars = numArgs - perTensor;
  if (perTensor > numArgs || perTensor * n + scalars != in.size())
    throw exec::KernelError(
        "multi_tensor_elementwise: " + std::to_string(in.size()) +
        " inputs do not fit a body of " + std::to_string(numArgs) +
        " arguments over " + std::to_string(n) + " tensors");
  size_t perResult = out.size() / n;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<const HostTensor *>> sources(n);
  std::vector<HostTensor> results(out.size());
  std::vector<std::vector<float *>> outs(n);
  for (size_t t = 0; t < n; ++t) {
    shapes.push_back(out[t]->shape);
    for (size_t j = 0; j < perTensor; ++j)
      sources[t].push_back(in[j * n + t]);
    for (size_t k = 0; k < perConstant; ++k)
      sources[t].push_back(&constants[k * n + t]);
    for (size_t s = perTensor * n; s < in.size(); ++s)
      sources[t].push_back(in[s]);
    for (size_t r = 0; r < perResult; ++r) {
      results[r * n + t] = HostTensor::floats(shapes[t]);
      outs[t].push_back(results[r * n + t].data());
    }
  }
  exec::runScalarProgram(l.body, sources, outs, shapes);
  return results;
}

/// multi_tensor_reduce: operands as multi_tensor_elementwise's (without
/// per-tensor constants), one rank-0 result.
std::vector<HostTensor>
multiTensorReduce(const Launch &l, const Inputs &in, const Outputs &) {
  size_t n = size_t(integer(l, "num_tensors", 0));
  size_t numArgs = size_t(l.body.numArgs);
  size_t perTensor =
      n == 0 ? 0 : n == 1 ? numArgs : (in.size() - numArgs) / (n - 1);
  if (n == 0 || in.size() < numArgs || perTensor == 0 ||
      perTensor > numArgs || perTensor * n + (numArgs - perTensor) != in.size())
    throw exec::KernelError(
        "multi_tensor_reduce: " + std::to_string(in.size()) +
        " inputs do not fit a body of " + std::to_string(numArgs) +
        " arguments over " + std::to_string(n) + " tensors");
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<const HostTensor *>> sources(n);
  for (size_t t = 0; t < n; ++t) {
    shapes.push_back(in[t]->shape);
    for (size_t j = 0; j < perTensor; ++j)
      sources[t].push_back(in[j * n + t]);
    for (size_t s = perTensor * n; s < in.size(); ++s)
      sources[t].push_back(in[s]);
  }
  return one(HostTensor::floats(
      {}, float(exec::sumScalarProgram(l.body, sources, shapes))));
}

using Kernel = std::function<std::vector<HostTensor>(
    const Launch &, const Inputs &, const Outputs &)>;

/// Each op's CPU kernel, called as Executor.cpp's evaluate() calls it.
const std::unordered_map<std::string, Kernel> &kernels() {
  using exec::BinaryKind;
  using exec::UnaryKind;
  static const std::unordered_map<std::string, Kernel> table = [] {
    std::unordered_map<std::string, Kernel> k;
    auto binary = [&](const char *name, BinaryKind kind) {
      k[name] = [kind](const Launch &, const Inputs &in, const Outputs &out) {
        return one(exec::binary(kind, *in[0], *in[1], out[0]->shape));
      };
    };
    auto unary = [&](const char *name, UnaryKind kind) {
      k[name] = [kind](const Launch &, const Inputs &in, const Outputs &) {
        return one(exec::unary(kind, *in[0]));
      };
    };
    binary("add", BinaryKind::Add);
    binary("sub", BinaryKind::Sub);
    binary("mul", BinaryKind::Mul);
    binary("div", BinaryKind::Div);
    binary("max", BinaryKind::Max);
    binary("min", BinaryKind::Min);
    unary("neg", UnaryKind::Neg);
    unary("exp", UnaryKind::Exp);
    unary("log", UnaryKind::Log);
    unary("tanh", UnaryKind::Tanh);
    unary("sqrt", UnaryKind::Sqrt);
    unary("rsqrt", UnaryKind::Rsqrt);
    k["fused_elementwise"] = fusedElementwise;
    k["multi_tensor_elementwise"] = multiTensorElementwise;
    k["multi_tensor_reduce"] = multiTensorReduce;
    // The rounding to the output's dtype happens on store, as in the
    // executor.
    k["cast"] = [](const Launch &, const Inputs &in, const Outputs &) {
      return one(*in[0]);
    };
    k["reshape"] = [](const Launch &, const Inputs &in, const Outputs &out) {
      return one(exec::reshape(*in[0], out[0]->shape));
    };
    k["iota"] = [](const Launch &, const Inputs &, const Outputs &out) {
      return one(exec::iota(out[0]->shape.at(0)));
    };
    k["embedding"] = [](const Launch &, const Inputs &in, const Outputs &) {
      return one(exec::embedding(*in[0], *in[1]));
    };
    k["matmul"] = [](const Launch &l, const Inputs &in, const Outputs &) {
      return accumulated(
          l, in, 2,
          one(exec::matmul(*in[0], *in[1], flag(l, "transpose_a"),
                           flag(l, "transpose_b"))));
    };
    k["matmul_epilogue"] = [](const Launch &l, const Inputs &in,
                              const Outputs &out) {
      return exec::matmulEpilogue(*in[0], *in[1], *in[2],
                                  flag(l, "transpose_a"),
                                  flag(l, "transpose_b"), flag(l, "gelu"),
                                  out.size() > 1);
    };
    k["matmul_gelu_grad"] = [](const Launch &l, const Inputs &in,
                               const Outputs &out) {
      return exec::matmulGeluGrad(*in[0], *in[1], *in[2],
                                  flag(l, "transpose_a"),
                                  flag(l, "transpose_b"), out.size() > 1);
    };
    k["matmul_bias_grad"] = [](const Launch &l, const Inputs &in,
                               const Outputs &) {
      return accumulated(
          l, in, 2, exec::matmulBiasGrad(*in[0], *in[1], flag(l, "transpose_a")));
    };
    k["layernorm"] = [](const Launch &l, const Inputs &in, const Outputs &) {
      return one(
          exec::layernorm(*in[0], *in[1], *in[2], real(l, "epsilon", 1e-5f)));
    };
    k["softmax"] = [](const Launch &, const Inputs &in, const Outputs &) {
      return one(exec::softmax(*in[0]));
    };
    k["causal_mask"] = [](const Launch &l, const Inputs &in, const Outputs &) {
      return one(exec::causalMask(*in[0], real(l, "fill", -INFINITY)));
    };
    // The lowering keeps no string attributes: gelu is the default, tanh.
    k["gelu"] = [](const Launch &, const Inputs &in, const Outputs &) {
      return one(exec::gelu(*in[0], /*tanhApproximation=*/true));
    };
    k["gelu_grad"] = [](const Launch &, const Inputs &in, const Outputs &) {
      return one(exec::geluGrad(*in[0], *in[1], /*tanhApproximation=*/true));
    };
    k["flash_attention"] = [](const Launch &l, const Inputs &in,
                              const Outputs &) {
      return exec::flashAttention(*in[0], *in[1], *in[2], real(l, "scale", 1),
                                  flag(l, "causal"));
    };
    k["flash_attention_grad"] = [](const Launch &l, const Inputs &in,
                                   const Outputs &) {
      return exec::flashAttentionGrad(*in[0], *in[1], *in[2], *in[3], *in[4],
                                      *in[5], real(l, "scale", 1),
                                      flag(l, "causal"), {},
                                      in.size() > 6 ? in[6] : nullptr);
    };
    k["attention_row_dot"] = [](const Launch &l, const Inputs &in,
                                const Outputs &) {
      return one(exec::attentionRowDot(*in[0], *in[1],
                                       integer(l, "num_heads", 0)));
    };
    k["flash_attention_qkv"] = [](const Launch &l, const Inputs &in,
                                  const Outputs &) {
      return exec::flashAttentionQKV(*in[0], l.ints.at("num_heads"),
                                     real(l, "scale", 1), flag(l, "causal"));
    };
    k["flash_attention_qkv_grad"] = [](const Launch &l, const Inputs &in,
                                       const Outputs &) {
      return exec::flashAttentionQKVGrad(*in[0], *in[1], *in[2], *in[3],
                                         l.ints.at("num_heads"),
                                         real(l, "scale", 1),
                                         flag(l, "causal"), {},
                                         in.size() > 4 ? in[4] : nullptr);
    };
    k["transpose"] = [](const Launch &l, const Inputs &in, const Outputs &) {
      return one(exec::transpose(*in[0], l.lists.at("permutation")));
    };
    k["split"] = [](const Launch &l, const Inputs &in, const Outputs &out) {
      int64_t axis = integer(l, "axis", 0);
      std::vector<int64_t> sizes;
      for (const Buffer *b : out)
        sizes.push_back(b->shape.at(size_t(axis)));
      return exec::split(*in[0], axis, sizes);
    };
    k["concat"] = [](const Launch &l, const Inputs &in, const Outputs &) {
      return one(exec::concat(in, integer(l, "axis", 0)));
    };
    k["attention_bias_grad"] = [](const Launch &, const Inputs &in,
                                  const Outputs &) {
      return one(exec::attentionBiasGrad(*in[0], *in[1]));
    };
    k["pad"] = [](const Launch &l, const Inputs &in, const Outputs &out) {
      return one(exec::pad(*in[0], out[0]->shape, integer(l, "value", 0)));
    };
    k["slice"] = [](const Launch &, const Inputs &in, const Outputs &out) {
      return one(exec::slice(*in[0], out[0]->shape));
    };
    k["reduce_sum"] = [](const Launch &l, const Inputs &in, const Outputs &out) {
      if (auto corner = l.lists.find("corner"); corner != l.lists.end())
        return one(exec::reduceSum(exec::slice(*in[0], corner->second),
                                   out[0]->shape));
      return one(exec::reduceSum(*in[0], out[0]->shape));
    };
    k["cross_entropy"] = [](const Launch &l, const Inputs &in,
                            const Outputs &) {
      return one(
          exec::crossEntropy(*in[0], *in[1], numClasses(l), ignoreIndex(l)));
    };
    k["cross_entropy_grad"] = [](const Launch &l, const Inputs &in,
                                 const Outputs &) {
      return one(exec::crossEntropyGrad(*in[0], *in[1], *in[2], numClasses(l),
                                        ignoreIndex(l)));
    };
    // One pass over the logits on a GPU; two kernels here, same values.
    k["cross_entropy_with_grad"] = [](const Launch &l, const Inputs &in,
                                      const Outputs &) {
      std::vector<HostTensor> r;
      r.push_back(
          exec::crossEntropy(*in[0], *in[1], numClasses(l), ignoreIndex(l)));
      r.push_back(exec::crossEntropyGrad(*in[0], *in[1], *in[2], numClasses(l),
                                         ignoreIndex(l)));
      return r;
    };
    k["embedding_grad"] = [](const Launch &l, const Inputs &in,
                             const Outputs &out) {
      // dy, ids (or sort_ids' keys, with position_bits)[, the addend][, the
      // sum it accumulates into]
      const size_t operands = in.size() - (accumulates(l) ? 1 : 0);
      auto bits = l.ints.find("position_bits");
      const HostTensor ids =
          bits == l.ints.end()
              ? *in[1]
              : exec::idsOfSortedKeys(*in[1], int(bits->second));
      return accumulated(
          l, in, operands,
          one(exec::embeddingGrad(*in[0], ids, out[0]->shape,
                                  operands > 2 ? in[2] : nullptr)));
    };
    k["sort_ids"] = [](const Launch &l, const Inputs &in, const Outputs &) {
      auto rows = l.ints.find("rows"), bits = l.ints.find("position_bits");
      if (rows == l.ints.end() || bits == l.ints.end())
        throw exec::KernelError("sort_ids: no rows and position_bits");
      return one(exec::sortIds(*in[0], rows->second, int(bits->second)));
    };
    // The executor's two steps (FusedLayerNorm.h): the unfused pair's bits.
    k["fused_layernorm"] = [](const Launch &l, const Inputs &in,
                              const Outputs &out) {
      if (in.size() < 2)
        throw exec::KernelError("fused_layernorm: no gamma and beta");
      return exec::fusedLayernorm(l.body, Inputs(in.begin(), in.end() - 2),
                                  *in[in.size() - 2], *in.back(),
                                  out.at(0)->shape, real(l, "epsilon", 1e-5f));
    };
    k["fused_layernorm_grad"] = [](const Launch &l, const Inputs &in,
                                   const Outputs &out) {
      if (in.size() < 3 || out.size() < 2)
        throw exec::KernelError("fused_layernorm_grad: no x, gamma and dy");
      std::vector<std::vector<int64_t>> shapes;
      for (size_t r = 2; r < out.size(); ++r)
        shapes.push_back(out[r]->shape);
      return exec::fusedLayernormGrad(l.body, *in[0], *in[1], *in[2],
                                      Inputs(in.begin() + 3, in.end()), shapes,
                                      real(l, "epsilon", 1e-5f));
    };
    k["layernorm_grad"] = [](const Launch &l, const Inputs &in,
                             const Outputs &) {
      return exec::layernormGrad(*in[0], *in[1], *in[2],
                                 real(l, "epsilon", 1e-5f));
    };
    k["softmax_grad"] = [](const Launch &, const Inputs &in, const Outputs &) {
      return one(exec::softmaxGrad(*in[0], *in[1]));
    };
    return k;
  }();
  return table;
}

/// Launches that may write an output over the very input it reads: the
/// lowering's in-place update (elementwise, each element read before it is
/// written) and the loss gradient over its logits (each row read whole
/// before its gradient is written, cross_entropy.cuh).
/// Whether `l` may write output `out` over input `in` (the same buffer):
/// an elementwise kernel any, an accumulating GEMM its result over the old
/// value it adds to (its last input).
bool mayWriteInPlace(const Launch &l, size_t in, size_t out) {
  if (l.kernel == "fused_elementwise" ||
      l.kernel == "multi_tensor_elementwise" ||
      l.kernel == "cross_entropy_with_grad")
    return true;
  return accumulates(l) && out == 0 && in + 1 == l.inputs.size();
}

class CpuBackend : public Backend {
public:
  std::string name() const override { return "cpu"; }

  void load(const Program &p) override {
    // Every launch allocates its inputs' and outputs' host tensors, the
    // same sizes step after step: kept on the heap rather than mmapped
    // afresh, their pages are not faulted in again each time (what the
    // executor does too, keepFreedMemory in Executor.cpp).
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
    p_ = &p;
    base_.assign(p.buffers.size(), -1);
    for (size_t i = 0; i < p.buffers.size(); ++i)
      base_[i] = baseOf(int(i));
    checkPlan();
    // 64-byte aligned, as the GPU arena is at least.
    size_t bytes = (size_t(p.arenaBytes) + 63) / 64 * 64;
    arena_.reset(
        static_cast<uint8_t *>(std::aligned_alloc(64, bytes ? bytes : 64)));
    if (!arena_)
      throw DeviceError("cpu: cannot allocate the arena of " +
                        std::to_string(p.arenaBytes) + " bytes");
    std::memset(arena_.get(), 0, bytes);
    for (size_t i = 0; i < p.buffers.size(); ++i) {
      const Buffer &b = p.buffers[i];
      if (b.role != Role::Constant || b.viewOf >= 0)
        continue;
      if (int64_t(b.init.size()) != b.bytes())
        throw DeviceError("cpu: constant " + b.name + " holds " +
                          std::to_string(b.init.size()) + " bytes, expected " +
                          std::to_string(b.bytes()));
      std::memcpy(at(int(i)), b.init.data(), b.init.size());
    }
  }

  void upload(int buffer, const void *host) override {
    std::memcpy(at(buffer), host, size_t(p_->buffers.at(buffer).bytes()));
  }

  void download(int buffer, void *host) override {
    std::memcpy(host, at(buffer), size_t(p_->buffers.at(buffer).bytes()));
  }

  void run(const Function &f, size_t begin, size_t end) override {
    if (begin == 0)
      poisonTemps();
    for (size_t i = begin; i < end && i < f.launches.size(); ++i)
      runLaunch(f, i);
  }

  void synchronize() override {}

private:
  /// The buffer whose storage `id` is (itself, or what it is a view of).
  int baseOf(int id) const {
    for (int hops = 0; p_->buffers.at(id).viewOf >= 0; ++hops) {
      if (hops > int(p_->buffers.size()))
        throw DeviceError("cpu: buffer " + p_->buffers[id].name +
                          " is a view of itself");
      id = p_->buffers[id].viewOf;
    }
    return id;
  }

  uint8_t *at(int id) {
    return arena_.get() + p_->buffers.at(base_.at(id)).offset;
  }

  struct Range {
    int64_t begin, end;
    bool overlaps(const Range &o) const {
      return begin < o.end && o.begin < end;
    }
  };
  Range range(int id) const {
    const Buffer &b = p_->buffers[base_[id]];
    return {b.offset, b.offset + b.bytes()};
  }

  [[noreturn]] void planError(const std::string &why) const {
    throw DeviceError("cpu: the program's memory plan is wrong: " + why);
  }

  void checkPlan() {
    const std::vector<Buffer> &bs = p_->buffers;
    std::vector<int> persistent;
    temps_.clear();
    for (size_t i = 0; i < bs.size(); ++i) {
      const Buffer &b = bs[i];
      if (b.viewOf >= 0) {
        // A reshape has its buffer's bytes, a prefix slice fewer.
        if (b.bytes() > bs[base_[i]].bytes())
          planError("view " + b.name + " has " + std::to_string(b.bytes()) +
                    " bytes, its buffer " + bs[base_[i]].name + " only " +
                    std::to_string(bs[base_[i]].bytes()));
        continue;
      }
      if (b.offset < 0 || b.offset + b.bytes() > p_->arenaBytes)
        planError(b.name + " at [" + std::to_string(b.offset) + ", " +
                  std::to_string(b.offset + b.bytes()) +
                  ") is outside the arena of " +
                  std::to_string(p_->arenaBytes) + " bytes");
      (b.role == Role::Temp ? temps_ : persistent).push_back(int(i));
    }
    // What lives for the whole run shares its bytes with nothing.
    std::vector<int> all = persistent;
    all.insert(all.end(), temps_.begin(), temps_.end());
    std::sort(all.begin(), all.end(),
              [&](int a, int b) { return range(a).begin < range(b).begin; });
    for (size_t i = 0; i < all.size(); ++i)
      for (size_t j = i + 1;
           j < all.size() && range(all[j]).begin < range(all[i]).end; ++j)
        if ((bs[all[i]].role != Role::Temp || bs[all[j]].role != Role::Temp) &&
            range(all[i]).overlaps(range(all[j])))
          planError(bs[all[i]].name + " and " + bs[all[j]].name +
                    " overlap, and one lives for the whole run");
    // The temporaries' space as disjoint ranges: they share it heavily.
    std::vector<Range> temps;
    for (int id : temps_)
      temps.push_back(range(id));
    std::sort(temps.begin(), temps.end(),
              [](const Range &a, const Range &b) { return a.begin < b.begin; });
    tempSpace_.clear();
    for (const Range &r : temps)
      if (!tempSpace_.empty() && r.begin <= tempSpace_.back().end)
        tempSpace_.back().end = std::max(tempSpace_.back().end, r.end);
      else
        tempSpace_.push_back(r);
    // A kernel must not write over what it reads (or writes elsewhere),
    // except an elementwise one writing an input's own buffer in place.
    for (const Function &f : p_->functions)
      for (const Launch &l : f.launches) {
        for (size_t o = 0; o < l.outputs.size(); ++o) {
          Range out = range(l.outputs[o]);
          for (size_t i = 0; i < l.inputs.size(); ++i) {
            const int in = l.inputs[i];
            if (out.overlaps(range(in)) &&
                !(base_[in] == base_[l.outputs[o]] && mayWriteInPlace(l, i, o)))
              planError(f.name + ": " + opAt(l) + " writes " +
                        bs[l.outputs[o]].name + " over its input " +
                        bs[in].name);
          }
          for (size_t o2 = o + 1; o2 < l.outputs.size(); ++o2)
            if (out.overlaps(range(l.outputs[o2])))
              planError(f.name + ": " + opAt(l) + " writes " +
                        bs[l.outputs[o]].name + " and " +
                        bs[l.outputs[o2]].name + " to the same bytes");
        }
      }
  }

  /// All-ones bytes: NaN in f32, bf16 and f16, -1 in i32.
  void poisonTemps() {
    for (const Range &r : tempSpace_)
      std::memset(arena_.get() + r.begin, 0xFF, size_t(r.end - r.begin));
  }

  HostTensor read(int id) {
    const Buffer &b = p_->buffers[id];
    const uint8_t *src = at(id);
    int64_t n = b.numel();
    HostTensor t;
    t.shape = b.shape;
    if (b.dtype == DType::I32) {
      t.kind = exec::ElementKind::I32;
      const int32_t *ids = reinterpret_cast<const int32_t *>(src);
      t.i32.assign(ids, ids + n);
      return t;
    }
    if (b.dtype == DType::F32) {
      const float *floats = reinterpret_cast<const float *>(src);
      t.f32.assign(floats, floats + n);
      return t;
    }
    t.f32.resize(size_t(n));
    float *dst = t.data();
    const uint16_t *bits = reinterpret_cast<const uint16_t *>(src);
    bool bf16 = b.dtype == DType::BF16;
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i)
      dst[i] = bf16 ? bf16ToFloat(bits[i]) : halfToFloat(bits[i]);
    return t;
  }

  void write(int id, HostTensor &t) {
    const Buffer &b = p_->buffers[id];
    uint8_t *dst = at(id);
    int64_t n = b.numel();
    if (b.dtype == DType::I32) {
      std::memcpy(dst, t.i32.data(), size_t(n) * 4);
      return;
    }
    if (b.dtype == DType::F32) {
      std::memcpy(dst, t.data(), size_t(n) * 4);
      return;
    }
    bool bf16 = b.dtype == DType::BF16;
    exec::roundTo(t, bf16 ? exec::StorageKind::BF16 : exec::StorageKind::F16);
    uint16_t *bits = reinterpret_cast<uint16_t *>(dst);
    const float *src = t.data();
#pragma omp parallel for if (n > 65536)
    for (int64_t i = 0; i < n; ++i)
      bits[i] = bf16 ? exec::bf16BitsOf(src[i]) : exec::halfBitsOf(src[i]);
  }

  void runLaunch(const Function &f, size_t index) {
    const Launch &l = f.launches[index];
    auto where = [&] {
      return "cpu: " + f.name + " launch " + std::to_string(index) + " (" +
             opAt(l) + "): ";
    };
    auto kernel = kernels().find(l.kernel);
    if (kernel == kernels().end())
      throw DeviceError(where() + "no CPU kernel for this op");
    std::vector<HostTensor> inputs;
    inputs.reserve(l.inputs.size());
    for (int id : l.inputs)
      inputs.push_back(read(id));
    Inputs in;
    for (const HostTensor &t : inputs)
      in.push_back(&t);
    Outputs out;
    for (int id : l.outputs)
      out.push_back(&p_->buffers.at(id));
    std::vector<HostTensor> results;
    try {
      results = kernel->second(l, in, out);
    } catch (const exec::KernelError &e) {
      throw DeviceError(where() + e.what());
    } catch (const std::out_of_range &) {
      throw DeviceError(where() + "an attribute or operand is missing");
    }
    if (results.size() != out.size())
      throw DeviceError(where() + "the kernel gives " +
                        std::to_string(results.size()) + " results for " +
                        std::to_string(out.size()) + " outputs");
    for (size_t r = 0; r < results.size(); ++r) {
      const Buffer &b = *out[r];
      bool ids = b.dtype == DType::I32;
      if (results[r].numel() != b.numel() ||
          (results[r].kind == exec::ElementKind::I32) != ids)
        throw DeviceError(
            where() + "result " + std::to_string(r) + " (" +
            exec::shapeString(results[r].shape) +
            (results[r].kind == exec::ElementKind::I32 ? " i32" : " f32") +
            ") does not fit its " + dtypeName(b.dtype) + " buffer " + b.name +
            " of " + exec::shapeString(b.shape));
      write(l.outputs[r], results[r]);
    }
  }

  struct Free {
    void operator()(uint8_t *p) const { std::free(p); }
  };
  const Program *p_ = nullptr;
  std::vector<int> base_;        ///< each buffer's storage (through views)
  std::vector<int> temps_;       ///< Temp buffers that own storage
  std::vector<Range> tempSpace_; ///< the bytes they cover, merged
  std::unique_ptr<uint8_t[], Free> arena_;
};

} // namespace

std::unique_ptr<Backend> makeCpuBackend() {
  return std::make_unique<CpuBackend>();
}

} // namespace gptc::rt
