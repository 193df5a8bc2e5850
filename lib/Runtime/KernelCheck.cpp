//===- KernelCheck.cpp - every launch on two backends, compared -----------===//
//
// Error measure: for an output with reference values r and device values d,
// err_i = |d_i - r_i| / (|r_i| + rms(r)). The rms term makes the measure
// scale-aware: an element near zero is the result of cancellation between
// terms of the tensor's typical size, and its rounding error is a fraction
// of that size, not of its own. A launch passes when max err_i <= the
// tolerance of the output's dtype, non-finite values agree exactly (NaN with
// NaN, inf with the same inf), and i32 outputs are equal.
//
//===----------------------------------------------------------------------===//

#include "gptc/Runtime/KernelCheck.h"

#include "gptc/Executor/Precision.h"
#include "gptc/Formats/Safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

namespace gptc::rt {

namespace {

std::vector<double> decode(const std::vector<uint8_t> &bytes, DType t) {
  const size_t width = size_t(dtypeBytes(t)), n = bytes.size() / width;
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = elementValue(&bytes[width * i], t);
  return v;
}

/// A buffer's bytes in the arena, a view resolved to its base.
std::pair<int64_t, int64_t> storage(const Program &p, int id) {
  const Buffer *b = &p.buffers[id];
  int64_t offset = b->offset;
  for (int hops = 0; offset < 0 && b->viewOf >= 0 && hops < 64; ++hops) {
    b = &p.buffers[b->viewOf];
    offset = b->offset;
  }
  return {offset, offset + p.buffers[id].bytes()};
}

/// The values the check starts from, by role; close to a trained model's
/// ranges so that layernorm, softmax and AdamW see typical inputs.
std::vector<float> initialValues(const Program &p, const Buffer &b,
                                 std::mt19937_64 &rng) {
  size_t n = size_t(b.numel());
  std::vector<float> v(n);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto fillNormal = [&](double mean, double std) {
    for (float &x : v)
      x = float(mean + std * normal(rng));
  };
  switch (b.role) {
  case Role::Param: {
    auto spec = std::find_if(p.params.begin(), p.params.end(),
                             [&](const train::ParamSpec &s) {
                               return s.name == b.binding;
                             });
    if (spec == p.params.end() || spec->init == train::ParamSpec::Init::Normal)
      fillNormal(0.0, spec != p.params.end() && spec->std > 0 ? spec->std
                                                               : 0.02);
    else if (spec->init == train::ParamSpec::Init::Ones)
      fillNormal(1.0, 0.1); // layernorm gains: not all exactly one
    else
      fillNormal(0.0, 0.02); // biases: not all exactly zero
    break;
  }
  case Role::Grad:
    fillNormal(0.0, 0.01);
    break;
  case Role::ParamCopy: // a weight's bf16 copy, like the weights
    fillNormal(0.0, 0.02);
    break;
  case Role::AdamM:
    fillNormal(0.0, 1e-3);
    break;
  case Role::AdamV: // positive: the update divides by its square root
    for (float &x : v) {
      double g = 1e-3 * normal(rng);
      x = float(g * g + 1e-8);
    }
    break;
  case Role::Input: {
    if (b.dtype != DType::I32) {
      fillNormal(0.0, 1.0);
      break;
    }
    int64_t vocab = 256;
    if (auto it = p.meta.find("vocab_size"); it != p.meta.end())
      vocab = std::max<int64_t>(1, std::atoll(it->second.c_str()));
    std::uniform_int_distribution<int64_t> id(0, vocab - 1);
    for (float &x : v)
      x = float(id(rng));
    break;
  }
  case Role::Hyper: {
    float value = b.binding == "lr" ? 1e-3f : 1.0f; // step, grad_scale, ...
    std::fill(v.begin(), v.end(), value);
    break;
  }
  default:
    break;
  }
  return v;
}

struct Comparison {
  double maxAbs = 0, maxRel = 0;
  int64_t worst = -1; // element with the largest scaled error
  double worstDevice = 0, worstReference = 0;
  int64_t over = 0; // elements over the tolerance
  bool pass = true;
};

Comparison compare(const std::vector<double> &d, const std::vector<double> &r,
                   double tolerance) {
  Comparison c;
  double sumSq = 0;
  int64_t finite = 0;
  for (double x : r)
    if (std::isfinite(x)) {
      sumSq += x * x;
      ++finite;
    }
  double rms = finite ? std::sqrt(sumSq / double(finite)) : 0.0;
  auto note = [&](size_t i, double rel) {
    if (rel > c.maxRel || c.worst < 0) {
      c.maxRel = std::max(c.maxRel, rel);
      c.worst = int64_t(i);
      c.worstDevice = d[i];
      c.worstReference = r[i];
    }
  };
  for (size_t i = 0; i < r.size(); ++i) {
    if (!std::isfinite(r[i]) || !std::isfinite(d[i])) {
      bool same = (std::isnan(r[i]) && std::isnan(d[i])) || d[i] == r[i];
      if (!same) {
        c.pass = false;
        ++c.over;
        c.maxAbs = std::numeric_limits<double>::infinity();
        note(i, std::numeric_limits<double>::infinity());
      }
      continue;
    }
    double err = std::fabs(d[i] - r[i]);
    c.maxAbs = std::max(c.maxAbs, err);
    double denom = std::fabs(r[i]) + rms;
    double rel = denom > 0 ? err / denom : (err > 0 ? HUGE_VAL : 0.0);
    if (rel > c.maxRel)
      note(i, rel);
    c.over += rel > tolerance;
  }
  if (c.maxRel > tolerance)
    c.pass = false;
  return c;
}

std::string shapeOf(const Buffer &b) {
  std::string s = std::string(dtypeName(b.dtype)) + "[";
  for (size_t i = 0; i < b.shape.size(); ++i)
    s += (i ? "," : "") + std::to_string(b.shape[i]);
  return s + "]";
}

} // namespace

double kernelCheckTolerance(const Program &p, const Launch &l, size_t output,
                            DType dtype) {
  switch (dtype) {
  case DType::BF16:
    // A GELU derivative's bias gradient sums N rows of gelu'(pre) · dy.
    // The device may take dy from a GEMM that rounded it to bf16 (the
    // plain GEMM before gptc's pass, a way tuning may keep), the reference
    // takes the float32 product: each term's rounding (up to 2^-9 of it)
    // is independent, so the two sums differ by a random walk of about
    // 2^-9/sqrt(3) of the typical sum, and the worst of thousands of
    // columns is several times that. On an H100, 1 of 5,120 columns at
    // C=1280 came to 8.04e-3 (2^-7 is 7.8e-3). A missed tile of 64 of
    // 16,384 rows is still off by about 4 times 2^-6.
    if (l.kernel == "matmul_gelu_grad" && output == 1)
      return 0x1p-6;
    // The tensor-core attention rounds each tile's probabilities (and, in
    // the backward, dS) to bf16 before the product that consumes them, as
    // FlashAttention does; the reference keeps them fp32. Its outputs are
    // sums that cancel (out = Σ P·v, dv = Σ P·dout, dk = Σ dS·q), so 2^-9
    // a term grows. Measured on gpt2-tiny's and GPT-2's data
    // (ProgramKernelsTest): up to 1.9e-2 at T=64 and 4.8e-2 at T=256 (head
    // size 32), 8.0e-3 forward at T=128 and 1.8e-2 forward, 3.2e-2
    // backward at T=1024 (head size 64). With the reference rounding P and
    // dS as well, they agree within 2^-7. A wrong index or a dropped term
    // is still off by O(1).
    if (l.kernel == "flash_attention" || l.kernel == "flash_attention_qkv" ||
        l.kernel == "flash_attention_grad" ||
        l.kernel == "flash_attention_qkv_grad")
      return 0x1p-4;
    // 8 significant bits: one ulp is 2^-8..2^-7 of the value, and two
    // implementations that round at different points (a fused kernel keeps
    // an fp32 intermediate the reference rounds, or the reverse) differ by
    // about one ulp.
    return 0x1p-7;
  case DType::F16:
    // The same argument with 11 significant bits.
    return 0x1p-10;
  case DType::I32:
    return 0;
  case DType::F32:
    break;
  }
  // tf32 matmuls round their operands to 11 significant bits: a product is
  // off by up to 2^-10 relative, and a sum of K of them by about that times
  // the terms' size, which the rms term in the measure stands for.
  auto precision = p.meta.find("precision");
  if (isGemm(l.kernel) &&
      precision != p.meta.end() &&
      precision->second == "tf32")
    return 0x1p-8;
  // fp32 everywhere: the unit roundoff is 6e-8, sums of up to a few
  // thousand terms in another order, and exp/tanh within a few ulps, stay
  // under 1e-5 of the scale; 1e-4 leaves a margin and still catches any
  // real bug (a wrong index or a missed term is off by O(1)).
  return 1e-4;
}

int checkKernels(const Program &p, Backend &device, Backend &reference,
                 std::ostream &out, const KernelCheckOptions &options) {
  device.load(p);
  reference.load(p);
  out << "check-kernels: " << device.name() << " against " << reference.name()
      << ", seed " << options.seed << "\n";

  std::mt19937_64 rng(options.seed);
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const Buffer &b = p.buffers[i];
    if (b.viewOf >= 0)
      continue;
    switch (b.role) {
    case Role::Param:
    case Role::Grad:
    case Role::AdamM:
    case Role::AdamV:
    case Role::ParamCopy:
    case Role::Input:
    case Role::Hyper: {
      std::vector<uint8_t> bytes =
          encodeFloats(initialValues(p, b, rng), b.dtype);
      device.upload(int(i), bytes.data());
      reference.upload(int(i), bytes.data());
      break;
    }
    default:
      break;
    }
  }

