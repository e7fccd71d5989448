"""Client CPU of shardpoint saves to S3, two builds side by side in one run.

    /usr/bin/python3 bench/s3_save_cpu.py --server-dir DIR \
        [--build old=/work/main/build-test/python] [--build new=build-test/python] \
        [--build alone=build-test/python,SHARDPOINT_MD5_LANES=0] \
        [--mib 128] [--ranks 4] [--reps 5] [--out bench/results/x.txt]

DIR is a running tests/s3/radosgw.sh server. Each build is imported in its own
child process (PYTHONPATH); the children take turns, rep by rep (old, new,
old, new, ...), so both see the same machine load. A child makes --ranks
shards of random float32 (seeded), saves them once unmeasured (first-touch
pages, the allocator's first large blocks, the connection pool), then saves
once measured: its own CPU seconds (user + sys, getrusage) over the save
alone, per GiB, and the save's wall-clock rate. A build may carry environment
variables after its path (NAME=PATH,VAR=VALUE,...): the same build under
another setting. The saved checkpoint is loaded back and compared bit for bit.
Prints each rep and the medians. The gateway's CPU is not counted.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import concurrent.futures as cf, json, os, resource, sys, time, uuid
import numpy as np
import shardpoint as sp
env = json.loads(sys.argv[1]); mib = int(sys.argv[2]); ranks = int(sys.argv[3])
opts = {"endpoint_url": env["AWS_ENDPOINT_URL"], "region_name": env["AWS_REGION"],
        "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"]}
cols = 3 * 4 * 1024
rows = max(ranks, (mib << 20) // (cols * 4) // ranks * ranks)
g = np.random.default_rng(39).standard_normal((rows, cols)).astype(np.float32)
shards = [s.copy() for s in np.split(g, ranks)]
bucket = env.get("SHARDPOINT_S3_BUCKET", "shardpoint")
def run(path):
    comms = sp.thread_comms(ranks)
    def save(rank, comm):
        sp.save({"w": sp.column_parallel("w", shards[rank], g.shape, rank, ranks)}, path, comm,
                storage_options=opts)
    with cf.ThreadPoolExecutor(ranks) as ex:
        list(ex.map(save, range(ranks), comms))
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
run(f"s3://{bucket}/savecpu/{uuid.uuid4().hex[:8]}")
path = f"s3://{bucket}/savecpu/{uuid.uuid4().hex[:8]}"
c0 = cpu()
t0 = time.perf_counter()
run(path)
wall = time.perf_counter() - t0
c = cpu() - c0
outs = [np.empty_like(s) for s in shards]
comms = sp.thread_comms(ranks)
def load(rank, comm):
    sp.load({"w": sp.column_parallel("w", outs[rank], g.shape, rank, ranks)}, path, comm,
            storage_options=opts)
with cf.ThreadPoolExecutor(ranks) as ex:
    list(ex.map(load, range(ranks), comms))
assert all(np.array_equal(a, b) for a, b in zip(outs, shards)), "load differs"
print(json.dumps({"cpu_gib": c / (g.nbytes / float(1 << 30)), "gbs": g.nbytes / wall / 1e9}))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server-dir", required=True)
    ap.add_argument("--build", action="append", default=[],
                    help="NAME=PYTHONPATH[,VAR=VALUE...] (repeatable); default old=main's, new=this tree's")
    ap.add_argument("--mib", type=int, default=128)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    builds = [b.split("=", 1) for b in args.build] or [
        ["old", "/work/main/build-test/python"], ["new", os.path.join(repo, "build-test/python")]]
    env = {}
    with open(os.path.join(args.server_dir, "env")) as f:
        for line in f:
            k, _, v = line.strip().removeprefix("export ").partition("=")
            env[k] = v
    lines = [f"s3_save_cpu: {args.mib} MiB, {args.ranks} thread ranks, {args.reps} reps; "
             f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"]
    print(lines[0], flush=True)
    got = {name: [] for name, _ in builds}
    rate = {name: [] for name, _ in builds}
    for rep in range(args.reps):
        for name, spec in builds:
            path, *settings = spec.split(",")
            child_env = dict(os.environ, PYTHONPATH=path)
            for k in ("SHARDPOINT_S3_READ_BYTES", "SHARDPOINT_S3_LEASE_SECONDS",
                      "SHARDPOINT_MD5_LANES"):
                child_env.pop(k, None)
            child_env.update(kv.split("=", 1) for kv in settings)
            out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(env), str(args.mib),
                                  str(args.ranks)], env=child_env, check=True,
                                 capture_output=True, text=True).stdout
            res = json.loads(out.strip().splitlines()[-1])
            got[name].append(res["cpu_gib"])
            rate[name].append(res["gbs"])
            print(f"  rep {rep} {name}: {res['cpu_gib']:.2f} client CPU s/GiB, "
                  f"{res['gbs']:.3f} GB/s", flush=True)
    for name, _ in builds:
        lines.append(f"{name}\tmedian {statistics.median(got[name]):.2f} client CPU s/GiB\t"
                     f"reps {' '.join(f'{v:.2f}' for v in got[name])}\t"
                     f"median {statistics.median(rate[name]):.3f} GB/s\t"
                     f"reps {' '.join(f'{v:.3f}' for v in rate[name])}")
    lines.append(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("\n".join(lines[1:]))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
