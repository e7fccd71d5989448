#!/usr/bin/python3
"""peers_bench: shardpoint beside per-rank torch.save, numpy .npy per rank,
PyTorch DCP (torch 1.13), fio O_DIRECT and memcpy, on the same sharded state
held by the same number of processes.

    # quick: 0.25 GiB, 3 reps
    PYTHONPATH=build-rel/python /usr/bin/python3 bench/peers_bench.py
    PYTHONPATH=build-rel/python /usr/bin/python3 bench/peers_bench.py --gib 4 --reps 5

W ranks (processes, torch.distributed gloo; shardpoint over TorchDistributedComm)
hold a transformer-like model's bf16 weights and fp32 main params + Adam moments
TP=W (bench/peers/state.py). Per repetition, for every peer in an order rotated
each repetition: save; then load into the same layout; then resharded to
TP=W/2 x DP=2; then with every matrix cut along its other dimension. Before each operation the page
cache is dropped (`--drop all`: sync + /proc/sys/vm/drop_caches, needs root;
`files`: POSIX_FADV_DONTNEED on the benchmark's files). Every load of the first
repetition is checked bit for bit (`--verify-all`: every repetition).

Reported per peer and operation: GB/s (global state bytes / seconds from a
barrier before to a barrier after, on rank 0) as median and min-max over the
repetitions; bytes read per needed byte (the ranks' /proc/self/io read_bytes,
i.e. from storage, and rchar, i.e. through read syscalls on files; gloo's
socket traffic is not in it, measured: cooperative loads show 0.5), over the bytes the ranks' templates hold); the largest peak RSS
growth of a rank during the operation. fio writes and reads the same byte count
with O_DIRECT (W jobs, 4 MiB requests, or 1 MiB where a job's share is not a
multiple of 4 MiB, libaio depth 4, writes ending with fsync): its row is fio's
own bandwidth, which leaves out its start and file layout; the row "fio,
barrier to barrier" times the same runs as every other row;
memcpy copies each rank's state into a buffer and back; shardpoint's loads
also give each rank's seconds in the engine (LoadResult.seconds) against its
whole call (with CUDA, + host staging and copies). `--json FILE` keeps
every measurement. Exits non-zero if any peer fails or loads wrong values.

Memory backing (`--preback`): on a VM with free page reporting (this
project's Firecracker machines), memory that has been free for a second or
more is handed back to the host, and the guest pays ~3 s of system CPU per
GiB to use it again (bench/free_page_probe.py measures it). Whichever
operation happens to run after memory sat free pays that for its page cache
and buffers; the others do not. So before each operation, after the cache
drop, every rank touches and frees its share of `--preback` GiB (default:
twice the state), and the operation finds backed pages, as on a bare-metal
machine. `--preback 0` turns it off. Each record keeps the ranks' user and
system CPU seconds; the report gives the system CPU of all ranks per GiB.

Order (`--order`): `interleaved` (the default) is the above, in one set of
processes. `restart` measures what a job meets when it restarts: per
repetition one set of processes saves with every peer, then each load of
each peer runs in a fresh set of processes, after a cache drop, with
nothing pre-touched (so a load pays for the memory the VM took back, as a
restarted job on a cloud VM does). `both` runs the two and reports them apart.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_PEERS = ["shardpoint", "torch.save", "numpy .npy", "PyTorch DCP", "fio", "memcpy"]
CUDA_PEERS = [p for p in DEFAULT_PEERS if p != "numpy .npy"]
VARIANTS = ["shardpoint, cooperative on", "shardpoint, 16 MiB reads",
            "shardpoint, no prefetch hints", "shardpoint, io_threads 1",
            "shardpoint, one stream", "shardpoint, no verify", "shardpoint, buffered",
            "shardpoint, direct reads", "shardpoint, direct + cooperative",
            "shardpoint, exchange 16 MiB rounds", "shardpoint, no exchange",
            "shardpoint, buffered, no exchange", "shardpoint, 1 MiB staging",
            "shardpoint, 2 MiB staging", "shardpoint, 8 MiB staging",
            "shardpoint, buffered save"]  # on request only
CUDA_VARIANTS = ["shardpoint, pinned loads", "shardpoint, one group",
                 "shardpoint, fresh staging pages"]  # --device cuda only
ALL_PEERS = DEFAULT_PEERS + VARIANTS + CUDA_VARIANTS
CUDA_ALL_PEERS = CUDA_PEERS + VARIANTS + CUDA_VARIANTS
OPS = ["save", "same", "tp_dp", "other_dim"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gib", type=float, default=0.25,
                   help="global state size in GiB (rounded up)")
    p.add_argument("--reps", type=int, default=3, help="repetitions (interleaved)")
    p.add_argument("--ranks", type=int, default=4, help="processes = TP size")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--dir", default=None, help="where checkpoints go (default: a temp dir in /tmp)")
    p.add_argument("--peers", default=None,
                   help="';'-separated, of: " + "; ".join(ALL_PEERS) + " (default: "
                   + "; ".join(DEFAULT_PEERS) + "; with --device cuda: "
                   + "; ".join(CUDA_PEERS) + ")")
    p.add_argument("--drop", choices=["all", "files", "none"], default="all",
                   help="page cache before each operation: drop all (root), evict files, keep")
    p.add_argument("--preback", type=float, default=None,
                   help="GiB that the ranks touch and free before each operation, so that it "
                   "finds memory the VM host has not taken back (default: twice the state; "
                   "0: off)")
    p.add_argument("--verify-all", action="store_true",
                   help="check every load, not the first rep's")
    p.add_argument("--ops", default=";".join(OPS),
                   help="the operations, ';'-separated, save first (default: "
                   + ";".join(OPS) + "; e.g. 'save' alone for more save reps in the time)")
    p.add_argument("--json", help="write every measurement here")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="where the state lives: cuda runs the GPU peers (bench/peers/cuda.py: "
                   "torch 2.x DCP with DTensors, torch.save of CUDA tensors; numpy left out; "
                   "memcpy is a device <-> pinned host copy)")
    p.add_argument("--order", choices=["interleaved", "restart", "both"], default="interleaved",
                   help="interleaved (default): one set of processes saves with every peer, "
                   "then loads each layout with every peer, memory pre-touched (--preback); "
                   "restart: as a job restarts: the saves in one set of processes, then each "
                   "load of each peer in a fresh set, after a cache drop, nothing pre-touched; "
                   "both: the two, reported apart")
    p.add_argument("--keep", action="store_true", help="keep the checkpoints")
    p.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    p.add_argument("--init", help=argparse.SUPPRESS)
    # a restart-order worker: "save" (rep --rep-index) or "load" (--only-peer, --only-op)
    p.add_argument("--phase", choices=["all", "save", "load"], default="all",
                   help=argparse.SUPPRESS)
    p.add_argument("--rep-index", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--only-peer", help=argparse.SUPPRESS)
    p.add_argument("--only-op", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.peers is None:
        args.peers = ";".join(CUDA_PEERS if args.device == "cuda" else DEFAULT_PEERS)
    args.peers = [x.strip() for x in args.peers.split(";") if x.strip()]
    for x in args.peers:
        if x not in ALL_PEERS:
            p.error(f"unknown peer {x!r}")
        if args.device == "cpu" and x in CUDA_VARIANTS:
            p.error(f"peer {x!r} runs with --device cuda only")
        if args.device == "cuda" and x not in CUDA_ALL_PEERS:
            p.error(f"peer {x!r} has no CUDA version (--device cuda runs: "
                    + "; ".join(CUDA_ALL_PEERS) + ")")
    args.ops = [x.strip() for x in args.ops.split(";") if x.strip()]
    for x in args.ops:
        if x not in OPS:
            p.error(f"unknown operation {x!r} (--ops takes: {';'.join(OPS)})")
    if "save" not in args.ops:
        p.error("--ops needs save: every load reads what the repetition saved")
    if args.preback is not None and args.preback < 0:
        p.error(f"--preback wants GiB >= 0, got {args.preback:g}")
    return args


# --------------------------------------------------------------------------
# Worker: one rank.

def slug(peer):
    """The peer's directory name: letters, digits and single underscores."""
    return re.sub(r"[^A-Za-z0-9]+", "_", peer)


