"""torch 2.x's real DCP (`torch.distributed.checkpoint`) with shardpoint.dcp's
StorageWriter / StorageReader, DTensors on a CPU device mesh, N gloo processes.
Needs torch >= 2.4 (test_torch2_dcp_backend.py).

    python3 spdcp2_worker.py save OUT NPROCS PORT [--async] [--checkpoint-id]
    python3 spdcp2_worker.py load DIR NPROCS PORT [--values]

`save` writes dcp2_worker.globals_() in dcp2_worker's saved layout (plus
"nested", "extra" and "step") with `dcp.save` (or `dcp.async_save` and
waiting for it) and shardpoint.dcp.StorageWriter(OUT) (or StorageWriter() and
checkpoint_id=OUT). `load` reads DIR (a shardpoint checkpoint, or a plain DCP
directory) with `dcp.load` and shardpoint.dcp.StorageReader into DTensors laid
out otherwise and plain tensors, and with --values also "extra" and "step";
checks every value bit for bit; prints "spdcp2_worker: ok" or exits non-zero.
"""
import io
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from dcp2_worker import _dtensors, globals_, same
from gloo_init import init_gloo


def save(rank, out, world, port, use_async, by_id):
    import torch.distributed.checkpoint as dcp

    import shardpoint.dcp as spdcp
    init_gloo(rank, world, port)
    g = globals_()
    sd = dict(_dtensors(g, world, "saved"))
    sd.update(bias=g["bias"], nested={"ids": g["nested.ids"]},
              extra=io.BytesIO(b"dcp-bytes-item"), step=7)
    writer = spdcp.StorageWriter() if by_id else spdcp.StorageWriter(out)
    kwargs = {"checkpoint_id": out} if by_id else {}
    if use_async:
        dcp.async_save(sd, storage_writer=writer, **kwargs).result()
    else:
        dcp.save(sd, storage_writer=writer, **kwargs)
    dist.barrier()
    dist.destroy_process_group()


def load(rank, path, world, port, values):
    import torch.distributed.checkpoint as dcp

    import shardpoint.dcp as spdcp
    init_gloo(rank, world, port)
    g = globals_()
    sd = _dtensors({k: torch.zeros_like(t) for k, t in g.items()}, world, "other")
    sd.update(bias=torch.zeros_like(g["bias"]), nested={"ids": torch.zeros_like(g["nested.ids"])})
    if values:
        sd.update(extra=io.BytesIO(), step=0)
    dcp.load(sd, storage_reader=spdcp.StorageReader(path))
    for k in ("emb", "col", "grid", "rep"):
        if not same(sd[k].full_tensor(), g[k]):
            sys.exit(f"spdcp2_worker: rank {rank}: DTensor {k!r} differs")
    for k, t in (("bias", sd["bias"]), ("nested.ids", sd["nested"]["ids"])):
        if not same(t, g[k]):
            sys.exit(f"spdcp2_worker: rank {rank}: {k!r} differs")
    if values and (sd["extra"].getvalue() != b"dcp-bytes-item" or sd["step"] != 7):
        sys.exit(f"spdcp2_worker: rank {rank}: values {sd['extra']!r}, {sd['step']!r}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mode, where, world, port = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if mode == "save":
        mp.spawn(save, args=(where, world, port, "--async" in sys.argv,
                             "--checkpoint-id" in sys.argv), nprocs=world)
    else:
        mp.spawn(load, args=(where, world, port, "--values" in sys.argv), nprocs=world)
    print("spdcp2_worker: ok")
