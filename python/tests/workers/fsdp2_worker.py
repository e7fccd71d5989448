"""A model sharded with torch 2.x's FSDP2 (`fully_shard` on a CPU device mesh,
gloo), one AdamW step, saved with `shardpoint.torch.TrainState`; resumed under
another FSDP2 world size. Needs torch >= 2.6 (test_torch2_fsdp.py).

    python3 fsdp2_worker.py save OUT NPROCS PORT REF
    python3 fsdp2_worker.py save2d OUT 4 PORT REF
    python3 fsdp2_worker.py load OUT NPROCS PORT REF
    python3 fsdp2_worker.py load2d OUT 4 PORT REF

`save` also writes REF (torch.save, rank 0): every parameter and AdamW moment
as a full tensor (`DTensor.full_tensor()`), the reference the loads compare
with bit for bit. `load` resumes OUT into a fresh FSDP2 model of NPROCS ranks
(the sharding differs from the saving job's) and checks every local shard
against REF's rows; both print "fsdp2_worker: ok". `save2d` saves from FSDP2
over tensor parallelism on a 2 x 2 (dp, tp) mesh: the first Linear column-
parallel, the second row-parallel, then `fully_shard` over dp, so the first
one's weight and bias are `(_StridedShard(0, 2), Shard(0))` DTensors; `load2d`
resumes into that layout.
"""
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from gloo_init import init_gloo


def build():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.ReLU(), torch.nn.Linear(10, 7),
                                torch.nn.Linear(7, 5, bias=False))
    return model


def shard(model, world):
    from torch.distributed.device_mesh import init_device_mesh
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (world,))
    for m in model:
        if isinstance(m, torch.nn.Linear):
            fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return opt


def shard_2d(model, world):
    """FSDP2 over TP on a (dp, tp) = (world / 2, 2) CPU mesh."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    for m in model:
        if isinstance(m, torch.nn.Linear):
            fully_shard(m, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    return torch.optim.AdamW(model.parameters(), lr=1e-2)


def full(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def save(rank, out, world, port, ref, two_d=False):
    import shardpoint.torch as spt
    init_gloo(rank, world, port)
    model = build()
    opt = shard_2d(model, world) if two_d else shard(model, world)
    if two_d:  # the layout this mode exists for
        names = {type(pl).__name__ for p in model.parameters() for pl in p.placements}
        assert "_StridedShard" in names, names
    torch.manual_seed(1)
    model(torch.randn(4, 6)).square().sum().backward()
    opt.step()
    spt.TrainState(model, opt, rng=False).save(out)
    want = {}
    for name, p in model.named_parameters():
        want[name] = full(p.detach())
        for k in ("exp_avg", "exp_avg_sq"):
            want[f"{name}.{k}"] = full(opt.state[p][k])
    if rank == 0:
        torch.save(want, ref)
    dist.barrier()
    dist.destroy_process_group()


def save2d(rank, out, world, port, ref):  # a function: mp.spawn pickles it
    save(rank, out, world, port, ref, two_d=True)


def load2d(rank, out, world, port, ref):
    load(rank, out, world, port, ref, two_d=True)


def load(rank, out, world, port, ref, two_d=False):
    import shardpoint.torch as spt
    init_gloo(rank, world, port)
    model = build()
    opt = shard_2d(model, world) if two_d else shard(model, world)
    spt.TrainState(model, opt, rng=False).load(out)
    want = torch.load(ref, weights_only=True)
    for name, p in model.named_parameters():
        for key, t in ((name, p.detach()), (f"{name}.exp_avg", opt.state[p]["exp_avg"]),
                       (f"{name}.exp_avg_sq", opt.state[p]["exp_avg_sq"])):
            if not torch.equal(full(t), want[key]):
                sys.exit(f"fsdp2_worker: rank {rank}: {key} differs after the resume")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mode, out, world, port, ref = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), \
        sys.argv[5]
    fn = {"save": save, "save2d": save2d, "load": load, "load2d": load2d}[mode]
    mp.spawn(fn, args=(out, world, port, ref), nprocs=world)
    print("fsdp2_worker: ok")
