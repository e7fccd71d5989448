#!/usr/bin/python3
"""coop_gloo_bench: a load over torch.distributed (gloo) with the block
exchange on (cooperative) and off, in CPU seconds, collectives and bytes
through read(), figures that hold on a machine loaded by other work.

    PYTHONPATH=build-test/python /usr/bin/python3 bench/coop_gloo_bench.py --gib 0.25 --reps 3

W processes (gloo, file:// rendezvous) save `--tensors` f32 matrices cut in
row shards (TP=W), then load them, per repetition and in a rotated order,
with every mode of `--modes` (`alone`: cooperative=False; `exchange`:
cooperative=True; `default`: the package's default for a Python comm;
`alone+direct`, `exchange+direct`: the same with direct_io=True) and
every layout of `--ops`: `same` (row shards as saved), `tp_dp` (row halves,
each held by two ranks) and `other_dim` (column shards: every rank needs a
strip of every saved shard). Before each load the page cache is dropped
(root; otherwise POSIX_FADV_DONTNEED on the files) and the destination is
allocated fresh. Every load is checked bit for bit.

Per mode and layout: CPU seconds (user + system, all threads of all ranks,
getrusage) per GiB of state, the system part alone, wall GB/s (barrier to
barrier; noise on a shared machine), bytes through read() per needed byte
(/proc/self/io rchar, all ranks), collectives per load and exchanges
(all_to_all_buffer calls), medians over the repetitions, and the load
average. `--json FILE` keeps every record.
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from peers.measure import drop_page_cache, io_counters


def rusage_cpu():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime, ru.ru_stime, ru.ru_minflt


def counting(comm_class):
    """`comm_class` counting each collective it is asked for."""
    class Counting(comm_class):
        calls: dict = {}

        def _count(self, name):
            self.calls[name] = self.calls.get(name, 0) + 1

        def all_gather(self, data):
            self._count("all_gather")
            return super().all_gather(data)

        def gather(self, data, root):
            self._count("gather")
            return super().gather(data, root)

        def broadcast(self, data, root):
            self._count("broadcast")
            return super().broadcast(data, root)

        def barrier(self):
            self._count("barrier")
            return super().barrier()

        def all_to_all_buffer(self, send, counts):
            self._count("all_to_all_buffer")
            return super().all_to_all_buffer(send, counts)
    return Counting


def layout(op, rank, world, rows, cols):
    """(row range, column range) of the global matrix this rank loads."""
    if op == "same":
        return (rank * rows // world, (rank + 1) * rows // world), (0, cols)
    if op == "tp_dp":
        half = rank % 2
        return (half * rows // 2, (half + 1) * rows // 2), (0, cols)
    if op == "other_dim":
        return (0, rows), (rank * cols // world, (rank + 1) * cols // world)
    raise ValueError(op)


def worker(args, rank, world):
    import numpy as np
    import torch.distributed as dist
    import shardpoint as sp
    dist.init_process_group("gloo", init_method="file://" + args.init, rank=rank,
                            world_size=world)
    comm = counting(sp.TorchDistributedComm)()
    rows = cols = args.side
    rng = np.random.default_rng(38)
    full = [rng.integers(0, 2**31, size=(rows, cols), dtype=np.int64).astype(np.float32)
            for _ in range(args.tensors)]
    r0, r1 = rank * rows // world, (rank + 1) * rows // world
    sd = {f"w{i}": sp.column_parallel(f"w{i}", g[r0:r1].copy(), [rows, cols], rank, world)
          for i, g in enumerate(full)}
    sp.save(sd, args.ckpt, comm)
    del sd
    modes = args.modes.split(";")
    ops = args.ops.split(";")
    records = []
    for rep in range(args.reps):
        order = modes[rep % len(modes):] + modes[:rep % len(modes)]
        for op in ops:
            for mode in order:
                (a, b), (c, d) = layout(op, rank, world, rows, cols)
                comm.barrier()
                drop = drop_page_cache("all", [args.ckpt]) if rank == 0 else None
                dst = {f"w{i}": np.empty((b - a, d - c), dtype=np.float32)
                       for i in range(args.tensors)}
                sd = {k: sp.ShardedTensor(k, v, [rows, cols], [a, c]) for k, v in dst.items()}
                comm.barrier()
                comm.calls.clear()
                u0, s0, f0, c0, t0 = *rusage_cpu(), io_counters()["rchar"], time.monotonic()
                kw = {} if mode == "default" else {"cooperative": mode.startswith("exchange")}
                if mode.endswith("+direct"):
                    kw["direct_io"] = True
                if args.round_mib:
                    kw["cooperative_round_bytes"] = int(args.round_mib * 2**20)
                res = sp.load(sd, args.ckpt, comm, **kw)
                u1, s1, f1, c1 = *rusage_cpu(), io_counters()["rchar"]
                calls = dict(comm.calls)
                comm.barrier()
                wall = time.monotonic() - t0
                ok = all(np.array_equal(dst[f"w{i}"], full[i][a:b, c:d])
                         for i in range(args.tensors))
                records.append(dict(rep=rep, op=op, mode=mode, rank=rank, user=u1 - u0,
                                    sys=s1 - s0, minflt=f1 - f0, rchar=c1 - c0, wall=wall, calls=calls, ok=ok,
                                    needed=sum(v.nbytes for v in dst.values()),
                                    bytes_read=res.bytes_read, drop=drop,
                                    loadavg=os.getloadavg()[0]))
                del sd, dst
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
        json.dump(records, f)
    dist.destroy_process_group()


def report(args, world):
    recs = []
    for r in range(world):
        with open(os.path.join(args.out, f"rank{r}.json")) as f:
            recs += json.load(f)
    gib = args.tensors * args.side * args.side * 4 / 2**30
    bad = [x for x in recs if not x["ok"]]
    print(f"{world} ranks, {args.tensors} f32 [{args.side}, {args.side}] = {gib:.3f} GiB, "
          f"{args.reps} reps, cache drop: {recs[0]['drop'] if recs else '?'}")
    print(f"{'layout':10} {'mode':15} {'CPU s/GiB':>9} {'sys s/GiB':>9} {'GB/s':>6} "
          f"{'rchar/need':>10} {'collectives':>11} {'exchanges':>9} {'loadavg':>7} "
          f"{'faults/GiB':>9}")
    for op in args.ops.split(";"):
        for mode in args.modes.split(";"):
            cpu, sys_, walls, rch, colls, exch, la, flt = [], [], [], [], [], [], [], []
            for rep in range(args.reps):
                rs = [x for x in recs if x["op"] == op and x["mode"] == mode and x["rep"] == rep]
                if not rs:
                    continue
                cpu.append(sum(x["user"] + x["sys"] for x in rs) / gib)
                sys_.append(sum(x["sys"] for x in rs) / gib)
                flt.append(sum(x.get("minflt", 0) for x in rs) * 4096 / 2**30 / gib)
                walls.append(max(x["wall"] for x in rs))
                rch.append(sum(x["rchar"] for x in rs) / sum(x["needed"] for x in rs))
                r0 = [x for x in rs if x["rank"] == 0][0]
                colls.append(sum(r0["calls"].values()))
                exch.append(r0["calls"].get("all_to_all_buffer", 0))
                la.append(r0["loadavg"])
            if not cpu:
                continue
            med = statistics.median
            print(f"{op:10} {mode:15} {med(cpu):9.2f} {med(sys_):9.2f} "
                  f"{gib * 2**30 / 1e9 / med(walls):6.2f} {med(rch):10.2f} {med(colls):11.0f} "
                  f"{med(exch):9.0f} {med(la):7.1f} {med(flt):9.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(recs, f)
    if bad:
        print(f"WRONG VALUES in {len(bad)} loads", file=sys.stderr)
        return 1
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--gib", type=float, default=0.25)
    p.add_argument("--tensors", type=int, default=4)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--modes", default="alone;exchange")
    p.add_argument("--ops", default="same;tp_dp;other_dim")
    p.add_argument("--dir", default=None)
    p.add_argument("--round-mib", type=float, default=0)
    p.add_argument("--json", default=None)
    p.add_argument("--worker", type=int, default=-1, help=argparse.SUPPRESS)
    p.add_argument("--side", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--init", default="", help=argparse.SUPPRESS)
    p.add_argument("--ckpt", default="", help=argparse.SUPPRESS)
    p.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker >= 0:
        worker(args, args.worker, args.ranks)
        return 0
    side = int((args.gib * 2**30 / 4 / args.tensors) ** 0.5) // (4 * args.ranks) * 4 * args.ranks
    base = tempfile.mkdtemp(prefix="coop_gloo_", dir=args.dir)
    try:
        argv = [sys.executable, os.path.abspath(__file__), "--ranks", str(args.ranks),
                "--tensors", str(args.tensors), "--reps", str(args.reps), "--modes", args.modes,
                "--ops", args.ops, "--round-mib", str(args.round_mib), "--side", str(side), "--init", os.path.join(base, "init"),
                "--ckpt", os.path.join(base, "ckpt"), "--out", base]
        procs = [subprocess.Popen(argv + ["--worker", str(r)]) for r in range(args.ranks)]
        rcs = [q.wait() for q in procs]
        if any(rcs):
            print(f"a rank failed: {rcs}", file=sys.stderr)
            return 1
        args.side = side
        args.out = base
        return report(args, args.ranks)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
