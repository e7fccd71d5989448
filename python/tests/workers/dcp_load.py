"""Loads DCP directories with torch 1.13's real DCP (load_state_dict with
FileSystemReader) from N gloo processes and checks them bit for bit against
dcp_save.globals_(): into plain tensors, then into ShardedTensors laid out
otherwise (emb by columns, col by rows). Exits non-zero on any difference.

    /usr/bin/python3 dcp_load.py PORT NPROCS DIR [DIR ...]

A DIR given as `+DIR` also holds the byte item "extra" (io.BytesIO(b"dcp-bytes-item")).
"""
import io
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
from dcp_compat import import_dcp  # noqa: E402
from gloo_init import init_gloo  # noqa: E402
from dcp_save import globals_  # noqa: E402


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def worker(rank, port, world, dirs):
    dcp = import_dcp()
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec

    init_gloo(rank, world, port)
    g = globals_()
    placements = [f"rank:{r}/cpu" for r in range(world)]
    for d in dirs:
        extra = d.startswith("+")
        d = d.lstrip("+")
        sd = {k: torch.zeros_like(v) for k, v in g.items()}
        if extra:
            sd["extra"] = io.BytesIO()
        dcp.load_state_dict(sd, dcp.FileSystemReader(d))
        for k, v in g.items():
            assert same(sd[k], v), f"{d}: plain '{k}' differs on rank {rank}"
        if extra:
            assert sd["extra"].getvalue() == b"dcp-bytes-item", f"{d}: extra is {sd['extra']!r}"
        sd = {}
        for key, dim in (("emb", 1), ("col", 0)):
            sd[key] = sharded_tensor.zeros(ChunkShardingSpec(dim=dim, placements=placements),
                                           *g[key].shape, dtype=g[key].dtype)
        dcp.load_state_dict(sd, dcp.FileSystemReader(d))
        for key, st in sd.items():
            for shard in st.local_shards():
                idx = tuple(slice(o, o + n) for o, n in zip(shard.metadata.shard_offsets,
                                                              shard.metadata.shard_sizes))
                assert same(shard.tensor, g[key][idx]), f"{d}: sharded '{key}' differs on {rank}"
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    port, world = int(sys.argv[1]), int(sys.argv[2])
    mp.spawn(worker, args=(port, world, sys.argv[3:]), nprocs=world)
    print("dcp_load: ok", sys.argv[3:])
