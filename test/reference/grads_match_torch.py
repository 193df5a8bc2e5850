#!/usr/bin/env python3
"""gptc's gradients (`gptc eval --grads-out`) against PyTorch and against
finite differences, and the loss at initialisation.

Every check writes weights (safetensors) and a token file, runs

  gptc eval --model=gpt2-tiny --n-layer=L --n-head=H --n-embd=C
            --block-size=BS --vocab-size=V --init-from=W.safetensors
            --data=TOKENS --batch=B --seq=T --grads-out=G.safetensors

and reads G.safetensors: one F32 tensor per parameter, in Hugging Face names
and shapes, holding d(mean loss)/d(parameter) for the first batch of the token
file (inputs tokens[0:B*T], targets tokens[1:B*T+1], as gpt2_torch.
batch_from_tokens). wte is tied to the lm_head, so its gradient must hold both
contributions. Checks (the first argument):

  autograd  every parameter's gradient against PyTorch autograd in float32,
            <= GRAD_RTOL = 1e-5 in the per-tensor metric below; also the loss.
  fd        every parameter tensor against float64 central finite
            differences of the PyTorch loss: sampled entries (random ones,
            the largest, and the wte rows that get both the embedding and the
            lm_head contribution) and one random direction per tensor.
  fd-self   gptc's gradient against finite differences of gptc's *own*
            loss (gptc eval run on perturbed float32 weights), along
            directions; independent of PyTorch altogether.
  init-loss with GPT-2's initialisation (weights N(0, 0.02), zero biases,
            unit LayerNorm gains) the loss is close to ln(V): gptc eval
            on such weights written here, and the first step of `gptc
            train` from gptc's own initialisation (two seeds).

Exits 0 on agreement, 1 with a report otherwise (`-v` prints the report on
success too).

The metric, per tensor: max|g_gptc - g_ref| / max|g_ref|
----------------------------------------------------------
The same infinity-norm relative error as the logits (eval_matches_torch.py).
A gradient entry is a sum over all B*T positions (and, through the chain
rule, over channels and heads) of products whose size is set by the tensor's
gradient as a whole, so float32 rounding leaves an absolute error that scales
with max|g| of the tensor, not with the entry: an entry that is small by
cancellation (or exactly zero, as the wpe rows at positions >= T) carries the
same absolute error as a large one. A per-element relative test would fail
those for no reason or need an atol that hides real bugs; normalising by the
tensor's largest entry is that atol, set at the tensor's own scale, per
tensor, so a small tensor (a LayerNorm bias with max|g| ~ 1e-4) is not judged
against the scale of a large one (wte, ~0.5).

autograd: why 1e-5 (GRAD_RTOL)
------------------------------
float32 eps = 6e-8. On the configs of grads_torch.test, PyTorch's float32
gradients are 1.9e-7 to 9.7e-7 from float64 autograd in this metric, and
gptc's are as close (0.8e-7 to 7.0e-7 from PyTorch float32, 1.5e-7 to
8.5e-7 from float64, when this was written; `-v` prints all three for
every tensor). 1e-5 leaves >= 14x for a different summation order, while
gradient bugs are far above it (`autograd --bug-check` measures, with
PyTorch alone, that the tolerance separates them: GELU's derivative of the
erf form moves some tensor by 5e-4 to 9e-4, LayerNorm eps 1e-6 by 6e-3 to
7e-3; the gradient of the summed loss or of a loss without the target term
are off by O(1)).

fd: the finite differences and why 1e-4
---------------------------------------
The reference is PyTorch's loss in float64 -- the same mathematical function
as gptc's graph (tanh GELU, LayerNorm eps 1e-5, causal softmax attention,
tied lm_head, mean cross-entropy), evaluated so accurately that the finite
difference, not the model, is the only error in the reference. We use the
fourth-order central stencil

  g ~ (-L(x+2h) + 8 L(x+h) - 8 L(x-h) + L(x-2h)) / (12 h),   h = 1e-3,

whose truncation error is h^4 f^(5) / 30 ~ 1e-12 and whose rounding error is
~ eps64 * |L| / h ~ 1e-12 (eps64 = 2.2e-16, L ~ 4). Measured against float64
autograd on the fd config, the stencil is within 3e-9 of the tensor scale for
every tensor (-v prints it; the check fails if it is ever above FD_REF_TOL =
1e-7, which would mean the reference is not good enough to judge float32).
Plain two-point central differences would not do: with h = 1e-4 they are off
by 2e-7 (truncation) and with h = 1e-5 by 1e-7 (rounding, because LayerNorm
gradients here are ~1e-4), the same size as float32's own error.

gptc computes in float32, so against this (essentially exact) derivative its
error is its float32 rounding: a few eps per operation, accumulated along the
~10 ops of each layer forward and backward and over sums of B*T and C terms
(growing like sqrt(n)). In the entry metric below that is <= 9e-7 on the
sampled entries of grads_fd.test, and 1.9e-6 at worst over every entry of
its first config (--samples=-1, ~10 s). FD_RTOL = 1e-4 is ~50x above that,
so float32 never trips it, and below the bugs: the smallest listed above,
GELU's erf form, moves gradients by 5e-4 to 9e-4 of their tensor's scale; a lost
contribution to the tied wte, a wrong factor or transpose by >= 1e-2. (The
per-tensor autograd check is the tight one, at 1e-5; this one is the
independent confirmation without autograd.) Each sampled entry must satisfy

  |g_gptc[i] - fd[i]| <= FD_RTOL * max(|fd[i]|, FD_FLOOR * s_t)

with s_t = max|g_gptc| of the tensor and FD_FLOOR = 0.1: a true relative
error for every entry bigger than a tenth of the tensor's largest, and the
per-tensor metric (at 1e-5) for smaller ones. s_t comes from gptc, so the
entry holding that maximum is always among the samples: if gptc's largest
entry were wrong it fails by itself. For each tensor one random unit
direction v (dense, so it touches every entry) must satisfy
|<g_gptc, v> - D_v L| <= FD_RTOL * ||g_gptc||_2 (|<g, v>| <= ||g||_2).

The tied wte rows get both contributions: the token ids that appear among
the inputs get the embedding gradient plus the lm_head's, the ids that
appear nowhere get only the lm_head's (from the softmax). The check samples
both kinds of rows and prints how big each contribution is there, so one can
see that losing either one would fail by far more than the tolerance.

fd-self: differences of gptc's own loss
---------------------------------------
gptc reads float32 weights and prints `loss %.6f`, so its loss is known to
~5e-7 (printing) + ~4e-7 (float32 rounding): LOSS_NOISE = 1e-6. Entry-wise
differences of that are meaningless (an entry with gradient 1e-3 moved by
h = 1e-2 changes the loss by 1e-5: 10% noise). Along a direction of large
derivative they are not: along u = g_S / ||g_S|| for a set S of tensors
the loss changes at the rate ||g_S||. We use S = all parameters, wte alone
(the tied weight) and all but wte, and compare

  D(s) = (L(w + s u) - L(w - s u)) / (2 s),  s = h and h/2, h = 0.02,
  Richardson (4 D(h/2) - D(h)) / 3           (truncation O(h^4))

with what gptc's gradient predicts for the perturbation actually applied
(the perturbed weights are rounded to float32; the prediction uses the
rounded minus the stored weights). The step is a compromise: the loss is
strongly curved along g (D(0.02) is 0.003% to 1.6% below ||g_S|| for
these three directions, D(0.1) up to 10%), which Richardson reduces to
<= 1e-4 (measured in float64 PyTorch: 1e-5, 2e-9 and 1e-4), while the
loss's noise contributes up to 1.9 * LOSS_NOISE / (h ||g_S||) ~ 1e-4 of the
result. FD_SELF_TOL = 1e-3 is 5x their sum (the check refuses a direction
whose noise bound is above a fifth of the tolerance, and prints the
bound); observed errors are 3e-6 to 1.2e-4. It tests, without PyTorch,
that gptc's backward pass is the derivative of gptc's own forward pass
along these directions -- in particular the scale of the whole gradient
and of the tied wte gradient (both contributions). It cannot see an error orthogonal to g_S; the fd and
autograd checks do.
"""

