#!/usr/bin/python3
"""dcp_backend_bench: torch DCP's save_state_dict / load_state_dict with
shardpoint.dcp's StorageWriter / StorageReader beside DCP's own
FileSystemWriter / FileSystemReader, in one run.

    # smoke: 0.1 GiB, 2 ranks, 3 reps
    PYTHONPATH=build-test/python /usr/bin/python3 bench/dcp_backend_bench.py --gib 0.1 --reps 3
    PYTHONPATH=build-rel/python /usr/bin/python3 bench/dcp_backend_bench.py --gib 2 --reps 5

W processes (torch.distributed gloo) hold a state of 8 float32 matrices (GIB
in all, 4096 columns), each a ShardedTensor split by rows over the W ranks
(ChunkShardingSpec dim 0), plus a step counter (a DCP bytes item). Each
repetition saves it through torch 1.13's real DCP with each backend into a
fresh directory (both fsync their files: FileSystemWriter's sync_files
default, shardpoint's commit), then loads it resharded, every matrix split
by columns (dim 1), after evicting the files from the page cache
(POSIX_FADV_DONTNEED). Backends alternate their order each repetition.
Reported on rank 0, seconds from a barrier before to one after: save and
load GB/s (the state's bytes / seconds), median and min-max. The first
load of each backend is checked bit for bit; the bench exits non-zero on a
wrong value.
"""

import argparse
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from peers.measure import drop_page_cache  # noqa: E402

COLS = 4096
TENSORS = 8
BACKENDS = ["shardpoint.dcp", "DCP FileSystem"]


def matrices(gib, seed=0):
    rows = max(1, int(gib * (1 << 30) / 4 / COLS / TENSORS))
    g = torch.Generator().manual_seed(seed)
    return {f"w{i}": torch.randn(rows, COLS, generator=g) for i in range(TENSORS)}


def sharded(full, dim, world, fill):
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec
    spec = ChunkShardingSpec(dim=dim, placements=[f"rank:{r}/cpu" for r in range(world)])
    st = sharded_tensor.empty(spec, *full.shape, dtype=full.dtype)
    for shard in st.local_shards():
        idx = tuple(slice(o, o + n) for o, n in zip(shard.metadata.shard_offsets,
                                                      shard.metadata.shard_sizes))
        if fill:
            shard.tensor.copy_(full[idx])
    return st


def check(sd, full):
    for k, st in sd.items():
        for shard in st.local_shards():
            idx = tuple(slice(o, o + n) for o, n in zip(shard.metadata.shard_offsets,
                                                          shard.metadata.shard_sizes))
            if not torch.equal(shard.tensor.view(torch.int32), full[k][idx].view(torch.int32)):
                raise SystemExit(f"wrong value in '{k}' at {idx}")


def timed(fn):
    dist.barrier()
    t0 = time.perf_counter()
    fn()
    dist.barrier()
    return time.perf_counter() - t0


def one_rep(name, rep, base, dcp, spdcp, full, world, rank):
    d = os.path.join(base, f"{name.split()[0]}-{rep}")
    sd = {k: sharded(v, 0, world, True) for k, v in full.items()}
    sd["step"] = rep
    if name == BACKENDS[0]:
        writer, reader = spdcp.StorageWriter(d), spdcp.StorageReader(d)
    else:
        writer, reader = dcp.FileSystemWriter(d), dcp.FileSystemReader(d)
    save_s = timed(lambda: dcp.save_state_dict(sd, writer))
    if rank == 0:
        drop_page_cache("files", [d])
    target = {k: sharded(v, 1, world, False) for k, v in full.items()}
    load_s = timed(lambda: dcp.load_state_dict(target, reader))
    if rep == 0:
        check(target, full)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(d)
    return save_s, load_s


def worker(rank, world, port, args, base, out):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    import shardpoint.dcp as spdcp  # imports torch 1.13's DCP (patched on Python 3.11)
    dcp = spdcp._D.module
    full = matrices(args.gib)
    times = {b: ([], []) for b in BACKENDS}
    for rep in range(args.reps):
        for name in (BACKENDS if rep % 2 == 0 else BACKENDS[::-1]):
            s, ld = one_rep(name, rep, base, dcp, spdcp, full, world, rank)
            times[name][0].append(s)
            times[name][1].append(ld)
    if rank == 0:
        out.put(times)
    dist.destroy_process_group()


def gbps(nbytes, secs):
    med = statistics.median(secs)
    return f"{nbytes / med / 1e9:6.2f} GB/s ({nbytes / max(secs) / 1e9:.2f}-" \
           f"{nbytes / min(secs) / 1e9:.2f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=0.25)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where checkpoints are written (default: a "
                    "temporary directory under $TMPDIR)")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="dcp_backend_bench-", dir=args.dir)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    try:
        mp.spawn(worker, args=(args.ranks, port, args, base, out), nprocs=args.ranks)
        times = out.get()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    nbytes = sum(v.numel() * 4 for v in matrices(args.gib).values())
    print(f"{nbytes / (1 << 30):.2f} GiB, {args.ranks} ranks, {args.reps} reps, torch "
          f"{torch.__version__}; median GB/s (min-max)")
    for name in BACKENDS:
        save, load = times[name]
        print(f"  {name:15s} save {gbps(nbytes, save)}   load (resharded) {gbps(nbytes, load)}")


if __name__ == "__main__":
    main()
