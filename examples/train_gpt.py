#!/usr/bin/python3
"""Train a small GPT-like model in one process, checkpoint it with
shardpoint.torch, and resume in a fresh process bit for bit.

The model has tied input/output embeddings, causal self-attention with
dropout, and is trained with AdamW (two parameter groups) under a
warmup + cosine OneCycleLR schedule; batches are drawn from torch's RNG, so
resuming exactly needs the model, the optimizer, the scheduler and the RNG.

    # 12 steps, a checkpoint at step 6
    PYTHONPATH=build/python /usr/bin/python3 examples/train_gpt.py \
        --steps 12 --save-at 6 --ckpt /tmp/gpt --log /tmp/gpt/full.json
    # a fresh process resumes from step 6 and runs to step 12
    PYTHONPATH=build/python /usr/bin/python3 examples/train_gpt.py \
        --steps 12 --resume --ckpt /tmp/gpt --log /tmp/gpt/resumed.json

The losses of steps 7..12 and the final parameters (a SHA-256 in the log)
of both runs are identical.
"""

import argparse
import hashlib
import json
import math
import sys

import torch
import torch.nn.functional as F

import shardpoint.torch as spt

CFG = dict(vocab=64, hidden=32, heads=4, layers=2, seq=16, batch=8, dropout=0.1, lr=3e-3)


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        H = c["hidden"]
        self.ln1, self.ln2 = torch.nn.LayerNorm(H), torch.nn.LayerNorm(H)
        self.qkv, self.proj = torch.nn.Linear(H, 3 * H), torch.nn.Linear(H, H)
        self.fc1, self.fc2 = torch.nn.Linear(H, 4 * H), torch.nn.Linear(4 * H, H)
        self.drop = torch.nn.Dropout(c["dropout"])
        self.heads = c["heads"]

    def forward(self, x):
        B, T, H = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(H, dim=-1)
        q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        y = (self.drop(att.softmax(-1)) @ v).transpose(1, 2).reshape(B, T, H)
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))


class GPT(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.tok = torch.nn.Embedding(c["vocab"], c["hidden"])
        self.pos = torch.nn.Embedding(c["seq"], c["hidden"])
        self.blocks = torch.nn.ModuleList(Block(c) for _ in range(c["layers"]))
        self.ln = torch.nn.LayerNorm(c["hidden"])
        self.head = torch.nn.Linear(c["hidden"], c["vocab"], bias=False)
        self.head.weight = self.tok.weight  # tied embeddings

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def build(c, steps):
    """The job as a fresh process builds it (before any checkpoint is loaded)."""
    torch.manual_seed(0)
    model = GPT(c)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}], lr=c["lr"],
                            betas=(0.9, 0.95))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=c["lr"], total_steps=steps,
                                                pct_start=0.25)
    return model, opt, sched


def batch(c):
    """Sequences k, k+s, k+2s, ... (mod vocab) with random k and s: learnable."""
    start = torch.randint(c["vocab"], (c["batch"], 1))
    stride = torch.randint(1, 5, (c["batch"], 1))
    seq = (start + stride * torch.arange(c["seq"] + 1)) % c["vocab"]
    return seq[:, :-1], seq[:, 1:]


def digest(model):
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--save-at", type=int, default=0, help="checkpoint after this step")
    ap.add_argument("--ckpt", default="ckpt_gpt", help="checkpoint directory")
    ap.add_argument("--resume", action="store_true", help="resume from --ckpt")
    ap.add_argument("--log", default=None, help="write the losses and a digest here (JSON)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    c = dict(CFG)
    model, opt, sched = build(c, args.steps)
    state = spt.TrainState(model, opt, schedulers=sched, extra={"step": 0})  # + RNG

    start = 0
    if args.resume:
        state.load(args.ckpt)  # model, AdamW (never stepped here), schedule, RNG
        start = state.extra["step"]
        print(f"resumed from {args.ckpt} at step {start}", flush=True)
    losses = {}
    for step in range(start + 1, args.steps + 1):
        model.train()
        x, y = batch(c)
        loss = F.cross_entropy(model(x).reshape(-1, c["vocab"]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses[step] = loss.item()
        print(f"step {step} loss {losses[step]:.6f} lr {sched.get_last_lr()[0]:.2e}", flush=True)
        if step == args.save_at:
            state.extra = {"step": step}
            state.save(args.ckpt, overwrite=True)
    if args.log:
        with open(args.log, "w") as f:
            json.dump({"losses": {str(k): v.hex() for k, v in losses.items()},
                       "digest": digest(model), "start": start}, f)


if __name__ == "__main__":
    sys.exit(main())
