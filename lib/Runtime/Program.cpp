//===- Program.cpp - the kernel-level training program --------------------===//
//
// The small accessors of gptc/Runtime/Program.h. No MLIR here.
//
//===----------------------------------------------------------------------===//

#include "gptc/Runtime/Program.h"

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

bool isGemm(const std::string &kernel) {
  return kernel == "matmul" || kernel == "matmul_epilogue" ||
         kernel == "matmul_gelu_grad" || kernel == "matmul_bias_grad";
}

std::string gemmFallbackKernel(GemmFallback kind, DType t) {
  const char *what = kind == GemmFallback::Bias       ? "bias"
                     : kind == GemmFallback::GeluGrad ? "gelu_grad"
                     : kind == GemmFallback::ColumnPartials
                         ? "column_partials"
                         : "column_sums";
  return std::string("gemm_fallback_") + what + "_" + dtypeName(t);
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
  case Role::GradSum:
    return "grad_sum";
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

int Program::find(Role role, std::string_view binding) const {
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].role == role && buffers[i].binding == binding &&
        buffers[i].viewOf < 0)
      return int(i);
  return -1;
}

} // namespace gptc::rt
