#!/usr/bin/python3
"""Writes GPT-2 weights as an llm.c model_*.bin, for llmc_model.test.

Usage: llmc_model_helper.py OUT_DIR [--version 3|5] [--padded-vocab N]
       [--truncate N] [--layers-in-header N]

Writes OUT_DIR/model.safetensors (Hugging Face names and layouts, float32,
or bfloat16 for version 5) and OUT_DIR/model.bin (llm.c's layout: a 256 x
int32 header, then each tensor in llm.c's order, layers stacked, linear
weights (out, in), wte padded with junk rows that must be ignored), and
OUT_DIR/tokens.bin. The two weight files hold the same numbers, so gptc eval
must print the same loss for both.
"""
import argparse
import os
import struct
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_torch as ref  # noqa: E402
import torch  # noqa: E402

CFG = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=100)
PER_LAYER = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight",
             "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
             "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
             "mlp.c_proj.weight", "mlp.c_proj.bias"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--version", type=int, default=3)
    ap.add_argument("--padded-vocab", type=int, default=128)
    ap.add_argument("--truncate", type=int, default=0)
    ap.add_argument("--layers-in-header", type=int, default=CFG["n_layer"])
    a = ap.parse_args()
    cfg = ref.GPT2Config(**CFG)
    params = ref.init_params(cfg, 7)
    dtype = torch.bfloat16 if a.version == 5 else torch.float32
    params = {k: v.to(dtype) for k, v in params.items()}
    os.makedirs(a.out, exist_ok=True)
    ref.write_safetensors(os.path.join(a.out, "model.safetensors"), params)
    ref.write_llmc_shard(os.path.join(a.out, "tokens.bin"),
                         ref.random_tokens(2 * 8 + 1, cfg.vocab_size, 3))

    C, V, Vp = cfg.n_embd, cfg.vocab_size, a.padded_vocab
    junk = torch.full((Vp - V, C), 1e4, dtype=dtype)
    pieces = [torch.cat([params["wte.weight"], junk]), params["wpe.weight"]]
    for leaf in PER_LAYER:
        for l in range(cfg.n_layer):
            t = params["h.%d.%s" % (l, leaf)]
            pieces.append(t.t().contiguous() if t.dim() == 2 else t)
    pieces += [params["ln_f.weight"], params["ln_f.bias"]]
    header = [0] * 256
    header[:8] = [20240326, a.version, cfg.block_size, V,
                  a.layers_in_header, cfg.n_head, C, Vp]
    body = b"".join(
        (p.contiguous().view(torch.int16).numpy().tobytes()
         if dtype == torch.bfloat16 else p.contiguous().numpy().tobytes())
        for p in pieces)
    data = struct.pack("<256i", *header) + body
    if a.truncate:
        data = data[:-a.truncate]
    with open(os.path.join(a.out, "model.bin"), "wb") as f:
        f.write(data)


if __name__ == "__main__":
    main()
