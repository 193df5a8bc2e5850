#!/usr/bin/python3
"""Reads a gptc checkpoint folder the way an outside tool would, with the
independent PyTorch GPT-2 of test/reference: the model from the string
metadata of state.safetensors, the weights from model.safetensors, and prints
the loss of the first B*T+1 tokens of a token file as `loss <value>`.

Usage: checkpoint_in_torch.py CKPT_DIR TOKENS B T
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))
import gpt2_torch as ref  # noqa: E402


def main(folder, tokens, B, T):
    _, meta = ref.read_safetensors(os.path.join(folder, "state.safetensors"),
                                   with_metadata=True)
    cfg = ref.GPT2Config(meta["n_layer"], meta["n_head"], meta["n_embd"],
                         meta["block_size"], meta["vocab_size"])
    params = ref.read_safetensors(os.path.join(folder, "model.safetensors"))
    idx, tgt = ref.batch_from_tokens(ref.read_tokens(tokens), B, T)
    _, loss = ref.forward(params, cfg, idx, tgt)
    print("loss %.6f" % loss.item())


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
