#!/usr/bin/python3
"""dcp_read_bench: a resharded load from a PyTorch DCP checkpoint, by shardpoint
(reading the DCP directory itself) beside DCP's own load_state_dict.

    # smoke: 0.1 GiB, 2 reps
    PYTHONPATH=build-test/python /usr/bin/python3 bench/dcp_read_bench.py --gib 0.1 --reps 2
    PYTHONPATH=build-rel/python /usr/bin/python3 bench/dcp_read_bench.py --gib 2 --reps 3

W processes (torch.distributed gloo) save a state of 8 float32 matrices
(GIB in all, 4096 columns) with torch 1.13's real DCP
(torch.distributed._shard.checkpoint, FileSystemWriter: one .distcp file per
item), each matrix a ShardedTensor split by rows over the W ranks
(ChunkShardingSpec dim 0). The same W processes then load it into another
layout: every matrix split by columns (ChunkShardingSpec dim 1), so every
rank needs a piece of every stored item.

* shardpoint: sp.load of the DCP directory over TorchDistributedComm into
  sp.ShardedTensor column pieces: it reads the byte runs each rank needs,
  those of one 1 MiB unit of an item in one request; with its defaults
  (cooperative reads on: bytes several ranks need are read once and sent
  over the comm) and with cooperative=False;
* DCP: load_state_dict(FileSystemReader) into ShardedTensors sharded by
  columns (it torch.loads every stored item a rank's shard overlaps, whole).

Repetitions are interleaved (the order alternates each repetition); before
each load the checkpoint's files are evicted from the page cache
(POSIX_FADV_DONTNEED; `--drop all`: sync + drop_caches). Reported per peer: read GB/s
(the state's bytes / seconds from a barrier before to a barrier after, on
rank 0) as median and min-max; bytes read per needed byte (the ranks'
/proc/self/io rchar, i.e. bytes through read syscalls, summed, over the
state's bytes: every byte is needed by exactly one rank); and the largest peak RSS growth of a rank. The first
repetition of each peer is checked bit for bit; the bench exits non-zero on
a wrong value.
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
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "python", "tests"))
sys.path.insert(0, HERE)
from dcp_compat import import_dcp  # noqa: E402
from peers.measure import (drop_page_cache, io_counters, peak_rss_bytes,  # noqa: E402
                           reset_peak_rss, rss_bytes)

COLS = 4096
TENSORS = 8
PEERS = ["shardpoint", "shardpoint, coop off", "PyTorch DCP"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gib", type=float, default=2.0, help="state size in GiB (default 2)")
    p.add_argument("--ranks", type=int, default=2, help="gloo processes (default 2)")
    p.add_argument("--reps", type=int, default=3, help="repetitions per peer (default 3)")
    p.add_argument("--dir", default=None, help="where to write the checkpoint (default: a temp dir)")
    p.add_argument("--drop", choices=["all", "files", "none"], default="files",
                   help="before each load: evict the checkpoint's files from the page cache "
                        "(files, the default: the machine may be shared), drop the whole "
                        "page cache (all: needs root) or nothing")
    return p.parse_args(argv)


def rows_for(gib, world):
    rows = int(gib * (1 << 30)) // (TENSORS * COLS * 4)
    return max(world, (rows + world - 1) // world * world)


def values(t, r0, r1, c0, c1):
    """The deterministic contents of matrix t, rows [r0, r1), columns [c0, c1)."""
    r = torch.arange(r0, r1, dtype=torch.int64).unsqueeze(1)
    c = torch.arange(c0, c1, dtype=torch.int64).unsqueeze(0)
    return ((r * COLS + c) * 2654435761 + t).remainder(1 << 24).to(torch.float32)


def split(n, world, rank):
    base, extra = divmod(n, world)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


def worker(rank, world, port, args, path, rows):
    import shardpoint as sp
    dcp = import_dcp()  # first: it patches the import that sharded_tensor needs
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    placements = [f"rank:{r}/cpu" for r in range(world)]
    keys = [f"layer{t}.weight" for t in range(TENSORS)]

    # Save with DCP, rows over ranks.
    state = {}
    for t, k in enumerate(keys):
        st = sharded_tensor.empty(ChunkShardingSpec(dim=0, placements=placements), rows, COLS)
        for shard in st.local_shards():
            r0, n = shard.metadata.shard_offsets[0], shard.metadata.shard_sizes[0]
            shard.tensor.copy_(values(t, r0, r0 + n, 0, COLS))
        state[k] = st
    t0 = time.perf_counter()
    dcp.save_state_dict(state, dcp.FileSystemWriter(path))
    dist.barrier()
    save_s = time.perf_counter() - t0
    del state

    comm = sp.TorchDistributedComm()
    c0, c1 = split(COLS, world, rank)
    total = TENSORS * rows * COLS * 4

    def load_shardpoint(cooperative=None):
        out = {k: torch.empty(rows, c1 - c0) for k in keys}
        sd = {k: sp.ShardedTensor(k, out[k], [rows, COLS], [0, c0]) for k in keys}
        sp.load(sd, path, comm, cooperative=cooperative)
        return {k: (out[k], c0) for k in keys}

    def load_dcp():
        sd = {k: sharded_tensor.empty(ChunkShardingSpec(dim=1, placements=placements), rows, COLS)
              for k in keys}
        dcp.load_state_dict(sd, dcp.FileSystemReader(path))
        out = {}
        for k in keys:
            (shard,) = sd[k].local_shards()
            out[k] = (shard.tensor, shard.metadata.shard_offsets[1])
        return out

    loads = {"shardpoint": load_shardpoint, "shardpoint, coop off": lambda: load_shardpoint(False),
             "PyTorch DCP": load_dcp}
    results = {p: [] for p in PEERS}
    dropped = "not dropped"
    for rep in range(args.reps):
        order = PEERS if rep % 2 == 0 else PEERS[::-1]
        for peer in order:
            if rank == 0 and args.drop != "none":
                dropped = drop_page_cache(args.drop, [path])
            dist.barrier()
            reset_peak_rss()
            rss0 = rss_bytes()
            io0 = io_counters()["rchar"]
            t0 = time.perf_counter()
            got = loads[peer]()
            dist.barrier()
            secs = time.perf_counter() - t0
            rchar = io_counters()["rchar"] - io0
            rss = peak_rss_bytes() - rss0
            ok = True
            if rep == 0:  # the first run of each peer
                for t, k in enumerate(keys):
                    tensor, off = got[k]
                    want = values(t, 0, rows, off, off + tensor.shape[1])
                    ok = ok and torch.equal(tensor.contiguous().view(torch.int32),
                                            want.view(torch.int32))
            del got
            gathered = [None] * world
            dist.all_gather_object(gathered, (rchar, rss, ok))
            if rank == 0:
                results[peer].append({
                    "seconds": secs,
                    "read_per_needed": sum(g[0] for g in gathered) / total,
                    "rss": max(g[1] for g in gathered),
                    "ok": all(g[2] for g in gathered),
                })
    dist.barrier()
    comm = None
    dist.destroy_process_group()
    if rank == 0:
        report(args, world, rows, total, save_s, results, dropped)
        if not all(r["ok"] for rs in results.values() for r in rs):
            sys.exit("dcp_read_bench: a load returned wrong values")


def report(args, world, rows, total, save_s, results, dropped):
    gb = total / 1e9
    print(f"state: {TENSORS} float32 matrices ({rows}, {COLS}) = {total / (1 << 30):.2f} GiB; "
          f"{world} gloo ranks; DCP save by torch {torch.__version__} took {save_s:.1f} s "
          f"({gb / save_s:.2f} GB/s)")
    print(f"load: saved by rows over {world} ranks, loaded by columns over {world} ranks; "
          f"{args.reps} interleaved reps; page cache before each load: {dropped}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"{'peer':<21} {'GB/s median':>12} {'(min-max)':>16} {'read/needed':>12} "
          f"{'peak RSS +':>11}  bit-for-bit")
    for peer in PEERS:
        rs = results[peer]
        bw = [gb / r["seconds"] for r in rs]
        amp = statistics.median(r["read_per_needed"] for r in rs)
        rss = max(r["rss"] for r in rs) / (1 << 20)
        print(f"{peer:<21} {statistics.median(bw):>12.2f} {min(bw):>7.2f}-{max(bw):<8.2f} "
              f"{amp:>12.2f} {rss:>8.0f} MiB  {'yes' if all(r['ok'] for r in rs) else 'NO'}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None):
    args = parse_args(argv)
    rows = rows_for(args.gib, args.ranks)
    top = args.dir or tempfile.mkdtemp(prefix="dcp_read_bench_")
    path = os.path.join(top, "dcp")
    shutil.rmtree(path, ignore_errors=True)
    try:
        mp.spawn(worker, args=(args.ranks, free_port(), args, path, rows), nprocs=args.ranks)
    finally:
        shutil.rmtree(path, ignore_errors=True)
        if args.dir is None:
            shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
