#!/usr/bin/python3
"""Train a tiny transformer with tensor + data parallelism, checkpoint it with
shardpoint, and resume under a different parallel layout.

Tensor parallelism is written by hand with torch.distributed (gloo, CPU), as
Megatron does it: the fused QKV projection and fc1 are column-parallel, the
attention output projection and fc2 row-parallel, the rest replicated. Every
`--save-every` steps the model and the Adam state are saved in the background
(`shardpoint.CheckpointManager.save_async`: --ckpt/iter_0000004, ..., and a
`latest` tracker); training continues while the checkpoint is written.

    # 4 processes, TP 2 x DP 2, 8 steps, checkpoints at steps 4 and 8
    PYTHONPATH=build/python /usr/bin/python3 examples/train_tp.py \
        --nproc 4 --tp 2 --steps 8 --save-every 4 --ckpt /tmp/ckpt --log /tmp/a.json
    # resume from step 4 on 2 processes, TP 1 x DP 2, and run to step 8
    PYTHONPATH=build/python /usr/bin/python3 examples/train_tp.py \
        --nproc 2 --tp 1 --steps 8 --resume /tmp/ckpt/iter_0000004 --log /tmp/b.json

The losses of steps 5..8 of the second run equal those of the first (to float
rounding: TP 2 and TP 1 sum the matmuls in a different order; bit for bit when
resumed under the same layout). --resume latest picks the newest committed
checkpoint under --ckpt; --keep-last N keeps only the newest N. Rank 0 writes
{"losses": {step: loss}, ...} to --log.
"""

import argparse
import json
import math
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

# Model and data: small enough to run in a few seconds on one CPU core.
CFG = dict(vocab=32, hidden=16, heads=4, ffn=32, layers=2, seq=8, batch=8, lr=1e-2, seed=0)


# ---------------------------------------------------------------------------
# Tensor-parallel regions (Megatron's f and g): identity one way, all-reduce
# over the TP group the other way.

class _CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        x = x.clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to_tp(x, group, tp):
    return _CopyToTP.apply(x, group) if tp > 1 else x


def reduce_from_tp(x, group, tp):
    return _ReduceFromTP.apply(x, group) if tp > 1 else x


# ---------------------------------------------------------------------------
# Parameters: every global tensor is initialized identically on every rank
# (one seeded generator, fixed order); each rank keeps its TP shard.

def global_params(c):
    g = torch.Generator().manual_seed(c["seed"])
    H, F_, V = c["hidden"], c["ffn"], c["vocab"]

    def rnd(*shape, scale=0.2):
        return torch.randn(*shape, generator=g) * scale

    p = {"embed.weight": rnd(V, H), "head.weight": rnd(V, H),
         "final_ln.weight": torch.ones(H), "final_ln.bias": torch.zeros(H)}
    for i in range(c["layers"]):
        pre = f"layers.{i}"
        p[f"{pre}.ln1.weight"], p[f"{pre}.ln1.bias"] = torch.ones(H), torch.zeros(H)
        p[f"{pre}.ln2.weight"], p[f"{pre}.ln2.bias"] = torch.ones(H), torch.zeros(H)
        for n in "qkv":
            p[f"{pre}.attn.{n}.weight"] = rnd(H, H)
        p[f"{pre}.attn.proj.weight"] = rnd(H, H)
        p[f"{pre}.attn.proj.bias"] = torch.zeros(H)
        p[f"{pre}.mlp.fc1.weight"] = rnd(F_, H)
        p[f"{pre}.mlp.fc1.bias"] = rnd(F_, scale=0.02)
        p[f"{pre}.mlp.fc2.weight"] = rnd(H, F_)
        p[f"{pre}.mlp.fc2.bias"] = torch.zeros(H)
    return p


def local_params(c, tp_rank, tp):
    """This rank's parameters: name -> (tensor, kind, global shape)."""
    g = global_params(c)
    out = {}
    for name, t in g.items():
        if ".attn.q." in name or ".attn.k." in name or ".attn.v." in name:
            continue
        if name.endswith("attn.proj.weight") or name.endswith("fc2.weight"):
            out[name] = (t.chunk(tp, 1)[tp_rank].clone(), "row", list(t.shape))
        elif ".fc1." in name:
            out[name] = (t.chunk(tp, 0)[tp_rank].clone(), "column", list(t.shape))
        else:
            out[name] = (t.clone(), "replicated", list(t.shape))
    for i in range(c["layers"]):
        pre = f"layers.{i}.attn"
        # Fused QKV: [q_i; k_i; v_i], the local heads of each.
        qkv = torch.cat([g[f"{pre}.{n}.weight"].chunk(tp, 0)[tp_rank] for n in "qkv"], 0)
        out[f"{pre}.qkv.weight"] = (qkv.clone(), "qkv", [c["hidden"], c["hidden"]])
    return {n: (torch.nn.Parameter(t), kind, shape) for n, (t, kind, shape) in out.items()}


