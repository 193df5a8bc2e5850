//===- EmitGemmFallback.cpp - kernels for epilogues cuBLASLt refuses ------===//
//
// Whether cuBLASLt has an algorithm for a fused epilogue (BIAS, GELU_AUX_BIAS,
// DGELU_BGRAD, BGRADA) with gptc's types is only known on the device, so a
// program carries, beside its generated kernels, the epilogue kernels of
// kernels/gemm_fallback.cuh for the types its GEMMs use (Program.h:
// rt::GemmFallback). The runtime launches them after a plain GEMM (or a
// lesser epilogue) where cuBLASLt refuses the fused one, where they are
// the default way (GELU's derivative with a bias gradient), and where GEMM
// tuning timed them faster.
//
//===----------------------------------------------------------------------===//

#include "Emitter.h"

#include <set>
#include <utility>

namespace gptc::cuda::detail {

namespace {

using rt::GemmFallback;
using rt::isWgmmaGemm;

/// The entry point's parameters and its call of the template.
std::pair<std::string, std::string> signature(GemmFallback kind, DType t) {
  const std::string T = ctype(t);
  // gptc's own GEMMs read a and b through tensor maps (TMA).
  const std::string maps = "const TensorMap *a, const TensorMap *b, ";
  // Their block shape, a template argument: 128 x 256 tiles, those in
  // pairs, or 128 x 128 taken in turns.
  const std::string wide = rt::isPairedWgmmaGemm(kind) ? "gemm::kPairedBlocks"
                           : rt::isWideWgmmaGemm(kind) ? "gemm::kWideBlocks"
                                                       : "gemm::kTurnsBlocks";
  switch (kind) {
  case GemmFallback::Bias:
    return {T + " *d, const " + T + " *bias, " + T +
                " *pre, i64 rows, i64 cols, i64 gelu",
            "gemmFallbackBias(d, bias, pre, rows, cols, gelu != 0)"};
  case GemmFallback::GeluGrad:
    return {T + " *d, const " + T + " *pre, i64 n",
            "gemmFallbackGeluGrad(d, pre, n)"};
  case GemmFallback::Gelu:
    return {T + " *out, const " + T + " *pre, i64 n",
            "gemmFallbackGelu(out, pre, n)"};
  case GemmFallback::ColumnPartials:
    return {T + " *x, const " + T +
                " *pre, float *partial, i64 rows, i64 cols, i64 rowsPerChunk",
            "gemmFallbackColumnPartials(x, pre, partial, rows, cols, "
            "rowsPerChunk)"};
  case GemmFallback::ColumnSums:
    return {"const float *partial, " + T + " *out, i64 chunks, i64 cols",
            "gemmFallbackColumnSums(partial, out, chunks, cols)"};
  case GemmFallback::WgmmaBiasGelu:
  case GemmFallback::WgmmaWideBiasGelu:
  case GemmFallback::WgmmaPairedBiasGelu:
    return {maps + "const " + T + " *bias, " + T + " *out, " + T +
                " *pre, i64 m, i64 n, i64 k",
            std::string("gemmWgmmaBiasGelu<") + wide +
                ">(a, b, bias, out, pre, m, n, k)"};
  case GemmFallback::WgmmaGeluGradBias:
  case GemmFallback::WgmmaWideGeluGradBias:
  case GemmFallback::WgmmaPairedGeluGradBias:
    return {maps + "const " + T + " *pre, " + T +
                " *out, float *partials, i64 m, i64 n, i64 k",
            std::string("gemmWgmmaGeluGradBias<") + wide +
                ">(a, b, pre, out, partials, m, n, k)"};
  case GemmFallback::WgmmaBias:
  case GemmFallback::WgmmaWideBias:
    return {maps + "const " + T + " *bias, " + T + " *out, i64 m, i64 n, i64 k",
            std::string("gemmWgmmaBias<") + wide +
                ">(a, b, bias, out, m, n, k)"};
  case GemmFallback::WgmmaPlain:
  case GemmFallback::WgmmaWidePlain:
    return {maps + T + " *out, i64 m, i64 n, i64 k",
            std::string("gemmWgmmaPlain<") + wide + ">(a, b, out, m, n, k)"};
  case GemmFallback::WgmmaGeluGrad:
  case GemmFallback::WgmmaWideGeluGrad:
  case GemmFallback::WgmmaPairedGeluGrad:
    return {maps + "const " + T + " *pre, " + T + " *out, i64 m, i64 n, i64 k",
            std::string("gemmWgmmaGeluGrad<") + wide +
                ">(a, b, pre, out, m, n, k)"};
  case GemmFallback::WgmmaWeightGrad: // (bf16 operands, a float32 result)
  case GemmFallback::WgmmaWideWeightGrad:
  case GemmFallback::WgmmaPairedWeightGrad:
    return {maps + "const float *old, float *out, float *partials, unsigned "
                   "*counters, i64 m, i64 n, i64 k",
            std::string("gemmWgmmaWeightGrad<") + wide +
                ">(a, b, old, out, partials, counters, m, n, k)"};
  }
  return {};
}

/// 256 threads; the column partials at least 4 blocks an SM (64
/// registers), so that one wave of them (partialRows) has its rows in
/// flight on every SM; the wgmma GEMMs 384 threads, 1 block (their 213 KB
/// of stages and staged results).
std::string launchBounds(GemmFallback kind) {
  return kind == GemmFallback::ColumnPartials ? "256, 4"
         : isWgmmaGemm(kind)                  ? "384, 1"
                                              : "256";
}

} // namespace

void addGemmFallbackKernels(rt::Program &p, const std::string &arch) {
  // What each fused GEMM would need if its epilogue were refused.
  std::set<std::pair<GemmFallback, DType>> needed;
  for (const rt::Function &f : p.functions)
    for (const Launch &l : f.launches) {
      if (l.outputs.empty() || l.inputs.size() < 2)
        continue;
      DType d = p.buffers.at(l.outputs[0]).dtype;
      // gptc's own GEMM, where the target has wgmma and the launch fits
      // it (the runtime also checks the alignments), named by its bf16
      // operands (a weight gradient's result is float32).
      if (arch == "sm_90a")
        if (auto fit = rt::wgmmaGemmFit(p, l)) {
          needed.insert({fit->kind, DType::BF16});
          if (fit->wide)
            needed.insert({rt::wideWgmmaGemm(fit->kind), DType::BF16});
          if (fit->paired)
            needed.insert({rt::pairedWgmmaGemm(fit->kind), DType::BF16});
        }
      if (l.kernel == "matmul_epilogue") {
        needed.insert({GemmFallback::Bias, d});
        // GELU after cuBLASLt's BIAS epilogue: where GELU_AUX_BIAS is
        // refused, and a way GEMM tuning times against it.
        auto gelu = l.ints.find("gelu");
        if (gelu != l.ints.end() && gelu->second != 0)
          needed.insert({GemmFallback::Gelu, d});
      } else if (l.kernel == "matmul_gelu_grad") {
        // With a bias gradient, ColumnPartials applies GELU's derivative
        // on its way.
        if (l.outputs.size() > 1) {
          needed.insert({GemmFallback::ColumnPartials, d});
          needed.insert({GemmFallback::ColumnSums, d});
        } else {
          needed.insert({GemmFallback::GeluGrad, d});
        }
      } else if (l.kernel == "matmul_bias_grad" && l.outputs.size() > 1) {
        needed.insert(
            {GemmFallback::ColumnPartials, p.buffers.at(l.inputs[1]).dtype});
        needed.insert({GemmFallback::ColumnSums,
                       p.buffers.at(l.outputs[1]).dtype});
      }
    }
  for (auto [kind, t] : needed) {
    rt::DeviceKernel k;
    k.name = rt::gemmFallbackKernel(kind, t);
    auto [params, call] = signature(kind, t);
    const bool own = isWgmmaGemm(kind);
    k.source = std::string(own ? "// gptc: a GEMM of gptc's own\n"
                               : "// gptc: a cuBLASLt epilogue's fallback\n") +
               embedded("types.cuh") + "\n" + embedded("gemm_fallback.cuh") +
               (own ? std::string("\n") + embedded("attention_wgmma.cuh") +
                          "\n" + embedded("gemm_wgmma.cuh") +
                          "\n#if GPTC_WGMMA\nstatic_assert("
                          "kGemmWgmmaSharedBytes == " +
                          std::to_string(rt::kGemmWgmmaSharedBytes) +
                          "u && kGemmWgmmaWideSharedBytes == " +
                          std::to_string(rt::kGemmWgmmaWideSharedBytes) +
                          "u && kGemmWgmmaPairedSharedBytes == " +
                          std::to_string(rt::kGemmWgmmaPairedSharedBytes) +
                          "u, \"the runtime's figures\");\n#endif\n"
                    : std::string()) +
               "\n//===--- generated ---===//\n\n"
               "extern \"C\" __global__ void __launch_bounds__(" +
               launchBounds(kind) + ")\n" + k.name + "(" + params +
               ") {\n  awaitPriorKernels();\n" +
               (own ? "#if GPTC_WGMMA\n  " + call + ";\n#endif\n"
                    : "  " + call + ";\n") +
               "}\n";
    p.kernels.push_back(std::move(k));
  }
}

} // namespace gptc::cuda::detail
