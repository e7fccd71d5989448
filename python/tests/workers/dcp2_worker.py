"""torch 2.x's real DCP (`torch.distributed.checkpoint`) with DTensors, from N
gloo processes on a CPU device mesh. Needs torch >= 2.4 (test_torch2_dcp.py).

    python3 dcp2_worker.py save OUT NPROCS PORT [--single-file]
    python3 dcp2_worker.py load DIR NPROCS PORT

`save` writes `globals_()` laid out as below with `dcp.save` and FileSystemWriter
(`single_file_per_rank` False, or True with --single-file). `load` reads DIR (a
shardpoint checkpoint converted with `shardpoint convert --to dcp`) with
`dcp.load` into DTensors laid out otherwise, and into plain tensors, and checks
every tensor bit for bit; it prints "dcp2_worker: ok" or exits non-zero.

Saved layout (mesh: 1-D of N ranks; grid: 2-D of 2 x N/2 when N is even):
  "emb"      float32 (10, 4)  Shard(0), uneven
  "col"      bfloat16 (6, 7)  Shard(1), uneven
  "grid"     float32 (8, 6)   [Shard(0), Shard(1)] on the 2-D mesh (N even), else Shard(0)
  "rep"      float32 (5,)     Replicate()
  "bias"     float64 (5,)     plain tensor
  "nested":  {"ids": int32 (3, 2)} plain tensor; DCP flattens it to "nested.ids"
  "extra"    io.BytesIO(b"dcp-bytes-item")
  "step"     7 (an int)
"""
import io
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from gloo_init import init_gloo


def globals_():
    g = torch.Generator().manual_seed(4321)
    return {
        "emb": torch.randn(10, 4, generator=g),
        "col": torch.randn(6, 7, generator=g).to(torch.bfloat16),
        "grid": torch.randn(8, 6, generator=g),
        "rep": torch.randn(5, generator=g),
        "bias": torch.randn(5, generator=g, dtype=torch.float64),
        "nested.ids": torch.randint(-1000, 1000, (3, 2), generator=g, dtype=torch.int32),
    }


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def _dtensors(g, world, layout):
    """key -> DTensor of the global tensors under `layout` ("saved" or "other")."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (world,))
    grid = init_device_mesh("cpu", (2, world // 2)) if world % 2 == 0 else None
    if layout == "saved":
        place = {"emb": (mesh, [Shard(0)]), "col": (mesh, [Shard(1)]),
                 "grid": (grid, [Shard(0), Shard(1)]) if grid else (mesh, [Shard(0)]),
                 "rep": (mesh, [Replicate()])}
    else:
        place = {"emb": (mesh, [Shard(1)]), "col": (mesh, [Shard(0)]),
                 "grid": (grid, [Shard(1), Shard(0)]) if grid else (mesh, [Shard(1)]),
                 "rep": (mesh, [Replicate()])}
    return {k: distribute_tensor(g[k], m, p) for k, (m, p) in place.items()}


def save(rank, out, world, port, single_file):
    import torch.distributed.checkpoint as dcp
    init_gloo(rank, world, port)
    g = globals_()
    sd = dict(_dtensors(g, world, "saved"))
    sd.update(bias=g["bias"], nested={"ids": g["nested.ids"]},
              extra=io.BytesIO(b"dcp-bytes-item"), step=7)
    dcp.save(sd, storage_writer=dcp.FileSystemWriter(out, single_file_per_rank=single_file))
    dist.barrier()
    dist.destroy_process_group()


def load(rank, path, world, port):
    import torch.distributed.checkpoint as dcp
    init_gloo(rank, world, port)
    g = globals_()
    # into DTensors of another layout
    sd = _dtensors({k: torch.zeros_like(t) for k, t in g.items()}, world, "other")
    sd.update(bias=torch.zeros_like(g["bias"]), nested={"ids": torch.zeros_like(g["nested.ids"])})
    dcp.load(sd, storage_reader=dcp.FileSystemReader(path))
    for k in ("emb", "col", "grid", "rep"):
        if not same(sd[k].full_tensor(), g[k]):
            sys.exit(f"dcp2_worker: rank {rank}: DTensor {k!r} differs")
    for k, t in (("bias", sd["bias"]), ("nested.ids", sd["nested"]["ids"])):
        if not same(t, g[k]):
            sys.exit(f"dcp2_worker: rank {rank}: {k!r} differs")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mode, where, world, port = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if mode == "save":
        mp.spawn(save, args=(where, world, port, "--single-file" in sys.argv), nprocs=world)
    else:
        mp.spawn(load, args=(where, world, port), nprocs=world)
        print("dcp2_worker: ok")