def forward(P, c, tokens, tp_group, tp):
    H, heads = c["hidden"], c["heads"]
    hl, d = heads // tp, H // heads
    B, T = tokens.shape
    x = F.embedding(tokens, P["embed.weight"])
    mask = torch.full((T, T), float("-inf")).triu(1)
    for i in range(c["layers"]):
        pre = f"layers.{i}"
        h = F.layer_norm(x, (H,), P[f"{pre}.ln1.weight"], P[f"{pre}.ln1.bias"])
        h = copy_to_tp(h, tp_group, tp)
        q, k, v = (h @ P[f"{pre}.attn.qkv.weight"].t()).split(hl * d, dim=-1)
        q, k, v = (t.reshape(B, T, hl, d).transpose(1, 2) for t in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d) + mask, dim=-1) @ v
        att = att.transpose(1, 2).reshape(B, T, hl * d)
        o = reduce_from_tp(att @ P[f"{pre}.attn.proj.weight"].t(), tp_group, tp)
        x = x + o + P[f"{pre}.attn.proj.bias"]
        h = F.layer_norm(x, (H,), P[f"{pre}.ln2.weight"], P[f"{pre}.ln2.bias"])
        h = copy_to_tp(h, tp_group, tp)
        a = F.gelu(h @ P[f"{pre}.mlp.fc1.weight"].t() + P[f"{pre}.mlp.fc1.bias"])
        o = reduce_from_tp(a @ P[f"{pre}.mlp.fc2.weight"].t(), tp_group, tp)
        x = x + o + P[f"{pre}.mlp.fc2.bias"]
    x = F.layer_norm(x, (H,), P["final_ln.weight"], P["final_ln.bias"])
    return x @ P["head.weight"].t()


def batch(c, step, dp_rank, dp):
    """The global batch of `step` (arithmetic sequences mod vocab), this DP rank's rows."""
    g = torch.Generator().manual_seed(1000 + step)
    B, T, V = c["batch"], c["seq"], c["vocab"]
    start = torch.randint(V, (B, 1), generator=g)
    stride = torch.randint(1, 4, (B, 1), generator=g)
    seq = (start + stride * torch.arange(T + 1)) % V
    rows = seq.chunk(dp, 0)[dp_rank]
    return rows[:, :-1], rows[:, 1:]


# ---------------------------------------------------------------------------
# The checkpoint: shardpoint.torch with a TP map. The parameters live in a
# module tree with Megatron's names; the map says how each one is split, and
# the Adam state of a parameter takes its layout, so both reshard together.

TP_RULES = [(r"attn\.qkv\.weight$", "qkv"),          # fused [q_i; k_i; v_i]
            (r"mlp\.fc1\.(weight|bias)$", "column"),
            (r"(attn\.proj|mlp\.fc2)\.weight$", "row")]  # the rest is replicated


def as_module(P):
    """The parameters as an nn.Module tree whose names are the keys of P."""
    root = torch.nn.Module()
    for name, p in P.items():
        *path, leaf = name.split(".")
        m = root
        for part in path:
            if not hasattr(m, part):
                m.add_module(part, torch.nn.Module())
            m = getattr(m, part)
        m.register_parameter(leaf, p)
    return root


