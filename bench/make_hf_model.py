#!/usr/bin/python3
"""Writes a Llama-like Hugging Face model (bf16 safetensors + config.json) of
seeded random bytes, for timing `shardpoint convert` / `export-hf` / `diff`:

    /usr/bin/python3 bench/make_hf_model.py OUT [--layers 8] [--hidden 1024]

Defaults: 8 layers, hidden 1024, 8 heads / 4 KV groups, ffn 4096, vocab
32000: 75 tensors, the largest (embedding, lm_head) 62.5 MiB; it prints the
total. Files of at most --max-shard-mb MiB with model.safetensors.index.json.
"""

import argparse
import json
import os
import struct

import numpy as np


def tensors(a):
    h, q, kv = a.hidden, a.heads * a.head_dim, a.groups * a.head_dim
    yield "model.embed_tokens.weight", (a.vocab, h)
    yield "model.norm.weight", (h,)
    yield "lm_head.weight", (a.vocab, h)
    for i in range(a.layers):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (h,)
        yield p + "post_attention_layernorm.weight", (h,)
        yield p + "self_attn.q_proj.weight", (q, h)
        yield p + "self_attn.k_proj.weight", (kv, h)
        yield p + "self_attn.v_proj.weight", (kv, h)
        yield p + "self_attn.o_proj.weight", (h, q)
        yield p + "mlp.gate_proj.weight", (a.ffn, h)
        yield p + "mlp.up_proj.weight", (a.ffn, h)
        yield p + "mlp.down_proj.weight", (h, a.ffn)


def write_file(path, items, rng):
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in items:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape in items:
            f.write(rng.integers(0, 1 << 16, size=int(np.prod(shape)), dtype=np.uint16).tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--max-shard-mb", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    a.head_dim = a.hidden // a.heads
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    shards, cur, size = [], [], 0
    for name, shape in tensors(a):
        n = int(np.prod(shape)) * 2
        if cur and size + n > a.max_shard_mb << 20:
            shards.append(cur)
            cur, size = [], 0
        cur.append((name, shape))
        size += n
    shards.append(cur)
    weight_map, total = {}, 0
    for i, items in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_file(os.path.join(a.out, fname), items, rng)
        for name, shape in items:
            weight_map[name] = fname
            total += int(np.prod(shape)) * 2
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump({"hidden_size": a.hidden, "num_attention_heads": a.heads,
                   "num_key_value_heads": a.groups, "num_hidden_layers": a.layers,
                   "intermediate_size": a.ffn, "vocab_size": a.vocab}, f, indent=2)
    print(f"{a.out}: {len(weight_map)} tensors, {total / 2**20:.1f} MiB in {len(shards)} files")


if __name__ == "__main__":
    main()