import argparse
import math
import os
import re
import shlex
import subprocess
import sys

import torch

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch as ref  # noqa: E402

GRAD_RTOL = 1e-5        # autograd, per-tensor infinity-norm relative error
LOSS_RTOL = ref.LOSS_RTOL
FD_H = 1e-3             # step of the fourth-order stencil (float64)
FD_RTOL = 1e-4          # gptc (float32) vs float64 finite differences
FD_FLOOR = 0.1          # relative floor: fraction of the tensor's max |g|
FD_REF_TOL = 1e-7       # the stencil itself vs float64 autograd (sanity)
FD_SELF_TOL = 1e-3      # gptc vs differences of gptc's own printed loss
INIT_LOSS_RTOL = 0.02   # |loss - ln V| / ln V at GPT-2's initialisation


Report = ref.Report


def parse_args(argv):
    ap = argparse.ArgumentParser(description="gptc gradients vs PyTorch/FD")
    ap.add_argument("check", choices=["autograd", "fd", "fd-self",
                                      "init-loss"])
    ap.add_argument("--gptc", required=True, help="path of the gptc binary")
    ap.add_argument("--tmp", required=True, help="scratch folder (lit's %%t)")
    ap.add_argument("--model", default="gpt2-tiny")
    ap.add_argument("--n-layer", type=int, default=1)
    ap.add_argument("--n-head", type=int, default=2)
    ap.add_argument("--n-embd", type=int, default=16)
    ap.add_argument("--block-size", type=int, default=8)
    ap.add_argument("--vocab-size", type=int, default=50)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--extra-tokens", type=int, default=37,
                    help="tokens in the file beyond the B*T+1 that are used")
    ap.add_argument("--samples", type=int, default=4,
                    help="fd: random entries per tensor (besides the "
                    "largest and the wte/wpe rows chosen on purpose); -1: "
                    "every entry (~10 s for the default config)")
    ap.add_argument("--bug-check", action="store_true",
                    help="autograd: also show, with PyTorch alone, that the "
                    "tolerance separates typical gradient bugs")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--verbose", "-v", action="store_true")
    return ap.parse_args(argv)