def worker(rank, args):
    import shardpoint as sp
    import shardpoint.torch as spt

    torch.set_num_threads(1)
    c = dict(CFG)
    world, tp = args.nproc, args.tp
    dp = world // tp
    dist.init_process_group("gloo", init_method=f"file://{args.init_file}", rank=rank,
                            world_size=world)
    tp_rank, dp_rank = rank % tp, rank // tp
    tp_group = dp_group = None
    for d in range(dp):  # every rank creates every group, in the same order
        g = dist.new_group([d * tp + t for t in range(tp)])
        tp_group = g if d == dp_rank else tp_group
    for t in range(tp):
        g = dist.new_group([d * tp + t for d in range(dp)])
        dp_group = g if t == tp_rank else dp_group
    comm = sp.TorchDistributedComm()  # shardpoint's own gloo group

    local = local_params(c, tp_rank, tp)
    P = {n: p for n, (p, _, _) in local.items()}
    model = as_module(P)
    opt = torch.optim.Adam(model.parameters(), lr=c["lr"])
    # model + Adam (keyed by parameter name, laid out by the TP map); no RNG: the data
    # comes from seeded generators, and a per-rank RNG would not survive a new world size
    state = spt.TrainState(model, opt, layouts=spt.TPPlan(TP_RULES, tp_rank, tp), comm=comm,
                           rng=False)

    # iter_NNNNNNN directories under --ckpt, a `latest` tracker, retention, a lock.
    ckpt = sp.CheckpointManager(args.ckpt, comm, keep_last=args.keep_last)
    start = 0
    if args.resume:
        # strict: every key present, nothing left over; a fresh Adam needs no step first
        if args.resume == "latest":
            it, found = state.resume(ckpt)
            if it is None or found is None:
                raise SystemExit(f"no committed checkpoint under {args.ckpt}")
            res, path = found, ckpt.path_for(it)
        else:
            path = args.resume
            res = state.load(path)
        start = res.common["step"]
        if rank == 0:
            print(f"resumed from {path} at step {start} (TP {tp} x DP {dp})", flush=True)

    losses, handle = {}, None
    for step in range(start + 1, args.steps + 1):
        inputs, targets = batch(c, step, dp_rank, dp)
        logits = forward(P, c, inputs, tp_group, tp)
        loss = F.cross_entropy(logits.reshape(-1, c["vocab"]), targets.reshape(-1))
        opt.zero_grad()
        loss.backward()
        for p in P.values():  # data parallel: average the gradients
            if dp > 1:
                dist.all_reduce(p.grad, group=dp_group)
                p.grad /= dp
        opt.step()
        reported = loss.detach().clone()
        if dp > 1:
            dist.all_reduce(reported, group=dp_group)
            reported /= dp
        losses[step] = reported.item()
        if rank == 0:
            print(f"step {step} loss {losses[step]:.6f}", flush=True)
        if args.save_every and step % args.save_every == 0:
            # Stalls only for the copy; the previous save (if any) is waited for first.
            handle = ckpt.save_async(state.state_dict(), step,
                                     common={"step": step, "config": c})
    if handle is not None:
        stats = handle.wait()
        if rank == 0:
            print(f"last checkpoint: {handle.path} ({stats.bytes_written} bytes, "
                  f"training stalled {handle.stall_seconds * 1e3:.1f} ms)", flush=True)
    ckpt.close()  # releases the lock
    if rank == 0 and args.log:
        with open(args.log, "w") as f:
            json.dump({"losses": losses, "tp": tp, "dp": dp, "start": start}, f)
    dist.barrier()
    dist.destroy_process_group()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--tp", type=int, default=2, help="tensor-parallel size (divides 4 heads)")
    ap.add_argument("--steps", type=int, default=8, help="train up to this step")
    ap.add_argument("--save-every", type=int, default=0)
    ap.add_argument("--ckpt", default="ckpt", help="checkpoint root")
    ap.add_argument("--resume", default=None, help="a checkpoint directory, or 'latest'")
    ap.add_argument("--keep-last", type=int, default=0, help="keep the newest N checkpoints")
    ap.add_argument("--log", default=None, help="rank 0 writes the losses here (JSON)")
    args = ap.parse_args(argv)
    if args.nproc % args.tp or CFG["heads"] % args.tp or CFG["batch"] % (args.nproc // args.tp):
        ap.error("tp must divide nproc and the 4 heads; dp = nproc/tp must divide the batch 8")
    os.makedirs(args.ckpt, exist_ok=True)
    fd, args.init_file = tempfile.mkstemp(prefix="train_tp_init_", dir=args.ckpt)
    os.close(fd)
    os.unlink(args.init_file)  # torch's file store creates it
    try:
        mp.spawn(worker, args=(args,), nprocs=args.nproc, join=True)
    finally:
        if os.path.exists(args.init_file):
            os.unlink(args.init_file)


if __name__ == "__main__":
    sys.exit(main())
