"""torch 1.13's real DCP (save_state_dict / load_state_dict) with shardpoint.dcp's
StorageWriter / StorageReader, from N gloo processes.

    /usr/bin/python3 spdcp_worker.py save PORT NPROCS DIR
    /usr/bin/python3 spdcp_worker.py load PORT NPROCS DIR [--step]
    /usr/bin/python3 spdcp_worker.py save-bad PORT NPROCS DIR

save: dcp_save.globals_() as ShardedTensors "emb" (ChunkShardingSpec dim 0) and
"col" (dim 1) over NPROCS ranks, plain "bias" and "ids", the byte item "extra"
(io.BytesIO(b"dcp-bytes-item")) and "step" (an int, a byte item too).
load: into ShardedTensors laid out otherwise (emb by columns, col by rows) over
NPROCS ranks and into plain tensors, "extra" (and with --step "step"); checks
every value bit for bit, and that the metadata was read by rank 0 alone (once
a load); exits non-zero on any difference.
save-bad: the coordinator alone holds an item C++ cannot take (a complex
tensor): every rank must raise (none left waiting in the collective save), and
no checkpoint is written.
"""
import io
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gloo_init import init_gloo  # noqa: E402
from dcp_save import globals_  # noqa: E402


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def sharded(g, key, dim, world, fill):
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec
    spec = ChunkShardingSpec(dim=dim, placements=[f"rank:{r}/cpu" for r in range(world)])
    st = sharded_tensor.empty(spec, *g[key].shape, dtype=g[key].dtype)
    for shard in st.local_shards():
        idx = tuple(slice(o, o + n) for o, n in zip(shard.metadata.shard_offsets,
                                                      shard.metadata.shard_sizes))
        shard.tensor.copy_(g[key][idx] if fill else torch.zeros_like(g[key][idx]))
    return st, spec


def save(rank, world, d):
    import shardpoint.dcp as spdcp
    dcp = spdcp._D.module
    g = globals_()
    sd = {"emb": sharded(g, "emb", 0, world, True)[0], "col": sharded(g, "col", 1, world, True)[0],
          "bias": g["bias"], "ids": g["ids"], "extra": io.BytesIO(b"dcp-bytes-item"), "step": 7}
    dcp.save_state_dict(sd, spdcp.StorageWriter(d))


def save_bad(rank, world, d):
    import shardpoint as sp
    import shardpoint.dcp as spdcp
    dcp = spdcp._D.module
    g = globals_()
    sd = {"emb": sharded(g, "emb", 0, world, True)[0], "z": torch.zeros(2, dtype=torch.complex64)}
    try:
        dcp.save_state_dict(sd, spdcp.StorageWriter(d))
    except dcp.CheckpointException as e:
        err = e.failures[min(e.failures)][0]
        assert isinstance(err, sp.FailedPreconditionError), repr(err)
        assert "rank 0: InvalidArgumentError" in str(err) and "complex" in str(err), str(err)
    else:
        raise AssertionError(f"rank {rank}: the save did not fail")


def check_sharded(st, full, name):
    for shard in st.local_shards():
        idx = tuple(slice(o, o + n) for o, n in zip(shard.metadata.shard_offsets,
                                                      shard.metadata.shard_sizes))
        assert same(shard.tensor, full[idx]), f"sharded '{name}' differs at {idx}"


def count_metadata_reads(spdcp):
    """Counts this process's reads of the checkpoint's metadata (the manifest or
    DCP's .metadata) by the StorageReader."""
    reads = [0]
    md, fs = spdcp._sp_metadata, spdcp._D.FileSystemReader.read_metadata

    def counted_md(*a, **k):
        reads[0] += 1
        return md(*a, **k)

    def counted_fs(self):
        reads[0] += 1
        return fs(self)
    spdcp._sp_metadata = counted_md
    spdcp._D.FileSystemReader.read_metadata = counted_fs
    return reads


def load(rank, world, d, step):
    import shardpoint.dcp as spdcp
    dcp = spdcp._D.module
    reads = count_metadata_reads(spdcp)
    g = globals_()
    sd = {k: torch.zeros_like(v) for k, v in g.items()}
    sd["extra"] = io.BytesIO()
    if step:
        sd["step"] = 0
    dcp.load_state_dict(sd, spdcp.StorageReader(d))
    for k, v in g.items():
        assert same(sd[k], v), f"plain '{k}' differs on rank {rank}"
    assert sd["extra"].getvalue() == b"dcp-bytes-item", sd["extra"]
    assert not step or sd["step"] == 7, sd["step"]
    sd = {"emb": sharded(g, "emb", 1, world, False)[0],
          "col": sharded(g, "col", 0, world, False)[0]}
    dcp.load_state_dict(sd, spdcp.StorageReader(d))
    check_sharded(sd["emb"], g["emb"], "emb")
    check_sharded(sd["col"], g["col"], "col")
    counts = [None] * world
    dist.all_gather_object(counts, reads[0])
    # Two loads: rank 0 read the metadata once for each, and broadcast it.
    assert counts == [2] + [0] * (world - 1), f"metadata reads by rank: {counts}"


def worker(rank, mode, port, world, d, step):
    init_gloo(rank, world, port)
    if mode == "save":
        save(rank, world, d)
    elif mode == "save-bad":
        save_bad(rank, world, d)
    else:
        load(rank, world, d, step)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mode, port, world, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    mp.spawn(worker, args=(mode, port, world, d, "--step" in sys.argv), nprocs=world)
