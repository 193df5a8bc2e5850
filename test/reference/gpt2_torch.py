#!/usr/bin/env python3
"""An independent GPT-2 in PyTorch, used as gptc's reference in tests.

Written for gptc from the GPT-2 description (Radford et al. 2019 and the
layout of the Hugging Face checkpoints); it shares no code with gptc, nanoGPT
or transformers. It needs only the standard library, numpy and torch (Debian's
python3-torch, PyTorch 1.13, CPU).

The model is functional: parameters live in a plain dict keyed by Hugging Face
GPT-2 names without prefix (``wte.weight``, ``h.0.attn.c_attn.weight``, ...),
so a test can hand the same dict to a safetensors writer, to ``forward`` and,
with ``requires_grad_()``, to autograd or an optimiser.

Also here: a safetensors writer/reader (the format implemented with struct and
json), llm.c token shards and nanoGPT's header-less uint16 ``.bin``, a
deterministic random initialisation that perturbs biases and LayerNorm
parameters, and the error metric the reference tests use.

``python3 gpt2_torch.py --self-test`` checks this module on its own (no gptc
needed): format round trips, the model against a second formulation built
from torch.nn.functional, the loss at initialisation, the float32 error
against float64, and that the tolerance catches typical GPT-2 bugs.
"""

import json
import math
import os
import struct
import sys

import numpy as np
import torch

LN_EPS = 1e-5

# Tolerances of the reference tests (see eval_matches_torch.py for the argument).
LOSS_RTOL = 1e-5
LOGITS_RTOL = 1e-5

LLMC_SHARD_MAGIC = 20240520
LLMC_SHARD_VERSION = 1
LLMC_HEADER_INTS = 256


# --------------------------------------------------------------------------
# Configuration and parameters
# --------------------------------------------------------------------------

class GPT2Config:
    def __init__(self, n_layer, n_head, n_embd, block_size, vocab_size):
        self.n_layer = int(n_layer)
        self.n_head = int(n_head)
        self.n_embd = int(n_embd)
        self.block_size = int(block_size)
        self.vocab_size = int(vocab_size)
        if self.n_embd % self.n_head != 0:
            raise ValueError("n_embd %d is not divisible by n_head %d"
                             % (self.n_embd, self.n_head))

    @property
    def head_dim(self):
        return self.n_embd // self.n_head

    def cli_args(self):
        """The gptc override flags that describe this config."""
        return ["--n-layer=%d" % self.n_layer, "--n-head=%d" % self.n_head,
                "--n-embd=%d" % self.n_embd,
                "--block-size=%d" % self.block_size,
                "--vocab-size=%d" % self.vocab_size]

    def __repr__(self):
        return ("GPT2Config(n_layer=%d, n_head=%d, n_embd=%d, block_size=%d, "
                "vocab_size=%d)" % (self.n_layer, self.n_head, self.n_embd,
                                    self.block_size, self.vocab_size))


def param_shapes(cfg):
    """Ordered {name: shape} in Hugging Face GPT-2 naming (no prefix).

    The four Conv1D weights (c_attn, attn.c_proj, c_fc, mlp.c_proj) are stored
    (in, out): y = x @ W + b.
    """
    C, V = cfg.n_embd, cfg.vocab_size
    shapes = {"wte.weight": (V, C), "wpe.weight": (cfg.block_size, C)}
    for i in range(cfg.n_layer):
        p = "h.%d." % i
        shapes[p + "ln_1.weight"] = (C,)
        shapes[p + "ln_1.bias"] = (C,)
        shapes[p + "attn.c_attn.weight"] = (C, 3 * C)
        shapes[p + "attn.c_attn.bias"] = (3 * C,)
        shapes[p + "attn.c_proj.weight"] = (C, C)
        shapes[p + "attn.c_proj.bias"] = (C,)
        shapes[p + "ln_2.weight"] = (C,)
        shapes[p + "ln_2.bias"] = (C,)
        shapes[p + "mlp.c_fc.weight"] = (C, 4 * C)
        shapes[p + "mlp.c_fc.bias"] = (4 * C,)
        shapes[p + "mlp.c_proj.weight"] = (4 * C, C)
        shapes[p + "mlp.c_proj.bias"] = (C,)
    shapes["ln_f.weight"] = (C,)
    shapes["ln_f.bias"] = (C,)
    return shapes