  std::vector<const Function *> functions;
  if (options.functions.empty())
    for (const Function &f : p.functions)
      functions.push_back(&f);
  for (const std::string &name : options.functions) {
    const Function *f = p.function(name);
    if (!f)
      throw DeviceError("check-kernels: the program has no function '" +
                        name + "'");
    functions.push_back(f);
  }

  std::ofstream dumpIndex;
  if (!options.dumpDir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.dumpDir, ec);
    dumpIndex.open(options.dumpDir + "/index.txt");
    if (ec || !dumpIndex)
      throw DeviceError("check-kernels: cannot write into " + options.dumpDir +
                        (ec ? ": " + ec.message() : ""));
  }
  // A failing launch's outputs, both sides, for a closer look elsewhere.
  auto dump = [&](const Function &f, size_t i, size_t k,
                  const std::vector<uint8_t> &device,
                  const std::vector<uint8_t> &reference) {
    const Buffer &b = p.buffers[f.launches[i].outputs[k]];
    std::string name =
        f.name + "-" + std::to_string(i) + "-out" + std::to_string(k);
    for (const auto &[suffix, bytes] :
         {std::pair{".device", &device}, std::pair{".reference", &reference}}) {
      std::ofstream file(options.dumpDir + "/" + name + suffix,
                         std::ios::binary);
      file.write(reinterpret_cast<const char *>(bytes->data()),
                 std::streamsize(bytes->size()));
      if (!file)
        throw DeviceError("check-kernels: cannot write " + options.dumpDir +
                          "/" + name + suffix);
    }
    dumpIndex << name << " " << shapeOf(b) << "\n";
    dumpIndex.flush();
  };

  int failures = 0, launches = 0;
  char line[768];
  for (const Function *f : functions) {
    // grads_accumulate repeats grads' launches on temps of its own
    // (LowerToKernels.h); its accumulating launches and its add are its
    // own. Unless it is asked for by name, only the reference runs the
    // repeats, and each launch of its own starts from the reference's
    // temps on both sides.
    const bool ownOnly =
        options.functions.empty() && f->name == "grads_accumulate";
    for (size_t i = 0; i < f->launches.size(); ++i) {
      const Launch &l = f->launches[i];
      if (ownOnly && repeatsGrads(*f, i)) {
        reference.run(*f, i, i + 1);
        continue;
      }
      if (ownOnly) {
        reference.synchronize();
        for (int in : l.inputs) {
          const int root = p.root(in);
          if (p.buffers[root].role != Role::Temp)
            continue;
          std::vector<uint8_t> bytes(size_t(p.buffers[root].bytes()));
          reference.download(root, bytes.data());
          device.upload(root, bytes.data());
        }
      }
      ++launches;
      // Poison the device's outputs (NaN in every float dtype, -1 in i32)
      // so an element the kernel never writes fails; outputs that share
      // storage with an input are written in place and keep their values.
      for (int o : l.outputs) {
        auto [begin, end] = storage(p, o);
        bool inPlace = std::any_of(l.inputs.begin(), l.inputs.end(), [&](int in) {
          auto [b2, e2] = storage(p, in);
          return begin < e2 && b2 < end;
        });
        if (!inPlace) {
          std::vector<uint8_t> poison(size_t(p.buffers[o].bytes()), 0xFF);
          device.upload(o, poison.data());
        }
      }
      reference.run(*f, i, i + 1);
      reference.synchronize();
      std::string error;
      try {
        device.run(*f, i, i + 1);
        device.synchronize();
      } catch (const DeviceError &e) {
        error = e.what();
      }

      std::string head =
          std::string("[") + f->name + " " + std::to_string(i) + "] " + opAt(l);
      std::vector<std::vector<uint8_t>> refOutputs;
      for (int o : l.outputs) {
        refOutputs.emplace_back(size_t(p.buffers[o].bytes()));
        reference.download(o, refOutputs.back().data());
      }
      if (!error.empty()) {
        ++failures;
        out << head << "  FAIL: " << error << "\n";
        try {
          device.synchronize();
        } catch (const DeviceError &) {
          out << "check-kernels: the device is unusable after this error; "
                 "stopping\n";
          return failures;
        }
      } else {
        Comparison worst;
        double worstTolerance = 0;
        size_t worstOutput = 0;
        bool pass = true;
        std::vector<Comparison> byOutput;
        for (size_t k = 0; k < l.outputs.size(); ++k) {
          const Buffer &b = p.buffers[l.outputs[k]];
          std::vector<uint8_t> bytes(size_t(b.bytes()));
          device.download(l.outputs[k], bytes.data());
          double tolerance = kernelCheckTolerance(p, l, k, b.dtype);
          Comparison c = compare(decode(bytes, b.dtype),
                                 decode(refOutputs[k], b.dtype), tolerance);
          byOutput.push_back(c);
          if (!c.pass && !options.dumpDir.empty())
            dump(*f, i, k, bytes, refOutputs[k]);
          // Report the output furthest over (or closest to) its tolerance.
          double margin = tolerance > 0 ? c.maxRel / tolerance
                                        : (c.maxRel > 0 ? HUGE_VAL : 0.0);
          double worstMargin = worstTolerance > 0
                                   ? worst.maxRel / worstTolerance
                                   : (worst.maxRel > 0 ? HUGE_VAL : 0.0);
          if (k == 0 || margin > worstMargin || (!c.pass && worst.pass)) {
            worst = c;
            worstTolerance = tolerance;
            worstOutput = k;
          }
          pass = pass && c.pass;
        }
        if (!pass)
          ++failures;
        std::snprintf(line, sizeof(line),
                      "  max_abs %.3e  max_rel %.3e  tol %.1e  %s", worst.maxAbs,
                      worst.maxRel, worstTolerance, pass ? "PASS" : "FAIL");
        out << head << line;
        // Where it fails: the worst output on this line, any other failing
        // output on a line of its own below.
        auto where = [&](size_t k, const Comparison &c) {
          const Buffer &b = p.buffers[l.outputs[k]];
          std::snprintf(line, sizeof(line),
                        "output %zu %s, %lld of %lld elements over, element "
                        "%lld: device %.6g, reference %.6g",
                        k, shapeOf(b).c_str(), (long long)c.over,
                        (long long)b.numel(), (long long)c.worst,
                        c.worstDevice, c.worstReference);
          return std::string(line);
        };
        if (!pass && worst.worst >= 0)
          out << " (" << where(worstOutput, worst) << ")";
        out << "\n";
        for (size_t k = 0; k < byOutput.size(); ++k)
          if (k != worstOutput && !byOutput[k].pass && byOutput[k].worst >= 0) {
            std::snprintf(line, sizeof(line), "max_rel %.3e, ",
                          byOutput[k].maxRel);
            out << "    also " << line << where(k, byOutput[k]) << "\n";
          }
      }
      // Both continue from the reference's results.
      if (options.resync)
        for (size_t k = 0; k < l.outputs.size(); ++k)
          device.upload(l.outputs[k], refOutputs[k].data());
    }
  }
  out << "check-kernels: " << launches << " launches, " << failures
      << (failures == 1 ? " failure" : " failures") << "\n";
  return failures;
}

} // namespace gptc::rt
