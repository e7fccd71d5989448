#!/usr/bin/python3
"""cpu_per_byte: CPU seconds per GiB of a save and of each load, buffered and
O_DIRECT, beside fio on the same directory: figures that hold on a machine
loaded by other work (wall-clock ones do not).

    PYTHONPATH=build-test/python /usr/bin/python3 bench/cpu_per_byte.py --dirs /tmp,/dev/shm --gib 0.25
    # also ext4 on a RAM-backed loop device (root; made and removed here):
    PYTHONPATH=build-test/python /usr/bin/python3 bench/cpu_per_byte.py --dirs /tmp --loop --gib 0.25

W ranks as threads of one process (the C++ thread comms; the GIL is released
while the library runs) save `--tensors` f32 matrices cut in row shards, then
load them in the saved layout and cut along the other dimension (each rank
a column strip of every shard), each load buffered (`direct_io=False`) and
direct (`direct_io=True`), into freshly allocated memory that is touched
first (so page faults of the destination are not counted against a mode),
with the page cache dropped before every operation (root; `--warm` keeps
it, as for a load right after the save). The operations
run `--reps` times in a rotated order. Per operation (medians): CPU seconds
(user + system of the process, every thread) per GiB, the system part,
GB/s (noise on a shared machine), and per needed byte the bytes through
read() (rchar) and read calls per MiB (syscr). fio reads the same bytes with
O_DIRECT (W jobs, 1 MiB requests): its GB/s and CPU s/GiB (usr + sys).
`--saves` adds save variants (O_DIRECT against buffered writes + fsync,
staging buffer sizes, I/O threads per rank), each timed like a load; the
first one named writes the checkpoint that the loads read.
`--json FILE` keeps every record. `--perf PREFIX` records each load with
`perf record -g` (attached for the load only) into PREFIX.<op>.<rep>.data.
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
import threading
import time

import numpy as np

import shardpoint as sp


def counters():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    io = {}
    with open("/proc/self/io") as f:
        for line in f:
            k, v = line.split(":")
            io[k] = int(v)
    return ru.ru_utime, ru.ru_stime, io["rchar"], io["syscr"], time.monotonic()


DROP = True  # --warm: the page cache is kept (a load right after the save)
PERF = None  # --perf: the prefix of the perf.data files of the loads


def drop_caches():
    os.sync()
    if not DROP:
        return False
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def run_ranks(world, fn):
    comms = sp.thread_comms(world)
    errors = []

    def body(r):
        try:
            fn(comms[r], r)
        except BaseException as e:  # noqa: B902 (reported below)
            errors.append(e)
    threads = [threading.Thread(target=body, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def measure(fn, perf_to=None):
    drop_caches()
    perf = None
    if perf_to:
        perf = subprocess.Popen(["perf", "record", "-q", "-g", "-p", str(os.getpid()), "-o",
                                 perf_to], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)  # attached
    u0, s0, c0, n0, t0 = counters()
    fn()
    u1, s1, c1, n1, t1 = counters()
    if perf:
        perf.send_signal(2)
        perf.wait()
    return dict(cpu=u1 - u0 + s1 - s0, sys=s1 - s0, rchar=c1 - c0, syscr=n1 - n0, wall=t1 - t0)


def fio_read(directory, world, gib):
    if not shutil.which("fio"):
        return None
    size = f"{max(1, int(gib * 1024 / world))}M"
    work = tempfile.mkdtemp(prefix="fio_", dir=directory)
    try:
        base = ["fio", "--name=r", f"--directory={work}", f"--numjobs={world}", f"--size={size}",
                "--bs=1M", "--ioengine=psync", "--group_reporting", "--output-format=json"]
        subprocess.run(base + ["--rw=write", "--end_fsync=1"], check=True,
                       stdout=subprocess.DEVNULL)
        drop_caches()
        direct = subprocess.run(base + ["--rw=read", "--direct=1"], capture_output=True,
                                text=True)
        if direct.returncode != 0:  # a filesystem without O_DIRECT
            direct = subprocess.run(base + ["--rw=read"], capture_output=True, text=True,
                                    check=True)
        job = json.loads(direct.stdout)["jobs"][0]
        secs = job["read"]["runtime"] / 1000
        nbytes = job["read"]["io_bytes"]
        cpu = (job["usr_cpu"] + job["sys_cpu"]) / 100 * secs * world
        return dict(gbps=nbytes / secs / 1e9, cpu_per_gib=cpu / (nbytes / 2**30))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def bench_dir(directory, args):
    world, side, tensors = args.ranks, args.side, args.tensors
    rng = np.random.default_rng(38)
    full = [rng.integers(0, 2**24, size=(side, side)).astype(np.float32) for _ in range(tensors)]
    gib = tensors * side * side * 4 / 2**30
    path = tempfile.mkdtemp(prefix="cpb_", dir=directory)
    rows, cols = side // world, side // world
    records = []
    try:
        def save(**kw):
            def rank(comm, r):
                sd = {f"w{i}": sp.column_parallel(f"w{i}", g[r * rows:(r + 1) * rows], [side, side],
                                                  r, world) for i, g in enumerate(full)}
                sp.save(sd, os.path.join(path, "ck"), comm, overwrite=True, **kw)
            run_ranks(world, rank)

        def load(op, direct, rep):
            dst = {}
            for r in range(world):
                shape = (rows, side) if op == "same" else (side, cols)
                dst[r] = [np.ones(shape, dtype=np.float32) for _ in range(tensors)]  # touched

            def rank(comm, r):
                if op == "same":
                    sd = {f"w{i}": sp.column_parallel(f"w{i}", a, [side, side], r, world)
                          for i, a in enumerate(dst[r])}
                else:
                    sd = {f"w{i}": sp.row_parallel(f"w{i}", a, [side, side], r, world)
                          for i, a in enumerate(dst[r])}
                sp.load(sd, os.path.join(path, "ck"), comm, direct_io=direct, **args.load_kw)

            perf_to = f"{PERF}.{op}_{'direct' if direct else 'buffered'}.{rep}.data" if PERF else None
            rec = measure(lambda: run_ranks(world, rank), perf_to)
            for r in range(world):
                for i, a in enumerate(dst[r]):
                    want = (full[i][r * rows:(r + 1) * rows] if op == "same"
                            else full[i][:, r * cols:(r + 1) * cols])
                    if not np.array_equal(a, want):
                        raise AssertionError(f"{op} direct={direct}: wrong values")
            return rec

        saves = [(name, ("save", SAVES[name])) for name in args.saves.split(";") if name]
        loads = [(f"{op}, {'direct' if d else 'buffered'}", (op, d))
                 for op in args.ops.split(";") if op for d in (False, True)]
        for rep in range(args.reps):
            # the default save last: the loads read what it wrote
            saves_now = saves[1:][rep % max(1, len(saves) - 1):] + \
                saves[1:][:rep % max(1, len(saves) - 1)] + saves[:1]
            order = saves_now + loads[rep % len(loads):] + loads[:rep % len(loads)]
            for name, what in order:
                rec = measure(lambda: save(**what[1])) if what[0] == "save" else load(*what, rep)
                rec.update(dir=directory, op=name, rep=rep, gib=gib,
                           loadavg=os.getloadavg()[0])
                records.append(rec)
    finally:
        shutil.rmtree(path, ignore_errors=True)
    fio = fio_read(directory, world, gib) if args.fio else None
    return records, fio, gib


# The save variants of --saves: sp.save keywords.
SAVES = {
    "save": {},
    "save, buffered + fsync": {"direct_io": False},
    "save, 1 MiB staging": {"staging_bytes": 1 << 20},
    "save, 2 MiB staging": {"staging_bytes": 2 << 20},
    "save, 32 MiB staging": {"staging_bytes": 32 << 20},
    "save, io_threads 1": {"io_threads": 1},
    "save, io_threads 2": {"io_threads": 2},
    "save, io_threads 8": {"io_threads": 8},
}


def loop_mount(size_gib):
    """ext4 on a loop device backed by a file in /dev/shm: (mount point, cleanup)."""
    backing = tempfile.mktemp(prefix="cpb_loop_", dir="/dev/shm")
    mnt = tempfile.mkdtemp(prefix="cpb_mnt_")
    subprocess.run(["truncate", "-s", f"{int(size_gib * 1024)}M", backing], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", backing], check=True)
    subprocess.run(["mount", "-o", "loop", backing, mnt], check=True)

    def cleanup():
        subprocess.run(["umount", mnt], check=False)
        os.rmdir(mnt)
        os.unlink(backing)
    return mnt, cleanup


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dirs", default="/tmp", help="comma-separated directories")
    p.add_argument("--loop", action="store_true", help="also ext4 on a RAM-backed loop device")
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--gib", type=float, default=0.25)
    p.add_argument("--tensors", type=int, default=4)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--saves", default="save",
                   help="';'-separated, first the one the loads read: " + "; ".join(SAVES))
    p.add_argument("--ops", default="same;other_dim", help="loads: same;other_dim")
    p.add_argument("--no-fio", dest="fio", action="store_false")
    p.add_argument("--cooperative", choices=("default", "on", "off"), default="default",
                   help="the loads' block exchange (sp.load cooperative=); default: sp.load's")
    p.add_argument("--warm", action="store_true",
                   help="keep the page cache (loads right after the save) instead of dropping it")
    p.add_argument("--no-verify", dest="verify", action="store_false",
                   help="loads with verify_checksums=False (what hashing costs)")
    p.add_argument("--json", default=None)
    p.add_argument("--perf", default=None, help="record each load with perf into PREFIX.*.data")
    args = p.parse_args()
    global DROP, PERF
    PERF = args.perf
    args.load_kw = {} if args.cooperative == "default" else {"cooperative": args.cooperative == "on"}
    if not args.verify:
        args.load_kw["verify_checksums"] = False
    DROP = not args.warm
    args.side = int((args.gib * 2**30 / 4 / args.tensors) ** 0.5) // (4 * args.ranks) * 4 * args.ranks
    dirs = [d for d in args.dirs.split(",") if d]
    cleanup = None
    if args.loop:
        mnt, cleanup = loop_mount(3 * args.gib + 0.25)
        dirs.append(mnt)
    all_records = []
    try:
        print(f"{args.ranks} thread ranks, {args.tensors} f32 [{args.side}, {args.side}], "
              f"{args.reps} reps; cache dropped: {drop_caches()}")
        print(f"{'dir':22} {'operation':22} {'CPU s/GiB':>9} {'sys s/GiB':>9} {'GB/s':>6} "
              f"{'rchar/need':>10} {'reads/MiB':>9} {'loadavg':>7}")
        for d in dirs:
            recs, fio, gib = bench_dir(d, args)
            all_records += recs
            label = "loop ext4 (RAM)" if cleanup and d == dirs[-1] else d
            for name in dict.fromkeys(r["op"] for r in recs):
                rs = [r for r in recs if r["op"] == name]
                med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
                need = gib * 2**30
                print(f"{label:22} {name:22} {med('cpu') / gib:9.2f} {med('sys') / gib:9.2f} "
                      f"{need / 1e9 / med('wall'):6.2f} {med('rchar') / need:10.2f} "
                      f"{med('syscr') / (need / 2**20):9.2f} {med('loadavg'):7.1f}")
            if fio:
                print(f"{label:22} {'fio read (O_DIRECT)':22} {fio['cpu_per_gib']:9.2f} "
                      f"{'':>9} {fio['gbps']:6.2f}")
    finally:
        if cleanup:
            cleanup()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(all_records, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