def num_params(cfg):
    """Parameter count with lm_head tied to wte (counted once)."""
    return sum(math.prod(s) for s in param_shapes(cfg).values())


def init_params(cfg, seed, weight_std=0.02, dtype=torch.float32):
    """Deterministic random parameters that exercise every parameter.

    Matrices and embeddings are N(0, weight_std) as in GPT-2. Biases and
    LayerNorm parameters are deliberately *not* GPT-2's zeros/ones: with
    zeros and ones a model that ignored them would still pass. The scales are
    chosen so that every part of the forward pass matters numerically:
    LayerNorm gains 1 + N(0, 0.2) and shifts N(0, 0.2); c_attn's bias
    N(0, 0.5), which makes q.k^T large enough that the softmax is far from
    uniform (so the scale and the mask matter); c_fc's bias N(0, 1), which
    spreads GELU's inputs over its curved region (so the tanh form differs
    visibly from the erf form); the projection biases N(0, 0.05).
    """
    g = torch.Generator().manual_seed(int(seed))

    def normal(shape, mean, std):
        return (torch.randn(shape, generator=g, dtype=torch.float64) * std
                + mean)

    params = {}
    for name, shape in param_shapes(cfg).items():
        leaf = name.rsplit(".", 2)
        kind = leaf[-1]                      # weight | bias
        module = leaf[-2] if len(leaf) > 1 else ""
        if module in ("ln_1", "ln_2", "ln_f") or name.startswith("ln_f"):
            t = normal(shape, 1.0, 0.2) if kind == "weight" else \
                normal(shape, 0.0, 0.2)
        elif kind == "weight":
            t = normal(shape, 0.0, weight_std)
        elif module == "c_attn":
            t = normal(shape, 0.0, 0.5)
        elif module == "c_fc":
            t = normal(shape, 0.0, 1.0)
        else:
            t = normal(shape, 0.0, 0.05)
        params[name] = t.to(dtype)
    return params


def add_prefix(params, prefix):
    return {prefix + k: v for k, v in params.items()}


def random_tokens(n, vocab_size, seed):
    """n random token ids in [0, vocab_size), containing 0 and vocab_size-1
    (the edges of the vocabulary, where padding bugs live)."""
    g = torch.Generator().manual_seed(int(seed) + 7919)
    toks = torch.randint(0, vocab_size, (n,), generator=g, dtype=torch.int64)
    if n >= 4:
        toks[1] = vocab_size - 1
        toks[n // 2] = 0
        toks[n - 2] = vocab_size - 1
    return toks


# --------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------

def layer_norm(x, weight, bias, eps=LN_EPS):
    """LayerNorm over the last dimension with the biased variance."""
    mean = x.mean(dim=-1, keepdim=True)
    centred = x - mean
    var = (centred * centred).mean(dim=-1, keepdim=True)
    return centred / torch.sqrt(var + eps) * weight + bias


def gelu_tanh(x):
    """GELU in the tanh form that GPT-2 uses."""
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + torch.tanh(c * (x + 0.044715 * x * x * x)))


def gelu_erf(x):
    """Exact GELU; GPT-2 does NOT use it (only for the self-test's bug list)."""
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def conv1d(x, weight, bias):
    """Hugging Face's Conv1D: weight is (in, out)."""
    return x @ weight + bias


def log_softmax(x):
    m = x.max(dim=-1, keepdim=True).values
    shifted = x - m
    return shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))