def worker(args):
    sys.path.insert(0, HERE)
    sys.path.insert(0, os.path.join(REPO, "python", "tests"))
    cuda = args.device == "cuda"
    if not cuda:
        from dcp_compat import import_dcp
        dcp = import_dcp()  # before torch.distributed._shard: patches its import on Python 3.11
    import torch
    import torch.distributed as dist
    import shardpoint as sp
    from peers import measure as M
    from peers import state as S

    rank, world = args.worker, args.ranks
    dist.init_process_group("gloo", init_method=f"file://{args.init}", rank=rank,
                            world_size=world)
    comm = sp.TorchDistributedComm()
    hidden, specs = S.scale_model(int(args.gib * 2**30), world, args.layers)
    if cuda:
        from peers.cuda import CudaRank, cuda_peers, host_copy, make_cuda_tensors
        ctx, PEERS, make_tensors = CudaRank(rank, world, specs, comm), cuda_peers(), \
            make_cuda_tensors
        sync = torch.cuda.synchronize
    else:
        from peers.formats import PEERS, Rank, make_tensors
        ctx, sync = Rank(rank, world, specs, comm, dcp), (lambda: None)
    total = sum(s.nbytes() for s in specs)
    local = sum(s.nbytes() // (world if s.dims["same"] is not None else 1) for s in specs)
    records, drop_kind = [], None
    preback = int((2 * total / 2**30 if args.preback is None else args.preback) * 2**30)
    if args.phase != "all":  # restart order: nothing pre-touched
        preback = 0

    def timed(peer, op, rep, fn, needed):
        nonlocal drop_kind
        dist.barrier()
        if rank == 0 and args.drop != "none":
            drop_kind = M.drop_page_cache(args.drop, [args.dir])
        dist.barrier()
        if preback > 0:  # this rank's share; the operation reuses these pages (--preback)
            M.touch_pages(preback // world)
        io0, rss0 = M.io_counters(), M.rss_bytes()
        M.reset_peak_rss()
        dist.barrier()
        cpu0, t0 = os.times(), time.perf_counter()
        extra = fn()
        sync()  # CUDA: the copies the operation queued are done
        dist.barrier()
        seconds = time.perf_counter() - t0
        cpu1, io1 = os.times(), M.io_counters()
        mine = {k: io1[k] - io0[k] for k in ("rchar", "read_bytes", "wchar", "write_bytes")}
        mine["user_seconds"] = cpu1.user - cpu0.user
        mine["system_seconds"] = cpu1.system - cpu0.system
        mine["peak_rss_growth"] = M.peak_rss_bytes() - rss0
        mine["needed"] = needed
        if extra and "rank" in extra:  # this rank's own figures (not rank 0's alone)
            mine.update(extra.pop("rank"))
        per_rank = [None] * world
        dist.all_gather_object(per_rank, mine)
        if rank == 0:
            rec = {"peer": peer, "op": op, "rep": rep, "seconds": seconds, "ranks": per_rank,
                   "loadavg": os.getloadavg()[0]}
            if extra:
                rec.update(extra)
            records.append(rec)
            print(f"peers_bench: rep {rep} {peer} {op}: {seconds:.2f} s", file=sys.stderr,
                  flush=True)

    def fresh_dir(path, create):
        if rank == 0:
            shutil.rmtree(path, ignore_errors=True)
            if create:
                os.makedirs(path)
            M.fsync_path(os.path.dirname(path))
        dist.barrier()

    # fio: each of W jobs writes/reads 1/W of the state (whole MiB, at least one)
    fio_size = max(1, (total // world) >> 20) << 20
    fio_bs = "4M" if fio_size % (4 << 20) == 0 else "1M"

    def run_fio(rw):
        if rank != 0:
            return None
        d = os.path.join(args.dir, "fio")
        if rw == "write":
            # Fresh files, as every peer's save writes: overwriting the last
            # rep's files (allocated blocks) ran 1.2-1.35x faster on this disk.
            shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d, exist_ok=True)
        cmd = ["fio", "--name=peers", f"--directory={d}", f"--rw={rw}", f"--bs={fio_bs}",
               "--direct=1", "--ioengine=libaio", "--iodepth=4", f"--numjobs={world}",
               f"--size={fio_size}",
               "--group_reporting", "--output-format=json"]
        if rw == "write":
            cmd.append("--end_fsync=1")
        t0 = time.perf_counter()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        wall = time.perf_counter() - t0
        job = json.loads(out[out.index("{"):])["jobs"][0][rw]
        return {"fio_bytes": job["io_bytes"], "fio_gbps": job["bw_bytes"] / 1e9, "fio_wall": wall}

    buf = None

    def memcpy(to_buffer):
        if cuda:
            return host_copy(ctx, buf, to_buffer)
        off = 0
        for t in ctx.state.values():
            b = t.view(-1).view(torch.uint8)
            if to_buffer:
                buf[off:off + b.numel()].copy_(b)
            else:
                b.copy_(buf[off:off + b.numel()])
            off += b.numel()

    peers = [p for p in args.peers if p != "fio" or shutil.which("fio")]
    ops = [op for op in OPS if op in args.ops and (op != "tp_dp" or world % 2 == 0)]

    def info(reps):
        return {"hidden": hidden, "layers": args.layers, "tensors": len(specs),
                "state_bytes": total, "ranks": world, "reps": reps,
                "cache": drop_kind or "kept", "fio_bytes_per_job": fio_size,
                "preback_bytes": preback, "device": _device_name(torch, cuda),
                "torch": torch.__version__}

    def restart_phase():
        """One process set of the restart order: every peer's save of one
        repetition, or one peer's load of one layout."""
        rep = args.rep_index
        if args.phase == "save":
            ctx.make_state()
            for s in specs:
                ctx.fill(s, ctx.state[s.key])
            k = rep % len(peers)
            for peer in peers[k:] + peers[:k]:
                path = os.path.join(args.dir, slug(peer))
                if peer == "fio":
                    fresh_dir(path, True)
                    timed(peer, "save", rep, lambda: run_fio("write"), 0)
                elif peer != "memcpy":
                    impl = PEERS[peer]
                    fresh_dir(path, not peer.startswith("shardpoint"))
                    timed(peer, "save", rep, lambda: impl.save(ctx, path), 0)
            return
        peer, op = args.only_peer, args.only_op
        path = os.path.join(args.dir, slug(peer))
        if peer == "fio":
            timed(peer, op, rep, lambda: run_fio("read"), local)
            return
        impl = PEERS[peer]
        tensors, dcp_values = make_tensors(ctx, op)
        needed = sum(t.numel() * t.element_size() for t in tensors.values())
        timed(peer, op, rep, lambda: impl.load(ctx, path, op, tensors, dcp_values), needed)
        if rep == 0 or args.verify_all:
            for s in specs:
                ctx.check(s, op, tensors[s.key])

    if args.phase != "all":
        restart_phase()
        if rank == 0:
            for r in records:
                r["order"] = "restart"
            with open(args.out, "w") as f:
                json.dump({"info": info(args.rep_index + 1), "records": records}, f)
        dist.barrier()
        dist.destroy_process_group()
        return
    for rep in range(args.reps):
        k = rep % len(peers)
        order = peers[k:] + peers[:k]
        ctx.make_state()  # filled anew each repetition, dropped after the saves (memory)
        for s in specs:
            ctx.fill(s, ctx.state[s.key])
        for op in ops:
            if op != "save":
                ctx.state = ctx.sharded_state = None
            for peer in order:
                path = os.path.join(args.dir, slug(peer))
                if peer == "fio":
                    if op == "save":
                        fresh_dir(path, True)
                    if op in ("save", "same"):
                        timed(peer, op, rep, lambda: run_fio("write" if op == "save" else "read"),
                              0 if op == "save" else local)
                    continue
                if peer == "memcpy":
                    if op == "save":  # both directions now: the state is gone during loads
                        buf = torch.zeros(local, dtype=torch.uint8, pin_memory=cuda)
                        timed(peer, "save", rep, lambda: memcpy(True), local)
                        timed(peer, "same", rep, lambda: memcpy(False), local)
                        buf = None
                    continue
                impl = PEERS[peer]
                if op == "save":
                    fresh_dir(path, not peer.startswith("shardpoint"))
                    timed(peer, op, rep, lambda: impl.save(ctx, path), 0)
                    continue
                layout = op
                tensors, dcp_values = make_tensors(ctx, layout)
                needed = sum(t.numel() * t.element_size() for t in tensors.values())
                timed(peer, op, rep, lambda: impl.load(ctx, path, layout, tensors, dcp_values),
                      needed)
                if rep == 0 or args.verify_all:
                    for s in specs:
                        ctx.check(s, layout, tensors[s.key])
                tensors = dcp_values = None
        if rank == 0:  # after every repetition: a run cut short still has figures
            for r in records:
                r["order"] = "interleaved"
            with open(os.path.join(args.dir, "results.json.tmp"), "w") as f:
                json.dump({"info": info(rep + 1), "records": records}, f)
            os.replace(os.path.join(args.dir, "results.json.tmp"),
                       os.path.join(args.dir, "results.json"))
    dist.barrier()
    dist.destroy_process_group()


# --------------------------------------------------------------------------
# Parent: launch the ranks, report.

def launch(args):
    own_dir = args.dir is None
    args.dir = os.path.abspath(args.dir or tempfile.mkdtemp(prefix="shardpoint_peers_"))
    os.makedirs(args.dir, exist_ok=True)
    init = os.path.join(args.dir, "init")
    if os.path.exists(init):
        os.remove(init)
    base = [sys.executable, os.path.abspath(__file__), "--gib", str(args.gib), "--reps",
            str(args.reps), "--ranks", str(args.ranks), "--layers", str(args.layers), "--dir",
            args.dir, "--peers", ";".join(args.peers), "--ops", ";".join(args.ops), "--drop",
            args.drop, "--init", init,
            "--device", args.device]
    if args.preback is not None:
        base += ["--preback", str(args.preback)]
    if args.verify_all:
        base.append("--verify-all")
    results = None
    if args.order in ("interleaved", "both"):
        run_ranks(args, base)
        with open(os.path.join(args.dir, "results.json")) as f:
            results = json.load(f)
    if args.order in ("restart", "both"):
        restart = restart_order(args, base, init)
        if results is None:
            results = restart
        else:
            results["records"] += restart["records"]
            results["info"]["restart_info"] = restart["info"]
    results["info"].update(command=" ".join(sys.argv), commit=_commit(), date=time.ctime())
    print(report_orders(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if not args.keep:
        for name in os.listdir(args.dir):
            p = os.path.join(args.dir, name)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
        if own_dir:
            os.rmdir(args.dir)


def run_ranks(args, cmd):
    """Runs the W workers of `cmd`; exits if one fails (killing the others, which
    would wait for it forever)."""
    procs = [subprocess.Popen(cmd + ["--worker", str(r)], env=dict(
        os.environ, OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")) for r in range(args.ranks)]
    failed = False
    while procs and not failed:
        for p in list(procs):
            rc = p.poll()
            if rc is not None:
                procs.remove(p)
                failed = failed or rc != 0
        time.sleep(0.2)
    for p in procs:
        p.kill()
        p.wait()
    if failed:
        sys.exit("peers_bench: a rank failed (see its error above)")


def restart_order(args, base, init):
    """The order of a job's restart: per repetition, one set of processes saves
    with every peer; then every load of every peer (order rotated per
    repetition) runs in a fresh set of processes, after a cache drop, with
    nothing pre-touched. Returns {"info", "records"}."""
    records, info = [], None
    peers = [p for p in args.peers if p != "memcpy" and (p != "fio" or shutil.which("fio"))]
    loads = [op for op in OPS if op != "save" and op in args.ops
             and (op != "tp_dp" or args.ranks % 2 == 0)]

    def phase(extra):
        if os.path.exists(init):
            os.remove(init)
        out = os.path.join(args.dir, "restart.json")
        run_ranks(args, base + ["--out", out] + extra)
        with open(out) as f:
            got = json.load(f)
        records.extend(got["records"])
        return got["info"]

    for rep in range(args.reps):
        info = phase(["--phase", "save", "--rep-index", str(rep)])
        k = rep % len(peers)
        for op in loads:
            for peer in peers[k:] + peers[:k]:
                if peer == "fio" and op != "same":
                    continue
                phase(["--phase", "load", "--rep-index", str(rep), "--only-peer", peer,
                       "--only-op", "same" if peer == "fio" else op])
    info["reps"] = args.reps
    return {"info": info, "records": records}


def report_orders(results):
    """One report per order present (records without "order" are interleaved)."""
    by_order = {}
    for r in results["records"]:
        by_order.setdefault(r.get("order", "interleaved"), []).append(r)
    if len(by_order) == 1:
        return report(results)
    heads = {"interleaved": "Order: interleaved (one set of processes saves with every peer, "
             "then loads; memory pre-touched before each operation)",
             "restart": "Order: restart (saves in one set of processes; each load of each "
             "peer in a fresh set after a cache drop; nothing pre-touched)"}
    parts = []
    for order in ("interleaved", "restart"):
        info = dict(results["info"])
        if order == "restart" and "restart_info" in info:
            info.update(results["info"]["restart_info"])
        parts.append(heads[order] + "\n\n" + report({"info": info, "records": by_order[order]}))
    return "\n\n".join(parts)


def _device_name(torch, cuda):
    if not cuda:
        return "cpu"
    p = torch.cuda.get_device_properties(0)
    return f"cuda ({p.name}, {p.total_memory / 2**30:.0f} GiB; {torch.cuda.device_count()} " \
        f"device(s) shared by the ranks)"


def _commit():
    try:
        return subprocess.run(["git", "-C", REPO, "log", "-1", "--format=%h %s"],
                              capture_output=True, text=True, check=True).stdout.strip()[:72]
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _gbps(info, rec):
    if "fio_gbps" in rec:
        return rec["fio_gbps"]
    return info["state_bytes"] / rec["seconds"] / 1e9


def _ratio(recs, field):
    vals = [sum(r[field] for r in rec["ranks"]) / max(1, sum(r["needed"] for r in rec["ranks"]))
            for rec in recs]
    return statistics.median(vals)


OP_NAMES = {"save": "save", "same": "load, same layout", "tp_dp": "load, TP=W/2 x DP=2",
            "other_dim": "load, other dim"}


def report(results):
    info, records = results["info"], results["records"]
    peers = list(dict.fromkeys(r["peer"] for r in records))
    ops = [op for op in OPS if any(r["op"] == op for r in records)]
    names = [OP_NAMES[op].replace("W/2", str(info["ranks"] // 2)) for op in ops]
    by = {}
    for r in records:
        by.setdefault((r["peer"], r["op"]), []).append(r)
    gib = info["state_bytes"] / 2**30
    lines = [f"{info['ranks']} ranks, TP={info['ranks']}: {gib:.2f} GiB "
             f"({info['state_bytes']:,} B) of bf16 weights + fp32 main params and Adam "
             f"moments, hidden {info['hidden']}, {info['layers']} layers, "
             f"{info['tensors']} tensors; {info['reps']} {records[0].get('order', 'interleaved')} reps; "
             f"page cache before each op: {info['cache']}; memory touched and freed "
             f"before each op: {info.get('preback_bytes', 0) / 2**30:.2f} GiB; state on "
             f"{info.get('device', 'cpu')}, torch {info.get('torch', '?')}",
             f"commit {info.get('commit', '?')}; {info.get('date', '')}", "",
             "| GB/s, median (min–max) | " + " | ".join(names) + " |",
             "|---" * (len(ops) + 1) + "|"]
    def row(label, gbps, p):
        cells = []
        for op in ops:
            v = [gbps(r) for r in by.get((p, op), [])]
            cells.append(f"{statistics.median(v):.2f} ({min(v):.2f}–{max(v):.2f})" if v else "")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    for p in peers:
        row(p, lambda r: _gbps(info, r), p)
        if p == "fio":  # timed like every other row: its start, layout and fsync included
            row("fio, barrier to barrier", lambda r: r["fio_bytes"] / r["seconds"] / 1e9, p)
    med = {k: statistics.median(_gbps(info, r) for r in v) for k, v in by.items()}
    ratios = []
    for op, name in zip(ops, names):
        if ("shardpoint", op) not in med:
            continue
        sp = med[("shardpoint", op)]
        others = [(med[(p, op)], p) for p in peers
                  if not p.startswith("shardpoint") and p not in ("fio", "memcpy")
                  and (p, op) in med]
        parts = []
        if others:
            best, who = max(others)
            parts.append(f"{sp / best:.2f}x the best peer ({who})")
        fio_op = "save" if op == "save" else "same"
        if ("fio", fio_op) in med:
            io = "write" if op == "save" else "read"
            parts.append(f"{sp / med[('fio', fio_op)]:.2f}x fio {io}")
        if parts:
            ratios.append(f"{name}: " + ", ".join(parts))
    if ratios:
        lines += ["", "shardpoint, ratios of medians: " + "; ".join(ratios) + "."]
    lines += cpu_table(by, peers, ops, names, gib)
    loads = [op for op in ops if op != "save"]
    lines += ["", "| read_bytes / rchar per needed byte; peak RSS growth of a rank; system "
              "CPU seconds of all ranks (per GiB of state) | "
              + " | ".join(names[1:] + ["save"]) + " |", "|---" * (len(ops) + 1) + "|"]
    for p in peers:
        if p == "fio":
            continue
        cells = []
        for op in loads + ["save"]:
            recs = by.get((p, op))
            if not recs:
                cells.append("")
                continue
            rss = statistics.median(max(x["peak_rss_growth"] for x in r["ranks"]) for r in recs)
            rss_s = f"{rss / 2**20:.0f} MiB"
            if all("system_seconds" in x for r in recs for x in r["ranks"]):
                sys_s = statistics.median(sum(x["system_seconds"] for x in r["ranks"])
                                          for r in recs)
                rss_s += f"; {sys_s:.1f} s ({sys_s / gib:.1f} s/GiB)"
            if op == "save" or p == "memcpy":
                cells.append(rss_s)
            else:
                cells.append(f"{_ratio(recs, 'read_bytes'):.2f} / {_ratio(recs, 'rchar'):.2f}; "
                             f"{rss_s}")
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    if info["reps"] > 1:
        lines += first_reps(by, peers, ops, names)
    lines += engine_split(by, peers, ops, names)
    return "\n".join(lines)


def cpu_table(by, peers, ops, names, gib):
    """CPU seconds (user + system) of all ranks per GiB of state, median
    (min-max): on a loaded machine a steadier figure than the wall clock."""
    lines = ["", "| CPU s (user + system, all ranks) per GiB, median (min–max) | "
             + " | ".join(names) + " |", "|---" * (len(ops) + 1) + "|"]
    for p in peers:
        cells = []
        for op in ops:
            recs = by.get((p, op), [])
            if not recs or not all("user_seconds" in x for r in recs for x in r["ranks"]):
                cells.append("")
                continue
            v = [sum(x["user_seconds"] + x["system_seconds"] for x in r["ranks"]) / gib
                 for r in recs]
            cells.append(f"{statistics.median(v):.2f} ({min(v):.2f}–{max(v):.2f})")
        if any(cells):
            lines.append(f"| {p} | " + " | ".join(cells) + " |")
    loads = [r["loadavg"] for v in by.values() for r in v if "loadavg" in r]
    if loads:
        lines.append(f"\nLoad average (1 min) at the operations: median {statistics.median(loads):.1f}"
                     f" ({min(loads):.1f}–{max(loads):.1f}).")
    return lines


def engine_split(by, peers, ops, names):
    """Where shardpoint's load calls spend their time, on the rank whose call took
    longest (median over reps): the engine (plan, reads, verification, placing)
    against the whole call (with CUDA, + host staging and the copies to the device)."""
    loads = [(op, n) for op, n in zip(ops, names) if op != "save"]
    rows = []
    for p in peers:
        cells = []
        for op, _ in loads:
            recs = [r for r in by.get((p, op), []) if "engine_seconds" in r["ranks"][0]]
            if not recs:
                cells.append("")
                continue
            slowest = [max(r["ranks"], key=lambda x: x["call_seconds"]) for r in recs]
            cells.append(f"{statistics.median(x['engine_seconds'] for x in slowest):.2f} / "
                         f"{statistics.median(x['call_seconds'] for x in slowest):.2f}")
        if any(cells):
            rows.append(f"| {p} | " + " | ".join(cells) + " |")
    if not rows:
        return []
    return ["", "| seconds in the engine / in the whole load call, slowest rank | "
            + " | ".join(n for _, n in loads) + " |", "|---" * (len(loads) + 1) + "|"] + rows


def first_reps(by, peers, ops, names):
    """Seconds of each peer's first repetition of an operation against the median of
    its later ones: a process's first save or load of a layout pays what later ones
    reuse (pinned staging, pools, plans), as a job's one resume does."""
    lines = ["", "| seconds, first rep / median of the later ones | " + " | ".join(names)
             + " |", "|---" * (len(ops) + 1) + "|"]
    for p in peers:
        if p == "fio":
            continue
        cells = []
        for op in ops:
            recs = sorted(by.get((p, op), []), key=lambda r: r["rep"])
            later = [r["seconds"] for r in recs[1:]]
            cells.append(f"{recs[0]['seconds']:.2f} / {statistics.median(later):.2f}"
                         if later else "")
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return lines


def main():
    args = parse_args()
    if args.worker is not None:
        worker(args)
    else:
        launch(args)


if __name__ == "__main__":
    main()
