//===- Passes.td - gptc's passes ---------------------------*- tablegen -*-===//
//
// The pipeline, in order (lib/Pipeline/Pipeline.cpp strings them together):
//
//   gpt-pad-dims        matmul and attention dimensions -> multiples of 64
//   gpt-fuse-attention  q·kᵀ, scale, mask, softmax, ·v -> gpt.flash_attention
//   gpt-mixed-precision bf16/fp16 casts around matmuls and attention (autocast)
//   gpt-autodiff        forward graph -> + gradient function
//   gpt-optimizer       + AdamW update function
//   gpt-recompute       cheap activations recomputed in the backward (opt-in)
//
//===----------------------------------------------------------------------===//

#ifndef GPTC_TRANSFORMS_PASSES_TD
#define GPTC_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def GPTPadDims : Pass<"gpt-pad-dims", "mlir::ModuleOp"> {
  let summary = "Pads the dimensions of matmuls and attention to a multiple "
                "(64), exactly";
  let description = [{
    Runs on forward functions (a `gpt.output = "loss"` result), before
    gpt-fuse-attention and gpt-autodiff. Arguments and results keep their
    real shapes: `gpt.pad` (zeros) and `gpt.slice` at the edges of the padded
    region make the function compute exactly what it did, so checkpoints,
    the trainer and AdamW see real shapes only, and a checkpoint is loadable
    whatever the padding. Padded weights exist only inside the step, as
    zeros; their gradients are sliced back by the pads' adjoints.

    1. The sequence. When the token ids' last dimension T is not a multiple,
       every value that carries T is re-typed with T padded: tokens padded
       with id 0, targets with -1 (`cross_entropy` gets `ignore_index = -1`
       and averages over the real positions only), positions (`gpt.iota`)
       padded with 0, and results such as the logits sliced back. T is both
       attention's query/key length and, as B·T, the row count of every
       GEMM; the batch B is never padded (B·T is a multiple once T is, and
       attention's batch B·H needs no alignment). Padded keys never reach a
       real query: every reduction over T must be causal (`gpt.softmax` of
       a `gpt.causal_mask`, the matmul of those probabilities by v, a causal
       `gpt.flash_attention`); layernorm over T, a non-causal softmax or a
       broadcast of an unpadded operand against T declines with a remark,
       and the sequence stays as it is.
    2. The projections. Every `gpt.matmul` by a 2-D weight pads its
       contraction K (both operands, zeros) and its output N (the weight):
       n_embd 100 → 128, 4·n_embd 400 → 448, the vocabulary 50257 → 50304
       (wte's rows, for the tied lm_head). The result is sliced back to N,
       except for `gpt.cross_entropy`, which takes the padded logits and
       `num_classes = N`, so padded columns take no part in its softmax.

    The head size of attention (batched matmuls, `gpt.flash_attention`) is
    left to the attention kernel, which tiles it in registers; padding it in
    the IR would also change what 1/√d means to gpt-fuse-attention.

    Example (`multiple=64`):

    ```mlir
    %logits = gpt.matmul %x, %wte {transpose_b}
        : tensor<4x64x768xf32>, tensor<50257x768xf32> -> tensor<4x64x50257xf32>
    %loss = gpt.cross_entropy %logits, %targets
        : tensor<4x64x50257xf32>, tensor<4x64xi32> -> tensor<f32>
    ```

    becomes

    ```mlir
    %wte_p = gpt.pad %wte : tensor<50257x768xf32> -> tensor<50304x768xf32>
    %logits_p = gpt.matmul %x, %wte_p {transpose_b}
        : tensor<4x64x768xf32>, tensor<50304x768xf32> -> tensor<4x64x50304xf32>
    %loss = gpt.cross_entropy %logits_p, %targets {num_classes = 50257 : i64}
        : tensor<4x64x50304xf32>, tensor<4x64xi32> -> tensor<f32>
    ```
  }];
  let options = [
    Option<"multiple", "multiple", "int64_t", "64",
           "Pad every matmul and attention dimension to a multiple of this">,
  ];
  let dependentDialects = ["::gptc::gpt::GPTDialect"];
}

def GPTFuseAttention : Pass<"gpt-fuse-attention", "mlir::ModuleOp"> {
  let summary = "Replaces attention written as q·kᵀ, scale, mask, softmax, ·v "
                "with gpt.flash_attention";
  let description = [{
    Finds scaled dot-product attention as a person writes it and replaces it
    with one `gpt.flash_attention`, whose gradient (after gpt-autodiff) is
    one `gpt.flash_attention_grad` that recomputes the probabilities instead
    of keeping the [T, T] matrix alive. The search starts at each matmul
    of a softmax by v, walks up, and accepts:

    - the scores `q·kᵀ`: `gpt.matmul %q, %k {transpose_b}`, or a matmul with
      an explicit `gpt.transpose` of k's last two dimensions;
    - a scale of 1/√d (d the head size), as a multiplication by a splat
      constant or a division by one, on the scores, on q or on k (several
      factors multiply);
    - an optional causal mask: `gpt.causal_mask` (fill -inf), or an added
      constant with 0 on and below the diagonal and -inf above; no mask
      makes `causal = false`;
    - the probabilities multiplied by v, `gpt.matmul %p, %v`.

    q, k and v already in [B, H, T, D] are used as they are; heads folded
    into one batch dimension ([B·H, T, D]) are unfolded by looking through
    the reshape that folded them, or by a new reshape, and the output is
    reshaped back.

    GPT-2's layout becomes `gpt.flash_attention_qkv` instead (with
    `pack-qkv`, the default): q, k and v parts #0, #1 and #2 of one
    `gpt.split` along the last axis of a [B, T, 3C] tensor, each as
    `gpt.transpose [0, 2, 1, 3]` of `gpt.reshape` to [B, T, H, D], and the
    output used only by `gpt.transpose [0, 2, 1, 3]` and a `gpt.reshape`
    to [B, T, C]. The op reads the heads from the packed tensor in place
    and writes [B, T, C]; the split, the head transposes and the merge
    disappear (and with them their gradients' copies after gpt-autodiff).
    Head splits that are nearly that (the parts in another order, another
    permutation, a split along another axis, parts of different splits, an
    output not merged back) keep the [B, H, T, D] op, with a remark
    `did not pack attention: <why>` at the softmax.

    Anything that is not exactly attention stays as it is, with a remark
    `did not fuse attention: <why>` at the softmax: a mask that is not
    causal, a scale that is not 1/√d, probabilities or scores used by other
    ops.

    Example:

    ```mlir
    %scale = gpt.constant dense<0.176776692> : tensor<f32>
    %s = gpt.matmul %q, %k {transpose_b} : tensor<2x4x8x32xf32>, tensor<2x4x8x32xf32> -> tensor<2x4x8x8xf32>
    %c = gpt.mul %s, %scale : tensor<2x4x8x8xf32>, tensor<f32> -> tensor<2x4x8x8xf32>
    %m = gpt.causal_mask %c : tensor<2x4x8x8xf32>
    %p = gpt.softmax %m : tensor<2x4x8x8xf32>
    %y = gpt.matmul %p, %v : tensor<2x4x8x8xf32>, tensor<2x4x8x32xf32> -> tensor<2x4x8x32xf32>
    ```

    becomes

    ```mlir
    %y, %lse = gpt.flash_attention %q, %k, %v {causal, scale = 0.176776692 : f32}
        : tensor<2x4x8x32xf32>, tensor<2x4x8x32xf32>, tensor<2x4x8x32xf32>
        -> tensor<2x4x8x32xf32>, tensor<2x4x8xf32>
    ```

    and GPT-2's block, from `%qkv` [B, T, 3C] to the merged `%y` [B, T, C]:

    ```mlir
    %y, %lse = gpt.flash_attention_qkv %qkv {causal, num_heads = 12 : i64,
                                             scale = 0.125 : f32}
        : tensor<4x1024x2304xf32> -> tensor<4x1024x768xf32>, tensor<4x12x1024xf32>
    ```
  }];
  let options = [
    Option<"packQKV", "pack-qkv", "bool", "true",
           "Read q, k and v split from one [B, T, 3C] tensor in place "
           "(gpt.flash_attention_qkv); false: always the [B, H, T, D] op">,
  ];
  let dependentDialects = ["::gptc::gpt::GPTDialect"];
}

def GPTMixedPrecision : Pass<"gpt-mixed-precision", "mlir::ModuleOp"> {
  let summary = "Casts matmul and attention operands to bf16 or fp16 "
                "(autocast), or records TF32";
  let description = [{
    Policies (`policy=`):

    - `fp32`: nothing changes.
    - `tf32`: types stay float32; the module gets `gpt.precision = "tf32"`,
      telling the runtime that its GEMMs may round inputs to TF32 (the CPU
      executor computes in float32 regardless).
    - `bf16`: autocast. Every `gpt.matmul`, `gpt.flash_attention` and
      `gpt.flash_attention_qkv` (one cast, on its packed input) of a
      function with a loss gets `gpt.cast` copies of its float32 operands in
      bf16, computes in bf16 with float32 accumulation, writes a bf16
      result, and one `gpt.cast` widens that result back to float32 for the
      ops that follow. Layernorm, GELU, residual adds, the loss and the
      optimizer stay float32; parameters stay float32 (master weights) and
      their bf16 copies are casts. The module gets `gpt.precision = "bf16"`.
    - `fp16`: as bf16 with f16; the forward function also gets
      `gpt.loss_scaling`, so gpt-autodiff seeds the backward pass with a
      run-time `gpt.hyper = "loss_scale"` argument (dynamic loss scaling).

    Runs after gpt-fuse-attention and before gpt-autodiff, so the backward
    GEMMs and the attention gradients read the same low-precision copies and
    the casts' VJPs return float32 gradients.

    Example (bf16):

    ```mlir
    %y = gpt.matmul %x, %w : tensor<8x16xf32>, tensor<16x32xf32> -> tensor<8x32xf32>
    ```

    becomes

    ```mlir
    %xl = gpt.cast %x : tensor<8x16xf32> -> tensor<8x16xbf16>
    %wl = gpt.cast %w : tensor<16x32xf32> -> tensor<16x32xbf16>
    %yl = gpt.matmul %xl, %wl : tensor<8x16xbf16>, tensor<16x32xbf16> -> tensor<8x32xbf16>
    %y = gpt.cast %yl : tensor<8x32xbf16> -> tensor<8x32xf32>
    ```
  }];
  let options = [
    Option<"policy", "policy", "std::string", "\"fp32\"",
           "fp32, tf32, bf16 or fp16">,
  ];
  let dependentDialects = ["::gptc::gpt::GPTDialect"];
}

def GPTAutodiff : Pass<"gpt-autodiff", "mlir::ModuleOp"> {
  let summary = "Derives the gradient of the loss with respect to every parameter";
  let description = [{
    For every function with a result tagged `gpt.output = "loss"`, adds a
    function `<name>_grad` with the same arguments that returns the loss and
    the gradient of each `gpt.param` argument (result attribute
    `gpt.grad = "<param>"`), in argument order. The backward ops come from
    each op's `DifferentiableOpInterface::buildVJP` rule, walked in reverse;
    gradients of a value used twice (the tied `wte` of GPT-2) are summed.
    Backward ops are located at their forward op, inside `fused<"vjp">`.

    Example: `y = gpt.matmul %x, %w` contributes
    `dx = gpt.matmul %dy, %w {transpose_b}` and
    `dw = gpt.matmul %x2d, %dy2d {transpose_a}`.
  }];
  let dependentDialects = ["::gptc::gpt::GPTDialect"];
}

def GPTOptimizer : Pass<"gpt-optimizer", "mlir::ModuleOp"> {
  let summary = "Appends the AdamW update as a function of the IR";
  let description = [{
    Adds `adamw_update` for the parameters of the gradient function that
    gpt-autodiff made: it scales the summed gradients by `grad_scale`
    (1/grad_accum), computes their global L2 norm, clips them to `clip`
    (PyTorch's clip_grad_norm_: coefficient min(clip / (norm + 1e-6), 1)),
    and applies AdamW as torch.optim.AdamW does: decoupled weight decay
    (2-D parameters only), moments with bias correction, then
    `p -= lr / bc1 · m / (sqrt(v) / sqrt(bc2) + eps)`. The learning rate
    and the step number are arguments: the schedule lives in the runtime.
  }];
  let options = [
    Option<"beta1", "beta1", "double", "0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", "0.95", "AdamW beta2">,
    Option<"eps", "eps", "double", "1e-8", "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double", "0.1",
           "Decoupled weight decay, applied to 2-D parameters only">,
    Option<"clip", "clip", "double", "1.0",
           "Clip gradients to this global L2 norm; 0 turns clipping off">,
  ];
  let dependentDialects = ["::gptc::gpt::GPTDialect"];
}

def GPTRecompute : Pass<"gpt-recompute", "mlir::ModuleOp"> {
  let summary = "Recomputes cheap activations in the backward instead of "
                "keeping them from the forward";
  let description = [{
    Activation recomputation: in a gradient function, a forward value that
    backward ops read and that one cheap op computes (`gpt.gelu` for
    `ops=gelu`, `gpt.layernorm` for `ops=layernorm`), possibly followed by
    `gpt.cast`s, is computed again right before the first backward op that
    reads it, from inputs the backward keeps anyway; the backward reads the
    copy. The forward value is then dead once the forward has used it, and
    the memory plan reuses its buffer, so the activations a step keeps
    shrink by what each recomputed value held:

    ```mlir
    %h = gpt.gelu %z                  // forward; %z is kept for gelu_grad
    %a = gpt.cast %h : f32 -> bf16    // read by the c_proj GEMM ...
    ...
    %a2 = gpt.cast (gpt.gelu %z)      // backward, loc(fused<"recompute">)
    %dW = gpt.matmul %a2, %dy {transpose_a}   // ... and now by nothing else
    ```

    In GPT-2 per block and token that is 4·n_embd bf16 values of GELU
    output (`gelu`) and 2·n_embd of layernorm output (`layernorm`), at the
    price of one GELU and two layernorm kernels more in the backward. The
    copies are located at their forward op inside `fused<"recompute">`;
    gpt-fuse-matmul-epilogue then fuses only the forward GELU into its GEMM
    and the copy reads the aux pre-activation. A value whose inputs the
    backward would not keep (recomputing would keep them longer) is left
    alone, with a remark. Runs after gpt-optimizer's CSE (which would merge
    the copies back), before the fusion passes.
  }];
  let options = [
    ListOption<"ops", "ops", "std::string",
               "What to recompute: gelu, layernorm (none if empty)">,
  ];
  let dependentDialects = ["::gptc::gpt::GPTDialect"];
}

def GPTWeightCopies : Pass<"gpt-weight-copies", "mlir::ModuleOp"> {
  let summary = "Keeps the parameters' low-precision copies across steps: "
                "the update writes them, the gradient function reads them";
  let description = [{
    Under autocast the gradient function narrows each float32 master
    weight it multiplies (`gpt.cast`, and `gpt.pad` first for the padded
    lm_head weight), every micro-batch: for GPT-2 124M in bf16, 124M
    parameters read as float32 and written as bf16 a step, two launches
    (a multi-tensor cast, and wte's pad). The copies change only when the
    update changes the weights, so the update writes them: AdamW's kernel
    stores each new weight once more, as bf16, and the casts are gone from
    the step.

    ```mlir
    func.func @grads(%w: tensor<64x128xf32> {gpt.param = "w"}, ...) {
      %wl = gpt.cast %w : tensor<64x128xf32> -> tensor<64x128xbf16>
      ...
    func.func @adamw_update(...) -> (tensor<64x128xf32> {gpt.param = "w"}, ...)
    ```

    becomes

    ```mlir
    func.func @grads(%w: tensor<64x128xf32> {gpt.param = "w"}, ...,
                     %wl: tensor<64x128xbf16> {gpt.param_copy = "w"}) {
      ...
    func.func @adamw_update(...) -> (tensor<64x128xf32> {gpt.param = "w"}, ...,
                                     tensor<64x128xbf16> {gpt.param_copy = "w"}) {
      %c = gpt.cast %w_new : tensor<64x128xf32> -> tensor<64x128xbf16>
    ```

    A padded copy (`gpt.cast` of `gpt.pad` with value 0) padded in the
    leading dimension alone is written by its leading rows: the update
    returns the cast of the new weight, and the zero rows after it never
    change. Any other padding is written whole (`gpt.pad` in the update).
    What a `gpt.param_copy` argument holds is defined by its type (the
    dialect's description), so the runtime can make it from the weights
    at load. The forward function (evaluation) keeps its casts. A
    parameter read through two different copies keeps its casts, with a
    remark. Without an update function (`adamw_update`) or low-precision
    casts the module is left alone. Runs after gpt-fuse-matmul-epilogue
    (which narrows the biases its epilogues add), before
    gpt-fuse-elementwise (which folds each new copy's cast into AdamW's
    kernel); `gptc --weight-copies=false` leaves it out.
  }];
  let dependentDialects = ["::gptc::gpt::GPTDialect"];
}

def GPTAttentionBiasGrad : Pass<"gpt-attention-bias-grad", "mlir::ModuleOp"> {
  let summary = "Takes the packed q|k|v projection's bias gradient from "
                "attention's identities instead of a pass over dq|dk|dv";
  let description = [{
    c_attn's bias gradient is the column sums of `gpt.flash_attention_qkv_grad`'s
    `dqkv` (`gpt.reduce_sum` to `[3·C]`, through a widening cast under
    autocast). Two thirds of it need not read dqkv:
    - **k: zero.** A bias on k adds `q_i · b` to every score of query row
      i, which the softmax takes away: `Σ_j dS_ij = Σ_j P_ij (dP_ij − D_i)
      = D_i − D_i = 0`, so `Σ_j dk_j = scale · Σ_i (Σ_j dS_ij) q_i = 0`.
      The GEMM summed the rounding of dk's terms; this is the exact value.
    - **v: the column sums of `dout`.** `dv = Pᵀ dout` and each row of P
      sums to 1: `Σ_j dv_j = Σ_i (Σ_j P_ij) dout_i = Σ_i dout_i`. Where
      dout is a GEMM's product `A·W` (through casts) and the function
      already takes A's float32 column sums before this point (GPT-2:
      attention's c_proj, whose bias gradient they are), those sums times
      the float32 W, `Σ_i (A·W)_i = (Σ_i A_i)·W`: a `[1, C]` GEMM, and
      dout is not read.
    - **q**: the column sums of the q third of each row, a
      `gpt.reduce_sum` of a `gpt.slice` (gpt-fuse-elementwise reads it
      in place: the reduction's `corner`).

    ```mlir
    %dqkv = gpt.flash_attention_qkv_grad %qkv, %out, %lse, %dout, %delta ...
    %w = gpt.cast %dqkv : tensor<2x64x384xbf16> -> tensor<2x64x384xf32>
    %db = gpt.reduce_sum %w : tensor<2x64x384xf32> -> tensor<384xf32>
    ```

    becomes

    ```mlir
    %r = gpt.reshape %w : tensor<2x64x384xf32> -> tensor<128x3x128xf32>
    %q = gpt.slice %r : tensor<128x3x128xf32> -> tensor<128x1x128xf32>
    %dbq = gpt.reduce_sum %q : tensor<128x1x128xf32> -> tensor<128xf32>
    %dbk = gpt.constant dense<0.0> : tensor<128xf32>  // at the entry, once
    // (dout here has no GEMM's sums to take: it is summed)
    %o = gpt.cast %dout : tensor<2x64x128xbf16> -> tensor<2x64x128xf32>
    %dbv = gpt.reduce_sum %o : tensor<2x64x128xf32> -> tensor<128xf32>
    %db = gpt.concat %dbq, %dbk, %dbv {axis = 0 : i64} ...
    ```

    and gpt-fuse-matmul-epilogue then finds no bias gradient for the weight
    gradient's GEMM to sum (no BGRADA: a plain GEMM). The sums of a third
    of each row (dq's) and a [1, C] GEMM replace a pass over all of
    dqkv.
    Runs after gpt-optimizer (and gpt-recompute), before
    gpt-fuse-matmul-epilogue; `gptc --bias-grads=gemm` leaves it out.
  }];
  let dependentDialects = ["::gptc::gpt::GPTDialect"];
}

def GPTFuseMatmulEpilogue : Pass<"gpt-fuse-matmul-epilogue", "mlir::ModuleOp"> {
  let summary = "Makes a projection's bias add and tanh GELU, and their "
                "gradients, epilogues of its GEMMs";
  let description = [{
    `gpt.matmul` (through the widening `gpt.cast` gpt-mixed-precision put
    after it) → `gpt.add` of a float32 `[N]` bias → optionally `gpt.gelu`
    (tanh form) becomes one `gpt.matmul_epilogue`: cuBLASLt's BIAS,
    GELU_BIAS or GELU_AUX_BIAS epilogue, the last keeping the
    pre-activation that the backward's `gelu_grad` reads. The product is
    accumulated, biased and activated in float32 and rounded once: to the
    operands' type under autocast (bf16, f16), as torch.autocast's linear
    writes it, else to float32. The unfused bf16 chain rounded the product
    to bf16 before the bias.
    Declines with a remark when the chain is not exactly that (an addend
    that is not an [N] bias, a product also used unbiased, an erf GELU, a
    batched weight).

    cuBLASLt keeps the bias, the aux pre-activation and a bias gradient in
    D's type. Under autocast the op writes the operands' narrow type: D,
    the aux (rounded, as autocast saves GELU's bf16 input) and a cast copy
    of the bias. Readers that narrowed the value take it as it is; float32
    readers (an output projection's residual add) get a widening cast,
    which gpt-fuse-elementwise folds into their group (it reads the bf16
    value and widens it per element). The backward that reads a narrow aux writes its D
    and bias gradient narrow too (the gradient widened afterwards), and a
    weight-gradient GEMM with a bias gradient absorbs the widening cast of
    its weight gradient, so both are float32.

    The backward likewise: `gpt.matmul` (through its widening cast) →
    `gpt.gelu_grad` of the pre-activation → optionally `gpt.reduce_sum` to
    `[N]` becomes one `gpt.matmul_gelu_grad` (DGELU_BGRAD, or DGELU); a
    bias gradient `gpt.reduce_sum` of `dy` to `[N]` and the weight-gradient
    GEMM that reads `dy` (through its cast and reshape) as its right
    operand become one `gpt.matmul_bias_grad` (BGRADA). Runs after
    gpt-optimizer, before gpt-fuse-elementwise.
  }];
  let options = [
    Option<"geluBiasGrads", "gelu-bias-grads", "bool", /*default=*/"false",
           "The bias gradient of GELU's derivative (GPT-2's c_fc) goes to "
           "the gpt.matmul_gelu_grad that writes the derivative (cuBLASLt's "
           "DGELU_BGRAD, gptc's column sums after its DGELU, or on sm_90a "
           "gptc's own GEMM summing it on its way), not to its "
           "weight-gradient GEMM (BGRADA)">
  ];
  let dependentDialects = ["::gptc::gpt::GPTDialect"];
}

def GPTFuseElementwise : Pass<"gpt-fuse-elementwise", "mlir::ModuleOp"> {
  let summary = "Fuses chains of elementwise ops into gpt.fused_elementwise "
                "kernels, and same-bodied kernels into multi-tensor ones";
  let description = [{
    Runs over every function of the training step (forward, gradient,
    AdamW update), in three steps:

    1. A `gpt.cross_entropy` and a `gpt.cross_entropy_grad` of the same
       logits and targets become one `gpt.cross_entropy_with_grad`, which
       reads the logits once (lib/Transforms/FuseLoss.cpp); a tied
       embedding's summed gradients, one `gpt.embedding_grad` with an
       addend (FuseEmbeddingGrad.cpp). A `gpt.reduce_sum` of a
       leading-corner `gpt.slice` or of a widening `gpt.cast` sums the
       operand where it lies: its `corner` the slice's shape, its terms
       widened as read (FoldIntoReduceSum.cpp).
    2. Producer→consumer chains of float32 elementwise ops (`gpt.add`,
       `sub`, `mul`, `div`, `max`, `min`, `neg`, `exp`, `log`, `tanh`,
       `sqrt`, `rsqrt`, `gelu`, `gelu_grad`) of one shape become one
       `gpt.fused_elementwise` whose body is `arith`/`math` scalar code.
       Splat constants move into the body; smaller operands (a bias, a
       scalar) are broadcast inputs. Groups grow from the last op upwards.
       A producer joins when every other user runs after the group (it
       becomes an extra result: a multi-output group); a single `add`,
       `sub`, `mul`, `max`, `min` or `neg` of values computed outside any
       group, with at most one non-scalar operand, is instead recomputed in
       each group that needs it (it costs no extra reads); nothing else is
       ever computed twice. Reductions, matmuls, layernorm, softmax,
       attention and the loss are boundaries. An input that is a widening
       `gpt.cast` of a bf16 or f16 value is read narrow and widened in the
       body (`arith.extf`: the same values); the cast goes if nothing
       else reads it.
    3. `gpt.fused_elementwise` ops with identical bodies over full-shape
       tensors and shared scalars (the per-parameter AdamW updates) merge
       into one `gpt.multi_tensor_elementwise`, when one place in the
       function sees all their inputs and precedes all their users.

    A producer left out of its elementwise consumer's group gets a remark
    when the reason is not plain (it is broadcast, or it is an expensive op
    needed elsewhere first): `did not fuse 'gpt.exp' into its consumer
    'gpt.add': ...`. Cheap shared values (the residual stream) and scalar
    chains stay quiet, so GPT-2 compiles without remarks.

    Example:

    ```mlir
    %b = gpt.add %mm, %bias : tensor<8x512xf32>, tensor<512xf32> -> tensor<8x512xf32>
    %g = gpt.gelu %b : tensor<8x512xf32>
    ```

    becomes (%b is also kept for gelu_grad, so the group returns it)

    ```mlir
    %r:2 = gpt.fused_elementwise(%mm, %bias : tensor<8x512xf32>, tensor<512xf32>)
        -> tensor<8x512xf32>, tensor<8x512xf32> {
    ^bb0(%x: f32, %c: f32):
      %0 = arith.addf %x, %c : f32
      ...
      gpt.yield %0, %9 : f32, f32
    }
    ```
  }];
  let options = [
    Option<"layernormPrologue", "layernorm-prologue", "bool",
           /*default=*/"true",
           "After step 2, a gpt.layernorm of a gpt.fused_elementwise whose "
           "other users run later becomes one gpt.fused_layernorm (the "
           "elementwise body as the layernorm's prologue: GPT-2's residual "
           "add + layernorm), and a gpt.layernorm_grad whose dx only a "
           "gpt.fused_elementwise reads one gpt.fused_layernorm_grad (that "
           "body as its epilogue: the residual gradient's add); declined "
           "pairs get a remark (lib/Transforms/FuseLayerNormPrologue.cpp)">,
    Option<"foldCasts", "fold-casts", "bool", /*default=*/"true",
           "First, a gpt.cast next to a gpt.transpose, slice, pad, concat "
           "or split (reshapes between seen through) becomes that op's "
           "element-type conversion where that is exact: one kernel moves "
           "and converts; after the layernorm prologues, the cast of a "
           "gpt.fused_layernorm's result becomes the type it writes, and "
           "a layernorm gradient reads its dy before the widening cast "
           "(lib/Transforms/FoldCasts.cpp)">,
    Option<"embeddingGradAddend", "embedding-grad-addend", "bool",
           /*default=*/"true",
           "After the loss pattern, a float32 gpt.add of a "
           "gpt.embedding_grad that nothing else reads (a tied table's two "
           "gradients) becomes that embedding_grad with the other operand "
           "as its addend: the sum is no kernel of its own "
           "(lib/Transforms/FuseEmbeddingGrad.cpp)">,
    Option<"layernormBiasGrads", "layernorm-bias-grads", "bool",
           /*default=*/"true",
           "After the casts are folded, a gpt.matmul_bias_grad whose right "
           "operand a gpt.fused_layernorm_grad writes (GPT-2's output "
           "projections: their output gradient is the residual gradient) "
           "becomes a plain gpt.matmul, the bias gradient that op's column "
           "sums of the value it yields: no GEMM epilogue pass over dy "
           "(lib/Transforms/FuseLayerNormBiasGrad.cpp)">,
    Option<"parameterCasts", "parameter-casts", "bool", /*default=*/"true",
           "Last, the parameters' low-precision copies (one gpt.cast of a "
           "gpt.param argument each) become one gpt.multi_tensor_elementwise "
           "per target type: one launch per function instead of one per "
           "weight and bias; likewise the returned gradients' widening "
           "casts (bf16/f16 to f32), merged just before the return">
  ];
  let dependentDialects = ["::gptc::gpt::GPTDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect"];
}

#endif // GPTC_TRANSFORMS_PASSES_TD