def causal_self_attention(x, p, pre, cfg, bug=None):
    B, T, C = x.shape
    H, D = cfg.n_head, cfg.head_dim
    qkv = conv1d(x, p[pre + "attn.c_attn.weight"], p[pre + "attn.c_attn.bias"])
    q, k, v = qkv[..., 0:C], qkv[..., C:2 * C], qkv[..., 2 * C:3 * C]

    def split_heads(t):                      # [B,T,C] -> [B,H,T,D]
        if bug == "head_layout":             # channels split the wrong way
            return t.reshape(B, T, D, H).permute(0, 3, 1, 2)
        return t.reshape(B, T, H, D).permute(0, 2, 1, 3)

    q, k, v = split_heads(q), split_heads(k), split_heads(v)
    scale = 1.0 / D if bug == "attn_scale" else 1.0 / math.sqrt(D)
    scores = (q @ k.transpose(-2, -1)) * scale          # [B,H,T,T]
    if bug != "no_causal_mask":
        allowed = torch.ones(T, T, dtype=torch.bool).tril()
        if bug == "mask_diagonal":          # also hides the token itself
            allowed = torch.ones(T, T, dtype=torch.bool).tril(-1)
            allowed[0, 0] = True
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    y = weights @ v                                     # [B,H,T,D]
    y = y.permute(0, 2, 1, 3).reshape(B, T, C)          # merge heads
    return conv1d(y, p[pre + "attn.c_proj.weight"], p[pre + "attn.c_proj.bias"])


def mlp(x, p, pre, bug=None):
    h = conv1d(x, p[pre + "mlp.c_fc.weight"], p[pre + "mlp.c_fc.bias"])
    h = gelu_erf(h) if bug == "gelu_erf" else gelu_tanh(h)
    return conv1d(h, p[pre + "mlp.c_proj.weight"], p[pre + "mlp.c_proj.bias"])


def forward(params, cfg, idx, targets=None, bug=None):
    """GPT-2 forward pass.

    params: {HF name (no prefix): tensor}; idx, targets: int64 [B, T].
    Returns (logits [B, T, V], loss or None), loss = mean cross-entropy.
    `bug` names a deliberate mistake (self-test only); leave it None.
    """
    p = params
    B, T = idx.shape
    if T > cfg.block_size:
        raise ValueError("sequence length %d > block size %d"
                         % (T, cfg.block_size))
    eps = 1e-6 if bug == "ln_eps" else LN_EPS
    pos = torch.arange(T)
    if bug == "pos_offset":
        pos = pos + 1
    x = p["wte.weight"][idx] + p["wpe.weight"][pos]          # [B,T,C]
    for i in range(cfg.n_layer):
        pre = "h.%d." % i
        a = layer_norm(x, p[pre + "ln_1.weight"], p[pre + "ln_1.bias"], eps)
        x = x + causal_self_attention(a, p, pre, cfg, bug)
        m = layer_norm(x, p[pre + "ln_2.weight"], p[pre + "ln_2.bias"], eps)
        x = x + mlp(m, p, pre, bug)
    x = layer_norm(x, p["ln_f.weight"], p["ln_f.bias"], eps)
    logits = x @ p["wte.weight"].t()                          # tied lm_head
    loss = None
    if targets is not None:
        logp = log_softmax(logits)
        picked = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        loss = -picked.mean()
    return logits, loss


def forward_functional(params, cfg, idx, targets=None):
    """A second formulation from torch.nn.functional building blocks, only to
    cross-check `forward` in the self-test."""
    import torch.nn.functional as F
    p = params
    B, T = idx.shape
    C, H = cfg.n_embd, cfg.n_head
    x = F.embedding(idx, p["wte.weight"]) + F.embedding(
        torch.arange(T), p["wpe.weight"]).unsqueeze(0)
    for i in range(cfg.n_layer):
        pre = "h.%d." % i
        a = F.layer_norm(x, (C,), p[pre + "ln_1.weight"], p[pre + "ln_1.bias"],
                         LN_EPS)
        qkv = F.linear(a, p[pre + "attn.c_attn.weight"].t(),
                       p[pre + "attn.c_attn.bias"])
        q, k, v = qkv.chunk(3, dim=-1)
        q, k, v = [t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v)]
        s = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(C // H)
        s = s + torch.full((T, T), float("-inf")).triu(1)
        y = torch.einsum("bhqk,bhkd->bhqd", F.softmax(s, dim=-1), v)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + F.linear(y, p[pre + "attn.c_proj.weight"].t(),
                         p[pre + "attn.c_proj.bias"])
        m = F.layer_norm(x, (C,), p[pre + "ln_2.weight"], p[pre + "ln_2.bias"],
                         LN_EPS)
        h = F.gelu(F.linear(m, p[pre + "mlp.c_fc.weight"].t(),
                            p[pre + "mlp.c_fc.bias"]), approximate="tanh")
        x = x + F.linear(h, p[pre + "mlp.c_proj.weight"].t(),
                         p[pre + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], LN_EPS)
    logits = F.linear(x, p["wte.weight"])
    loss = None
    if targets is not None:
        loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1))
    return logits, loss


