"""Saves a state dict with torch 1.13's real DCP from N gloo processes.

    /usr/bin/python3 dcp_save.py OUT NPROCS PORT [--single-file]

The state dict (values from torch.manual_seed(1234), the same on every rank;
test_dcp.py rebuilds the globals with `globals_()`):
  "emb"    float32 (10, 4)  ShardedTensor, ChunkShardingSpec dim 0 (uneven)
  "col"    bfloat16 (6, 7)  ShardedTensor, ChunkShardingSpec dim 1 (uneven)
  "bias"   float64 (5,)     plain tensor (replicated)
  "ids"    int32 (3, 2)     plain tensor
  "extra"  io.BytesIO(b"dcp-bytes-item")
"""
import io
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from dcp_compat import import_dcp  # noqa: E402
from gloo_init import init_gloo  # noqa: E402


def globals_():
    g = torch.Generator().manual_seed(1234)
    return {
        "emb": torch.randn(10, 4, generator=g),
        "col": torch.randn(6, 7, generator=g).to(torch.bfloat16),
        "bias": torch.randn(5, generator=g, dtype=torch.float64),
        "ids": torch.randint(-1000, 1000, (3, 2), generator=g, dtype=torch.int32),
    }


def worker(rank, out, world, port, single_file):
    dcp = import_dcp()
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec

    init_gloo(rank, world, port)
    g = globals_()
    placements = [f"rank:{r}/cpu" for r in range(world)]
    sd = {}
    for key, dim in (("emb", 0), ("col", 1)):
        st = sharded_tensor.empty(ChunkShardingSpec(dim=dim, placements=placements),
                                  *g[key].shape, dtype=g[key].dtype)
        for shard in st.local_shards():
            idx = tuple(slice(o, o + n) for o, n in zip(shard.metadata.shard_offsets,
                                                          shard.metadata.shard_sizes))
            shard.tensor.copy_(g[key][idx])
        sd[key] = st
    sd["bias"] = g["bias"]
    sd["ids"] = g["ids"]
    sd["extra"] = io.BytesIO(b"dcp-bytes-item")
    dcp.save_state_dict(sd, dcp.FileSystemWriter(out, single_file_per_rank=single_file))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    out, world, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    mp.spawn(worker, args=(out, world, port, "--single-file" in sys.argv), nprocs=world)
