//===- gpt2.cpp - GPT-2, written the way a person writes it ---------------===//
//
// Learned position embeddings, pre-LayerNorm blocks, a tanh-GELU MLP of width
// 4C, a final layernorm and an lm_head tied to the token embedding. Attention
// is spelled out (q·kᵀ, scale, causal mask, softmax, ·v) so that
// gpt-fuse-attention has something to find. Parameter names and layouts are
// Hugging Face's: Conv1D weights are (in, out), so a projection is x·W + b.
//
//===----------------------------------------------------------------------===//

#include "gptc/Models/GPT2.h"

#include "gptc/DSL/Graph.h"

#include <cmath>

namespace gptc::models {

using namespace gptc::dsl;

namespace {

// GPT-2 initialisation: N(0, 0.02) everywhere, but the projections that
// write into the residual stream are scaled by 1/sqrt(2·n_layer) so the
// stream's variance does not grow with depth.
constexpr double kInitStd = 0.02;

Tensor linear(Graph &g, const std::string &name, Tensor x, int64_t out,
              double std = kInitStd) {
  auto scope = g.scope(name);
  Tensor w = g.param("weight", {x.dim(-1), out}, Init::normal(std));
  Tensor b = g.param("bias", {out}, Init::zeros());
  return matmul(x, w) + b;
}

Tensor layernormParams(Graph &g, const std::string &name, Tensor x) {
  auto scope = g.scope(name);
  Tensor gamma = g.param("weight", {x.dim(-1)}, Init::ones());
  Tensor beta = g.param("bias", {x.dim(-1)}, Init::zeros());
  return layernorm(x, gamma, beta);
}

Tensor attention(Graph &g, const GPT2Config &cfg, Tensor x, double projStd) {
  auto scope = g.scope("attn");
  int64_t B = x.dim(0), T = x.dim(1), C = x.dim(2);
  int64_t H = cfg.nHead, D = C / H;
  std::vector<Tensor> qkv = split(linear(g, "c_attn", x, 3 * C), 2, 3);
  // [B, T, C] -> [B, H, T, D]
  auto heads = [&](Tensor t) {
    return transpose(reshape(t, {B, T, H, D}), {0, 2, 1, 3});
  };
  Tensor q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  Tensor scores = matmul(q, k, {.transposeB = true}) *
                  static_cast<float>(1.0 / std::sqrt(double(D)));
  Tensor probs = softmax(causalMask(scores));
  Tensor y = matmul(probs, v);
  y = reshape(transpose(y, {0, 2, 1, 3}), {B, T, C});
  return linear(g, "c_proj", y, C, projStd);
}

Tensor mlp(Graph &g, Tensor x, double projStd) {
  auto scope = g.scope("mlp");
  Tensor h = gelu(linear(g, "c_fc", x, 4 * x.dim(-1)));
  return linear(g, "c_proj", h, x.dim(-1), projStd);
}

} // namespace

mlir::OwningOpRef<mlir::ModuleOp> buildGPT2(mlir::MLIRContext &ctx,
                                            const GPT2Config &cfg,
                                            int64_t B, int64_t T) {
  Graph g(ctx, "gpt2_forward");
  int64_t C = cfg.nEmbd, V = cfg.vocabSize;
  Tensor tokens = g.input("tokens", {B, T});
  Tensor targets = g.input("targets", {B, T});

  Tensor wte = g.param("wte.weight", {V, C}, Init::normal(kInitStd));
  Tensor wpe = g.param("wpe.weight", {cfg.blockSize, C}, Init::normal(kInitStd));
  Tensor tokenEmb = embedding(wte, tokens);
  Tensor posEmb = embedding(wpe, positions(g, T)); // [T, C], broadcast over B
  Tensor x = tokenEmb + posEmb;

  double projStd = kInitStd / std::sqrt(2.0 * double(cfg.nLayer));
  for (int64_t layer = 0; layer < cfg.nLayer; ++layer) {
    auto block = g.scope("h." + std::to_string(layer));
    x = x + attention(g, cfg, layernormParams(g, "ln_1", x), projStd);
    x = x + mlp(g, layernormParams(g, "ln_2", x), projStd);
  }
  x = layernormParams(g, "ln_f", x);

  Tensor logits = matmul(x, wte, {.transposeB = true}); // tied lm_head
  g.output("loss", crossEntropy(logits, targets));
  g.output("logits", logits);
  return g.finish();
}

} // namespace gptc::models