# --------------------------------------------------------------------------
# Error metric
# --------------------------------------------------------------------------

class Report:
    """What a comparison script found: info lines, failures, a verdict."""

    def __init__(self):
        self.lines = []
        self.failed = False

    def info(self, msg):
        self.lines.append(msg)

    def fail(self, msg):
        self.failed = True
        self.lines.append("FAIL: " + msg)

    def dump(self, stream):
        for line in self.lines:
            print(line, file=stream)


def max_rel_error(actual, expected):
    """max|a - e| / max|e| over all elements (norm-wise, infinity norm).

    Returns (error, flat index of the worst element)."""
    a = torch.as_tensor(actual).to(torch.float64)
    e = torch.as_tensor(expected).to(torch.float64)
    diff = (a - e).abs().reshape(-1)
    worst = int(diff.argmax()) if diff.numel() else 0
    denom = float(e.abs().max()) if e.numel() else 0.0
    err = float(diff.max()) / denom if denom > 0 else float(diff.max())
    return err, worst


# --------------------------------------------------------------------------
# safetensors (implemented here: u64 LE header size, JSON header, raw LE data)
# --------------------------------------------------------------------------

_ST_DTYPES = {
    "F64": (torch.float64, 8),
    "F32": (torch.float32, 4),
    "F16": (torch.float16, 2),
    "BF16": (torch.bfloat16, 2),
    "I64": (torch.int64, 8),
    "I32": (torch.int32, 4),
    "I16": (torch.int16, 2),
    "U8": (torch.uint8, 1),
}
_ST_BY_TORCH = {v[0]: k for k, v in _ST_DTYPES.items()}
# numpy little-endian view used to (de)serialise each dtype; BF16 goes
# through its 16-bit pattern since numpy has no bfloat16.
_ST_NUMPY = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<i2",
             "I64": "<i8", "I32": "<i4", "I16": "<i2", "U8": "u1"}


def _tensor_bytes(t, st_dtype):
    torch_dtype = _ST_DTYPES[st_dtype][0]
    t = t.detach().cpu().to(torch_dtype).contiguous()
    if st_dtype == "BF16":
        arr = t.view(torch.int16).numpy()
    else:
        arr = t.numpy()
    return arr.astype(_ST_NUMPY[st_dtype], copy=False).tobytes()


