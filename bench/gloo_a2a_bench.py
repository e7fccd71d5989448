#!/usr/bin/python3
"""gloo_a2a_bench: what torch.distributed's gloo all_to_all_single moves on this
machine, alone: the ceiling of a cooperative load's block exchange over
TorchDistributedComm.

    /usr/bin/python3 bench/gloo_a2a_bench.py --ranks 4 --mib 1,4

W processes (gloo, file:// rendezvous) exchange preallocated uint8 tensors
(`--mib` MiB to each peer; the same tensors every time, so no page is fresh)
`--iters` times per size, twice (the first pass warms the connections). Rank 0
reports per size: milliseconds per exchange, MB/s each rank sends to its
peers, and its process's CPU seconds (user + system, every thread) per GiB
moved by all ranks, with the load average.
"""

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time


def worker(args):
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="file://" + args.init, rank=args.worker,
                            world_size=args.ranks)
    for mib in [float(x) for x in args.mib.split(",")]:
        per = int(mib * 2**20)
        send = torch.zeros(per * args.ranks, dtype=torch.uint8)
        recv = torch.empty(per * args.ranks, dtype=torch.uint8)
        splits = [per] * args.ranks
        dist.barrier()
        for _ in range(2):
            ru0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
            for _ in range(args.iters):
                dist.all_to_all_single(recv, send, splits, splits)
            dt = time.monotonic() - t0
            ru1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime
        moved = per * (args.ranks - 1) * args.iters * args.ranks
        if args.worker == 0:
            print(f"{mib:6g} MiB per peer: {dt / args.iters * 1e3:7.1f} ms/exchange, "
                  f"{per * (args.ranks - 1) * args.iters / dt / 1e6:6.0f} MB/s sent per rank, "
                  f"rank 0 CPU {cpu / (moved / 2**30):5.2f} s/GiB moved, "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--mib", default="1,4")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--worker", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--init", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker >= 0:
        worker(args)
        return 0
    base = tempfile.mkdtemp(prefix="gloo_a2a_")
    try:
        argv = [sys.executable, os.path.abspath(__file__), "--ranks", str(args.ranks), "--mib",
                args.mib, "--iters", str(args.iters), "--init", os.path.join(base, "init")]
        procs = [subprocess.Popen(argv + ["--worker", str(r)]) for r in range(args.ranks)]
        return 1 if any(q.wait() for q in procs) else 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