# --------------------------------------------------------------------------
# Running gptc
# --------------------------------------------------------------------------

class Setup:
    """Config, weights, tokens and the files gptc reads."""

    def __init__(self, args, params, tag, repeat=False):
        self.args = args
        self.cfg = ref.GPT2Config(args.n_layer, args.n_head, args.n_embd,
                                  args.block_size, args.vocab_size)
        self.B, self.T = args.batch, args.seq
        os.makedirs(args.tmp, exist_ok=True)
        self.tag = "%s_L%dH%dC%dBS%dV%d_B%dT%d_s%d" % (
            tag, args.n_layer, args.n_head, args.n_embd, args.block_size,
            args.vocab_size, self.B, self.T, args.seed)
        self.params = params            # float32, exactly what is stored
        self.tokens = ref.random_tokens(self.B * self.T + 1 +
                                        args.extra_tokens,
                                        args.vocab_size, seed=args.seed)
        if repeat and self.B * self.T >= 3:
            # One id three times among the inputs, in more than one row
            # when B > 1 (and so also among the targets): its wte row gets
            # several embedding contributions besides the lm_head's.
            n = self.B * self.T
            for i in (n // 3, (2 * n) // 3):
                self.tokens[i] = self.tokens[0]
        self.idx, self.tgt = ref.batch_from_tokens(self.tokens, self.B,
                                                   self.T)
        self.data_path = self.path("tokens.bin")
        ref.write_llmc_shard(self.data_path, self.tokens)
        self.weights_path = self.path("weights.safetensors")
        ref.write_safetensors(self.weights_path, params)

    def path(self, name):
        return os.path.join(self.args.tmp, "%s_%s" % (self.tag, name))

    def run_gptc(self, rep, weights_path=None, grads_path=None,
                 logits_path=None):
        """Runs gptc eval; returns (loss, stdout) or (None, None)."""
        for p in (grads_path, logits_path):
            if p and os.path.exists(p):
                os.remove(p)
        cmd = [self.args.gptc, "eval", "--model=%s" % self.args.model] + \
            self.cfg.cli_args() + [
                "--init-from=%s" % (weights_path or self.weights_path),
                "--data=%s" % self.data_path, "--batch=%d" % self.B,
                "--seq=%d" % self.T]
        if grads_path:
            cmd.append("--grads-out=%s" % grads_path)
        if logits_path:
            cmd.append("--logits-out=%s" % logits_path)
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE,
                                  timeout=self.args.timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            rep.fail("cannot run gptc: %s" % exc)
            return None, None
        out = proc.stdout.decode("utf-8", "replace")
        err = proc.stderr.decode("utf-8", "replace")
        if proc.returncode != 0:
            rep.fail("gptc exited with status %d: %s"
                     % (proc.returncode,
                        " ".join(shlex.quote(c) for c in cmd)))
            rep.info("--- gptc stdout ---\n" + out.rstrip())
            rep.info("--- gptc stderr ---\n" + err.rstrip())
            return None, None
        lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
        m = re.fullmatch(r"loss\s+(\S+)", lines[-1]) if lines else None
        if not m:
            rep.fail("gptc's last stdout line is not 'loss <value>': %r"
                     % (lines[-1] if lines else ""))
            return None, None
        return float(m.group(1)), out

    def gptc_grads(self, rep):
        """gptc's loss and gradients {name: float64 tensor}, validated."""
        rep.info("config: %r, batch %d, seq %d, seed %d"
                 % (self.cfg, self.B, self.T, self.args.seed))
        gpath = self.path("grads.safetensors")
        loss, _ = self.run_gptc(rep, grads_path=gpath)
        if loss is None:
            return None, None
        if not os.path.exists(gpath):
            rep.fail("gptc did not write %s" % gpath)
            return None, None
        try:
            grads = ref.read_safetensors(gpath)
            dtypes = ref.read_safetensors_dtypes(gpath)
        except Exception as exc:  # any malformed file is a failure
            rep.fail("cannot read %s: %s" % (gpath, exc))
            return None, None
        shapes = ref.param_shapes(self.cfg)
        missing = sorted(set(shapes) - set(grads))
        extra = sorted(set(grads) - set(shapes))
        if missing:
            rep.fail("gradients missing for %s" % ", ".join(missing))
        if extra:
            rep.fail("gradients for names that are not parameters: %s"
                     % ", ".join(extra))
        out = {}
        for name, shape in shapes.items():
            if name not in grads:
                continue
            g = grads[name]
            if dtypes[name] != "F32":
                rep.fail("%s: gradient is %s, expected F32"
                         % (name, dtypes[name]))
            if tuple(g.shape) != tuple(shape):
                rep.fail("%s: gradient has shape %s, expected %s"
                         % (name, list(g.shape), list(shape)))
                continue
            if not bool(torch.isfinite(g).all()):
                rep.fail("%s: gradient holds non-finite values" % name)
                continue
            out[name] = g.to(torch.float64)
        if rep.failed:
            return None, None
        return loss, out


def torch_grads(params, cfg, idx, tgt, dtype, bug=None, loss_fn=None):
    """(loss, {name: gradient}) of PyTorch's model in `dtype`."""
    p = {k: v.detach().to(dtype).clone().requires_grad_(True)
         for k, v in params.items()}
    logits, loss = ref.forward(p, cfg, idx, tgt, bug=bug)
    if loss_fn is not None:
        loss = loss_fn(logits, tgt)
    loss.backward()
    return float(loss), {k: v.grad.detach().to(torch.float64)
                         for k, v in p.items()}


def unravel(flat, shape):
    """'i,j' for the flat index of an element of a tensor of `shape`."""
    idx = []
    for dim in reversed(shape):
        flat, r = divmod(flat, dim)
        idx.append(r)
    return ",".join(str(i) for i in reversed(idx))


def fmt_name(name):
    return "%-24s" % name


# --------------------------------------------------------------------------
# autograd
# --------------------------------------------------------------------------

def check_autograd(args, rep):
    cfg = ref.GPT2Config(args.n_layer, args.n_head, args.n_embd,
                         args.block_size, args.vocab_size)
    params = ref.init_params(cfg, seed=args.seed)
    s = Setup(args, params, "autograd")
    loss, got = s.gptc_grads(rep)
    if got is None:
        return
    loss32, want32 = torch_grads(params, cfg, s.idx, s.tgt, torch.float32)
    loss64, want64 = torch_grads(params, cfg, s.idx, s.tgt, torch.float64)
    rel = abs(loss - loss32) / abs(loss32)
    rep.info("loss: gptc %.7f, torch32 %.7f, torch64 %.9f; relative %.2e "
             "(tolerance %.0e)" % (loss, loss32, loss64, rel, LOSS_RTOL))
    if not rel <= LOSS_RTOL:
        rep.fail("loss differs: gptc %.7f vs torch32 %.7f" % (loss, loss32))
    rep.info("per tensor: max|g - g_ref| / max|g_ref|; tolerance %.0e vs "
             "torch32" % GRAD_RTOL)
    rep.info("  %s %10s %10s %10s %10s" % (fmt_name("parameter"), "vs t32",
                                          "vs t64", "t32 vs t64",
                                          "max|g|"))
    worst = (0.0, "")
    for name, g in got.items():
        e32, wi = ref.max_rel_error(g, want32[name])
        e64, _ = ref.max_rel_error(g, want64[name])
        base, _ = ref.max_rel_error(want32[name], want64[name])
        rep.info("  %s %10.2e %10.2e %10.2e %10.3e" % (
            fmt_name(name), e32, e64, base, float(want64[name].abs().max())))
        worst = max(worst, (e32, name))
        if not e32 <= GRAD_RTOL:
            pos = unravel(wi, tuple(g.shape))
            rep.fail("%s: gradient differs by %.2e > %.0e (worst element "
                     "[%s]: gptc %+.7e, torch32 %+.7e)" % (
                         name, e32, GRAD_RTOL, pos,
                         float(g.reshape(-1)[wi]),
                         float(want32[name].reshape(-1)[wi])))
    rep.info("worst: %s %.2e (tolerance %.0e)" % (worst[1], worst[0],
                                                  GRAD_RTOL))

    if not args.bug_check:
        return
    # The tolerance separates bugs (PyTorch alone): each of these gradients
    # must be > 10x the tolerance away from the correct one on some tensor.
    def summed(logits, tgt):
        logp = ref.log_softmax(logits)
        return -logp.gather(-1, tgt.unsqueeze(-1)).sum()

    def no_target(logits, tgt):
        return torch.logsumexp(logits, dim=-1).mean()

    bugs = [("gelu_erf", dict(bug="gelu_erf")),
            ("ln_eps", dict(bug="ln_eps")),
            ("summed loss", dict(loss_fn=summed)),
            ("no target term", dict(loss_fn=no_target))]
    for label, kw in bugs:
        _, gb = torch_grads(params, cfg, s.idx, s.tgt, torch.float64, **kw)
        eb = max(ref.max_rel_error(gb[n], want64[n])[0] for n in want64)
        line = "tolerance check: gradient with bug %-15s is %.2e away" % (
            label, eb)
        if eb > 10 * GRAD_RTOL:
            rep.info(line + " (> 10x tolerance)")
        else:
            rep.fail(line + ": the tolerance does not separate it")


# --------------------------------------------------------------------------
# fd: float64 finite differences of PyTorch's loss
# --------------------------------------------------------------------------

def fd_stencil(loss_at, h):
    """Fourth-order central difference of t -> loss_at(t) at 0."""
    return (-loss_at(2 * h) + 8 * loss_at(h) - 8 * loss_at(-h)
            + loss_at(-2 * h)) / (12 * h)


def lm_head_part(params64, cfg, idx, tgt):
    """The lm_head contribution to d loss / d wte, in float64.

    logits = xf @ wte^T with xf the output of ln_f; xf is recovered from the
    logits by least squares (wte has full column rank), and the contribution
    is (softmax(logits) - onehot(targets))^T xf / (B*T)."""
    with torch.no_grad():
        logits, _ = ref.forward(params64, cfg, idx)
        wte = params64["wte.weight"]
        V = cfg.vocab_size
        xf = torch.linalg.lstsq(wte, logits.reshape(-1, V).t()).solution.t()
        probs = torch.softmax(logits.reshape(-1, V), dim=-1)
        probs[torch.arange(probs.shape[0]), tgt.reshape(-1)] -= 1.0
        return probs.t() @ xf / probs.shape[0]


def check_fd(args, rep):
    cfg = ref.GPT2Config(args.n_layer, args.n_head, args.n_embd,
                         args.block_size, args.vocab_size)
    params = ref.init_params(cfg, seed=args.seed)
    s = Setup(args, params, "fd", repeat=True)
    loss, got = s.gptc_grads(rep)
    if got is None:
        return
    p64 = {k: v.to(torch.float64) for k, v in params.items()}

    def loss_along(name, direction):
        base = p64[name]

        def at(t):
            q = dict(p64)
            q[name] = base + t * direction
            with torch.no_grad():
                return float(ref.forward(q, cfg, s.idx, s.tgt)[1])
        return at

    def fd_entry(name, flat):
        d = torch.zeros_like(p64[name])
        d.view(-1)[flat] = 1.0
        return fd_stencil(loss_along(name, d), FD_H)

    # Float64 autograd: only to show that the stencil is accurate enough
    # (FD_REF_TOL); the check itself compares gptc with the stencil.
    loss64, auto64 = torch_grads(params, cfg, s.idx, s.tgt, torch.float64)
    rel = abs(loss - loss64) / abs(loss64)
    rep.info("loss: gptc %.7f, torch64 %.9f; relative %.2e" % (
        loss, loss64, rel))
    if not rel <= LOSS_RTOL:
        rep.fail("loss differs from float64 PyTorch by %.2e" % rel)

    gen = torch.Generator().manual_seed(1000 + args.seed)
    counts = torch.bincount(s.idx.reshape(-1), minlength=cfg.vocab_size)
    planted = int(counts.argmax())
    in_inputs = sorted(set(s.idx.reshape(-1).tolist()))
    in_targets = set(s.tgt.reshape(-1).tolist())
    only_targets = sorted(in_targets - set(in_inputs))
    nowhere = sorted(set(range(cfg.vocab_size)) - set(in_inputs) -
                     in_targets)
    C = cfg.n_embd

    def random_col():
        return int(torch.randint(0, C, (1,), generator=gen))

    rep.info("fourth-order central differences of the float64 PyTorch loss, "
             "h = %g; entry error |g - fd| / max(|fd|, %.1f max|g_t|), "
             "tolerance %.0e" % (FD_H, FD_FLOOR, FD_RTOL))
    rep.info("  %s %-22s %15s %15s %9s %9s" % (
        fmt_name("parameter"), "entry", "gptc", "fd(float64)", "error",
        "fd-auto"))
    worst = (0.0, "")
    worst_ref = 0.0
    n_checked = 0
    tied = []
    for name, g in got.items():
        shape = tuple(g.shape)
        numel = g.numel()
        s_t = float(g.abs().max())
        picks = []                          # (flat index, why)
        picks.append((int(g.abs().reshape(-1).argmax()), "max"))
        if name == "wte.weight":
            # Rows that get both contributions (embedding and lm_head): ids
            # among the inputs, the planted one three times; rows with the
            # lm_head's only: an id that is only a target, ids never in the
            # batch.
            for tok in [planted] + [t for t in in_inputs
                                    if t != planted][:2]:
                picks.append((tok * C + random_col(), "tied x%d"
                              % int(counts[tok])))
            for tok in only_targets[:1]:
                picks.append((tok * C + random_col(), "target only"))
            for tok in nowhere[:2]:
                picks.append((tok * C + random_col(), "lm_head only"))
        if name == "wpe.weight":
            picks.append(((s.T - 1) * C + random_col(), "last position"))
            if cfg.block_size > s.T:
                picks.append((s.T * C + random_col(), "unused position"))
        seen = set(flat for flat, _ in picks)
        want = numel if args.samples < 0 else \
            min(numel, len(seen) + args.samples)
        if want == numel:                   # every entry
            picks += [(i, "all") for i in range(numel) if i not in seen]
            seen = set(range(numel))
        while len(seen) < want:
            flat = int(torch.randint(0, numel, (1,), generator=gen))
            if flat not in seen:
                seen.add(flat)
                picks.append((flat, "random"))
        done = set()
        for flat, why in picks:
            if flat in done:
                continue
            done.add(flat)
            fd = fd_entry(name, flat)
            a = float(g.reshape(-1)[flat])
            au = float(auto64[name].reshape(-1)[flat])
            err = abs(a - fd) / max(abs(fd), FD_FLOOR * s_t)
            ref_err = abs(fd - au) / max(float(auto64[name].abs().max()),
                                         1e-300)
            worst_ref = max(worst_ref, ref_err)
            where = "[%s] %s" % (unravel(flat, shape), why)
            rep.info("  %s %-22s %+15.8e %+15.8e %9.2e %9.2e" % (
                fmt_name(name), where, a, fd, err, ref_err))
            if name == "wte.weight" and (why.startswith("tied") or why in (
                    "target only", "lm_head only")):
                tied.append((flat, why, fd))
            n_checked += 1
            worst = max(worst, (err, name + " " + where))
            if not err <= FD_RTOL:
                rep.fail("%s%s: gptc %+.8e vs finite difference %+.8e "
                         "(error %.2e > %.0e)" % (name, where, a, fd, err,
                                                  FD_RTOL))
        # One random dense unit direction over the whole tensor.
        v = torch.randn(shape, generator=gen, dtype=torch.float64)
        v /= v.norm()
        dfd = fd_stencil(loss_along(name, v), FD_H)
        dg = float((g * v).sum())
        gnorm = float(g.norm())
        err = abs(dg - dfd) / max(gnorm, 1e-300)
        dau = float((auto64[name] * v).sum())
        worst_ref = max(worst_ref, abs(dfd - dau) /
                        max(float(auto64[name].norm()), 1e-300))
        rep.info("  %s %-22s %+15.8e %+15.8e %9.2e %9.2e" % (
            fmt_name(name), "random direction", dg, dfd, err,
            abs(dfd - dau) / max(float(auto64[name].norm()), 1e-300)))
        n_checked += 1
        worst = max(worst, (err, name + " direction"))
        if not err <= FD_RTOL:
            rep.fail("%s: along a random direction gptc's gradient predicts "
                     "%+.8e, finite differences give %+.8e (error %.2e of "
                     "||g||)" % (name, dg, dfd, err))

    # The two contributions at the wte entries checked on purpose: each
    # part, as an error of the metric above, is what a gradient missing it
    # would score; both must be far above the tolerance where present.
    head = lm_head_part(p64, cfg, s.idx, s.tgt)
    s_wte = float(got["wte.weight"].abs().max())
    rep.info("tied wte: d loss / d wte = embedding part + lm_head part "
             "(float64); 'miss' = the error a gradient without that part "
             "would have in the entry metric")
    for flat, why, fd in tied:
        row, col = divmod(flat, C)
        total = float(auto64["wte.weight"][row, col])
        lm = float(head[row, col])
        emb = total - lm
        denom = max(abs(fd), FD_FLOOR * s_wte)
        rep.info("  wte[%d,%d] %-13s total %+.4e = embedding %+.4e (miss "
                 "%.1e) + lm_head %+.4e (miss %.1e)" % (
                     row, col, why, total, emb, abs(emb) / denom, lm,
                     abs(lm) / denom))
        if why.startswith("tied"):
            if abs(emb) / denom <= 10 * FD_RTOL or \
                    abs(lm) / denom <= 10 * FD_RTOL:
                rep.info("  note: at wte[%d,%d] one part is too small to "
                         "tell whether it is there" % (row, col))
        elif abs(emb) > 1e-9 * s_wte:
            rep.fail("wte row %d is not an input, yet its embedding part "
                     "is %.2e: the lm_head reconstruction is wrong"
                     % (row, emb))
    rep.info("worst gptc error: %.2e at %s (tolerance %.0e), %d checks"
             % (worst[0], worst[1], FD_RTOL, n_checked))
    rep.info("finite differences vs float64 autograd: worst %.2e of the "
             "tensor scale (must be <= %.0e)" % (worst_ref, FD_REF_TOL))
    if not worst_ref <= FD_REF_TOL:
        rep.fail("the finite-difference reference itself is off by %.2e; "
                 "choose another h" % worst_ref)


# --------------------------------------------------------------------------
# fd-self: differences of gptc's own loss
# --------------------------------------------------------------------------

LOSS_NOISE = 1e-6   # bound on the error of gptc's printed loss (%.6f
#                     rounding 5e-7 + float32 rounding ~4e-7 of a loss ~4)
FD_SELF_H = 0.02    # the larger of the two steps (then h/2), along unit u


def check_fd_self(args, rep):
    cfg = ref.GPT2Config(args.n_layer, args.n_head, args.n_embd,
                         args.block_size, args.vocab_size)
    params = ref.init_params(cfg, seed=args.seed)
    s = Setup(args, params, "fdself")
    _, got = s.gptc_grads(rep)
    if got is None:
        return
    names = list(got)
    full = torch.cat([got[n].reshape(-1) for n in names])
    # Directions u = g_S / ||g_S|| for a set S of tensors: all of them, the
    # tied wte alone, and all the others (blocks, wpe, ln_f).
    rest = [n for n in names if n != "wte.weight"]
    chosen = [("all parameters", names), ("wte.weight", ["wte.weight"]),
              ("all but wte", rest)]
    h = FD_SELF_H
    rep.info("gptc's own loss (printed, %%.6f) along u = g_S/||g_S||: "
             "D(s) = (L(w+s u) - L(w-s u)) / 2s at s = %g and %g, "
             "Richardson (4 D(h/2) - D(h)) / 3 against the derivative "
             "gptc's gradient predicts (||g_S||, for the float32-rounded "
             "perturbation); tolerance %.0e relative" % (h, h / 2,
                                                          FD_SELF_TOL))
    counter = [0]

    def loss_at(u, t):
        """gptc's loss at float32(w + t*u) and the perturbation actually
        applied (rounded weights minus stored weights), flattened."""
        q, actual = {}, []
        for n in names:
            w = params[n]
            w32 = (w.to(torch.float64) + t * u[n]).to(torch.float32) \
                if n in u else w
            q[n] = w32
            actual.append((w32.to(torch.float64) - w.to(torch.float64))
                          .reshape(-1))
        counter[0] += 1
        wpath = s.path("perturbed_%d.safetensors" % counter[0])
        ref.write_safetensors(wpath, q)
        loss, _ = s.run_gptc(rep, weights_path=wpath)
        os.remove(wpath)
        return loss, torch.cat(actual)

    for label, subset in chosen:
        norm = math.sqrt(sum(float(got[n].norm()) ** 2 for n in subset))
        u = {n: got[n] / norm for n in subset}
        # Error of the Richardson value from the loss's error alone:
        # sqrt(16 * (0.71 e / (h/2))^2 + (0.71 e / h)^2) / 3 = 1.9 e / h.
        noise = 1.9 * LOSS_NOISE / h / norm
        d, pred = {}, {}
        for step in (h, h / 2):
            lp, ap = loss_at(u, step)
            lm, am = loss_at(u, -step)
            if lp is None or lm is None:
                return
            d[step] = (lp - lm) / (2 * step)
            pred[step] = float((full * (ap - am)).sum()) / (2 * step)
        rich = (4 * d[h / 2] - d[h]) / 3
        rich_pred = (4 * pred[h / 2] - pred[h]) / 3
        err = abs(rich - rich_pred) / abs(rich_pred)
        rep.info("  %-24s ||g_S|| %.6f  D(h) %.6f  D(h/2) %.6f  "
                 "Richardson %.6f  error %.2e (loss noise allows %.1e)"
                 % (label, rich_pred, d[h], d[h / 2], rich, err, noise))
        if noise > FD_SELF_TOL / 5:
            rep.fail("%s: ||g_S|| = %.3g is too small for a %.0e test from "
                     "a loss printed to 6 decimals (noise %.1e)" % (
                         label, norm, FD_SELF_TOL, noise))
        elif not err <= FD_SELF_TOL:
            rep.fail("%s: gptc's gradient predicts %.6f along g_S, its own "
                     "loss changes at %.6f (error %.2e > %.0e)" % (
                         label, rich_pred, rich, err, FD_SELF_TOL))


# --------------------------------------------------------------------------
# init-loss: GPT-2's initialisation gives a loss near ln(V)
# --------------------------------------------------------------------------

def gpt2_init(cfg, seed, std=0.02):
    """GPT-2's initialisation: weights N(0, std), biases 0, LayerNorm gains 1
    (the residual projections' 1/sqrt(2L) scaling does not matter here)."""
    g = torch.Generator().manual_seed(int(seed))
    out = {}
    for name, shape in ref.param_shapes(cfg).items():
        if ".ln_" in name or name.startswith("ln_f"):
            t = torch.ones(shape) if name.endswith("weight") else \
                torch.zeros(shape)
        elif name.endswith("weight"):
            t = torch.randn(shape, generator=g, dtype=torch.float64) * std
        else:
            t = torch.zeros(shape)
        out[name] = t.to(torch.float32)
    return out


def check_init_loss(args, rep):
    cfg = ref.GPT2Config(args.n_layer, args.n_head, args.n_embd,
                         args.block_size, args.vocab_size)
    params = gpt2_init(cfg, args.seed)
    s = Setup(args, params, "init")
    loss, _ = s.run_gptc(rep)
    if loss is None:
        return
    with torch.no_grad():
        _, loss32 = ref.forward(params, cfg, s.idx, s.tgt)
    lnv = math.log(cfg.vocab_size)
    # The final LayerNorm gives unit-variance features, so each logit is a
    # sum of C products with wte entries of std 0.02: variance 4e-4 * C.
    # For small logits, E[loss] ~ ln V + Var(logit) / 2.
    expect = lnv + 0.5 * 4e-4 * cfg.n_embd
    rel = abs(loss - lnv) / lnv
    rep.info("loss at GPT-2 initialisation: gptc %.6f, torch32 %.6f, "
             "ln(V) = %.6f, expected ~ %.6f; |loss - ln V| / ln V = %.4f "
             "(tolerance %.2f)" % (loss, float(loss32), lnv, expect, rel,
                                   INIT_LOSS_RTOL))
    if not rel <= INIT_LOSS_RTOL:
        rep.fail("the loss at initialisation %.6f is not within %.0f%% of "
                 "ln(V) = %.6f" % (loss, 100 * INIT_LOSS_RTOL, lnv))
    if not abs(loss - float(loss32)) / float(loss32) <= LOSS_RTOL:
        rep.fail("loss differs from PyTorch: %.6f vs %.6f" % (
            loss, float(loss32)))

    # gptc's own initialisation: `gptc train` without --init-from; the loss
    # of its first step is the loss at initialisation (before any update).
    for seed in (0, 1):
        cmd = [args.gptc, "train", "--model=%s" % args.model] + \
            cfg.cli_args() + ["--data=%s" % s.data_path, "--device=cpu",
                              "--batch=%d" % s.B, "--seq=%d" % s.T,
                              "--steps=1", "--seed=%d" % seed]
        try:
            proc = subprocess.run(cmd, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE,
                                  timeout=args.timeout, cwd=args.tmp)
        except (OSError, subprocess.TimeoutExpired) as exc:
            rep.fail("cannot run gptc train: %s" % exc)
            return
        out = proc.stdout.decode("utf-8", "replace")
        m = re.search(r"^step 1/1 \| loss (\S+) \|", out, re.M)
        if proc.returncode != 0 or not m:
            rep.fail("gptc train (%s) gave no 'step 1/1 | loss' line; "
                     "status %d\n%s%s" % (" ".join(cmd), proc.returncode, out,
                                           proc.stderr.decode("utf-8",
                                                              "replace")))
            return
        own = float(m.group(1))
        rel = abs(own - lnv) / lnv
        rep.info("loss at gptc's own initialisation (gptc train --seed=%d, "
                 "step 1): %.6f; |loss - ln V| / ln V = %.4f (tolerance "
                 "%.2f)" % (seed, own, rel, INIT_LOSS_RTOL))
        if not rel <= INIT_LOSS_RTOL:
            rep.fail("gptc's initialisation gives a loss of %.6f, not within "
                     "%.0f%% of ln(V) = %.6f" % (own, 100 * INIT_LOSS_RTOL,
                                                 lnv))


def main(argv):
    args = parse_args(argv)
    rep = Report()
    {"autograd": check_autograd, "fd": check_fd, "fd-self": check_fd_self,
     "init-loss": check_init_loss}[args.check](args, rep)
    if rep.failed:
        rep.info("RESULT: MISMATCH (%s)" % args.check)
        rep.dump(sys.stderr)
        return 1
    rep.info("RESULT: gptc's gradients match (%s)" % args.check)
    if args.verbose:
        rep.dump(sys.stdout)
    else:
        print(rep.lines[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