def safetensors_bytes(tensors, dtype=None, dtypes=None, metadata=None):
    """Serialise {name: tensor} to safetensors bytes.

    dtype: store every tensor as this safetensors dtype ("F32", "F16",
    "BF16", "I32", ...); default: each tensor's own dtype. dtypes: per-name
    overrides. metadata: optional {str: str} written as "__metadata__".
    The header is padded with spaces to a multiple of 8 bytes, as the
    reference implementation does.
    """
    header = {}
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs = []
    offset = 0
    for name, t in tensors.items():
        t = torch.as_tensor(t)
        st = (dtypes or {}).get(name) or dtype or _ST_BY_TORCH[t.dtype]
        raw = _tensor_bytes(t, st)
        header[name] = {"dtype": st, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    return struct.pack("<Q", len(hjson)) + hjson + b"".join(blobs)


def write_safetensors(path, tensors, dtype=None, dtypes=None, metadata=None):
    data = safetensors_bytes(tensors, dtype=dtype, dtypes=dtypes,
                             metadata=metadata)
    with open(path, "wb") as f:
        f.write(data)
    return path


class SafetensorsError(Exception):
    pass


def read_safetensors(path, with_metadata=False):
    """Read a safetensors file into {name: torch tensor}, validating it."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise SafetensorsError("%s: truncated (%d bytes)" % (path, len(data)))
    (hlen,) = struct.unpack("<Q", data[:8])
    if 8 + hlen > len(data):
        raise SafetensorsError("%s: header of %d bytes runs past the end of "
                               "the file (%d bytes)" % (path, hlen, len(data)))
    try:
        header = json.loads(data[8:8 + hlen].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise SafetensorsError("%s: bad header: %s" % (path, exc))
    if not isinstance(header, dict):
        raise SafetensorsError("%s: header is not a JSON object" % path)
    body = data[8 + hlen:]
    metadata = header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        try:
            st = info["dtype"]
            shape = [int(s) for s in info["shape"]]
            begin, end = [int(o) for o in info["data_offsets"]]
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError("%s: bad entry for %r" % (path, name))
        if st not in _ST_DTYPES:
            raise SafetensorsError("%s: %s: unsupported dtype %s"
                                   % (path, name, st))
        size = _ST_DTYPES[st][1] * math.prod(shape)
        if end - begin != size or begin < 0 or end > len(body):
            raise SafetensorsError("%s: %s: data_offsets [%d, %d] do not fit "
                                   "%s %s in %d data bytes"
                                   % (path, name, begin, end, st, shape,
                                      len(body)))
        arr = np.frombuffer(body, dtype=_ST_NUMPY[st],
                            count=math.prod(shape), offset=begin)
        t = torch.from_numpy(arr.astype(arr.dtype.newbyteorder("="))
                             .reshape(shape).copy())
        if st == "BF16":
            t = t.view(torch.bfloat16)
        out[name] = t
    if with_metadata:
        return out, metadata
    return out


def read_safetensors_dtypes(path):
    """{name: safetensors dtype string} from the header only."""
    with open(path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(hlen).decode("utf-8"))
    header.pop("__metadata__", None)
    return {k: v["dtype"] for k, v in header.items()}


# --------------------------------------------------------------------------
# Token files
# --------------------------------------------------------------------------

def _u16(tokens):
    arr = np.asarray(torch.as_tensor(tokens).to(torch.int64).numpy())
    if arr.size and (arr.min() < 0 or arr.max() > 0xFFFF):
        raise ValueError("token ids must fit in uint16")
    return arr.astype("<u2")


def llmc_shard_bytes(tokens, magic=LLMC_SHARD_MAGIC,
                     version=LLMC_SHARD_VERSION, num_tokens=None):
    """llm.c token shard: 256 little-endian int32 (magic, version, number of
    tokens, zeros), then the tokens as little-endian uint16."""
    toks = _u16(tokens)
    header = np.zeros(LLMC_HEADER_INTS, dtype="<i4")
    header[0] = magic
    header[1] = version
    header[2] = toks.size if num_tokens is None else num_tokens
    return header.tobytes() + toks.tobytes()


def write_llmc_shard(path, tokens, **kw):
    with open(path, "wb") as f:
        f.write(llmc_shard_bytes(tokens, **kw))
    return path


def write_nanogpt_bin(path, tokens):
    """nanoGPT's header-less token file: little-endian uint16 ids."""
    with open(path, "wb") as f:
        f.write(_u16(tokens).tobytes())
    return path


def read_tokens(path):
    """Tokens of an llm.c shard (if it starts with the magic) or a nanoGPT
    .bin, as int64."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) >= 4 * LLMC_HEADER_INTS:
        header = np.frombuffer(data[:4 * LLMC_HEADER_INTS], dtype="<i4")
        if header[0] == LLMC_SHARD_MAGIC:
            if header[1] != LLMC_SHARD_VERSION:
                raise ValueError("%s: version %d" % (path, header[1]))
            body = data[4 * LLMC_HEADER_INTS:]
            if len(body) != 2 * int(header[2]):
                raise ValueError("%s: header says %d tokens, file holds %d "
                                 "bytes" % (path, header[2], len(body)))
            return torch.from_numpy(
                np.frombuffer(body, dtype="<u2").astype(np.int64))
    if len(data) % 2:
        raise ValueError("%s: odd length" % path)
    return torch.from_numpy(np.frombuffer(data, dtype="<u2").astype(np.int64))


def batch_from_tokens(tokens, B, T):
    """inputs = tokens[0:B*T] as [B,T], targets = tokens[1:B*T+1] as [B,T]."""
    tokens = torch.as_tensor(tokens).to(torch.int64)
    if tokens.numel() < B * T + 1:
        raise ValueError("need %d tokens, have %d" % (B * T + 1,
                                                      tokens.numel()))
    idx = tokens[0:B * T].reshape(B, T)
    tgt = tokens[1:B * T + 1].reshape(B, T)
    return idx, tgt


# --------------------------------------------------------------------------
# Self-test (no gptc needed)
# --------------------------------------------------------------------------

BUGS = ["gelu_erf", "ln_eps", "attn_scale", "no_causal_mask", "mask_diagonal",
        "head_layout", "pos_offset"]


def _check(cond, msg, failures):
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        failures.append(msg)


def self_test(tmpdir):
    failures = []
    os.makedirs(tmpdir, exist_ok=True)

    # safetensors round trip in every dtype the tests use.
    g = torch.Generator().manual_seed(1)
    tensors = {"a.weight": torch.randn(3, 5, generator=g),
               "b": torch.randn(7, generator=g),
               "scalar": torch.tensor(1.5),
               "ids": torch.arange(-3, 9, dtype=torch.int32).reshape(3, 4)}
    for st in ("F32", "F16", "BF16"):
        path = os.path.join(tmpdir, "rt_%s.safetensors" % st)
        write_safetensors(path, {k: v for k, v in tensors.items()
                                 if k != "ids"}, dtype=st,
                          metadata={"format": "pt"})
        back, meta = read_safetensors(path, with_metadata=True)
        ok = meta == {"format": "pt"} and all(
            back[k].dtype == _ST_DTYPES[st][0]
            and back[k].shape == tensors[k].shape
            and torch.equal(back[k], tensors[k].to(_ST_DTYPES[st][0]))
            for k in back) and set(back) == {"a.weight", "b", "scalar"}
        with open(path, "rb") as f:
            (hlen,) = struct.unpack("<Q", f.read(8))
        _check(ok and hlen % 8 == 0, "safetensors %s round trip" % st,
               failures)
    path = os.path.join(tmpdir, "rt_i32.safetensors")
    write_safetensors(path, tensors)
    back = read_safetensors(path)
    _check(back["ids"].dtype == torch.int32
           and torch.equal(back["ids"], tensors["ids"])
           and read_safetensors_dtypes(path)["ids"] == "I32"
           and read_safetensors_dtypes(path)["a.weight"] == "F32",
           "safetensors mixed F32/I32 round trip", failures)
    # The byte layout, checked by hand for one tiny tensor.
    raw = safetensors_bytes({"x": torch.tensor([1.0, -2.0])})
    (hlen,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + hlen])
    _check(hdr == {"x": {"dtype": "F32", "shape": [2],
                         "data_offsets": [0, 8]}}
           and raw[8 + hlen:] == struct.pack("<ff", 1.0, -2.0),
           "safetensors byte layout", failures)
    bf = safetensors_bytes({"x": torch.tensor([1.0])}, dtype="BF16")
    _check(bf[-2:] == b"\x80\x3f", "BF16 stored as the top half of F32",
           failures)

    # Token files.
    toks = random_tokens(1000, 50257, seed=3)
    sp = write_llmc_shard(os.path.join(tmpdir, "t.bin"), toks)
    with open(sp, "rb") as f:
        head = struct.unpack("<3i", f.read(12))
    _check(head == (20240520, 1, 1000)
           and os.path.getsize(sp) == 1024 + 2000
           and torch.equal(read_tokens(sp), toks), "llm.c shard round trip",
           failures)
    npth = write_nanogpt_bin(os.path.join(tmpdir, "t_nano.bin"), toks)
    _check(os.path.getsize(npth) == 2000
           and torch.equal(read_tokens(npth), toks),
           "nanoGPT .bin round trip", failures)
    _check(int(toks.max()) == 50256 and int(toks.min()) == 0,
           "random tokens reach both ends of the vocabulary", failures)

    # Parameter count of GPT-2 124M.
    _check(num_params(GPT2Config(12, 12, 768, 1024, 50257)) == 124439808,
           "GPT-2 124M has 124,439,808 parameters", failures)

    # The model: two formulations agree; loss at init; f32 vs f64.
    cfg = GPT2Config(n_layer=2, n_head=4, n_embd=64, block_size=32,
                     vocab_size=1000)
    B, T = 2, 24
    p64 = init_params(cfg, seed=11, dtype=torch.float64)
    p32 = {k: v.to(torch.float32) for k, v in p64.items()}
    idx, tgt = batch_from_tokens(random_tokens(B * T + 1, cfg.vocab_size, 5),
                                 B, T)
    l64, loss64 = forward(p64, cfg, idx, tgt)
    f64, floss64 = forward_functional(p64, cfg, idx, tgt)
    err_form, _ = max_rel_error(f64, l64)
    _check(err_form < 1e-12 and abs(float(floss64 - loss64)) < 1e-12,
           "forward == torch.nn.functional formulation in float64 "
           "(%.2e)" % err_form, failures)
    l32, loss32 = forward(p32, cfg, idx, tgt)
    e32, _ = max_rel_error(l32, l64)
    le32 = abs(float(loss32) - float(loss64)) / abs(float(loss64))
    print("     float32 vs float64: logits %.2e (max|d|/max|ref|), loss %.2e "
          "(relative); tolerance %.0e" % (e32, le32, LOGITS_RTOL))
    _check(e32 < LOGITS_RTOL / 10 and le32 < LOSS_RTOL / 10,
           "float32 rounding is well inside the tolerance", failures)
    lnv = math.log(cfg.vocab_size)
    _check(abs(float(loss64) - lnv) < 0.5,
           "loss at init %.4f is near ln(V) = %.4f" % (float(loss64), lnv),
           failures)
    _check(float(l64.abs().max()) > 0.3, "logits are not trivially small "
           "(max |logit| %.3f)" % float(l64.abs().max()), failures)

    # Causality: changing a later token must not change earlier logits.
    idx2 = idx.clone()
    idx2[:, T - 1] = (idx2[:, T - 1] + 1) % cfg.vocab_size
    l64b, _ = forward(p64, cfg, idx2)
    _check(torch.equal(l64b[:, :T - 1], l64[:, :T - 1])
           and not torch.equal(l64b[:, T - 1], l64[:, T - 1]),
           "causal: future tokens do not leak", failures)

    # The tolerance is tight enough to catch typical GPT-2 mistakes.
    for bug in BUGS:
        lb, _ = forward(p64, cfg, idx, tgt, bug=bug)
        eb, _ = max_rel_error(lb, l64)
        _check(eb > 10 * LOGITS_RTOL,
               "bug %-15s changes the logits by %.2e (> 10x tolerance)"
               % (bug, eb), failures)
    # Biases and LayerNorm parameters matter.
    for name in ("h.0.attn.c_attn.bias", "h.1.mlp.c_fc.bias",
                 "h.0.attn.c_proj.bias", "h.1.mlp.c_proj.bias",
                 "h.0.ln_1.weight", "h.1.ln_2.bias", "ln_f.bias"):
        pz = dict(p64)
        pz[name] = (torch.ones_like(p64[name]) if name.endswith("ln_1.weight")
                    else torch.zeros_like(p64[name]))
        lz, _ = forward(pz, cfg, idx, tgt)
        ez, _ = max_rel_error(lz, l64)
        _check(ez > 10 * LOGITS_RTOL, "resetting %-22s changes the logits "
               "by %.2e" % (name, ez), failures)

    print("%d failure(s)" % len(failures))
    return 0 if not failures else 1


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--tmp", default=None, help="scratch folder")
    args = ap.parse_args(argv)
    if not args.self_test:
        ap.print_help()
        return 2
    import tempfile
    if args.tmp:
        return self_test(args.tmp)
    with tempfile.TemporaryDirectory() as d:
        return self_test(d)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
