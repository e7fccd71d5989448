"""shardpoint on an object store against what a user would use instead, in one run.

    PYTHONPATH=build-test/python /usr/bin/python3 bench/s3_bench.py [--mib 128] [--ranks 4]
        [--server-dir DIR] [--latency-ms 20] [--gbps 1.25] [--out bench/results/x.txt]

Starts a single-node Ceph radosgw (tests/s3/radosgw.sh; or uses the one started
in --server-dir) and moves the same bytes (--ranks objects of --mib/--ranks MiB
of random float32) with:

  * shardpoint: save by --ranks thread ranks (column-parallel shards; after
    one unmeasured save, as a training job's later saves), load
    in the same layout (GETs of the S3 storage's read size, 16 MiB; and of
    1 MiB, one per read slice, as before SHARDPOINT_S3_READ_BYTES existed),
    and load resharded (--ranks - 1 ranks, row-parallel);
  * boto3 (Debian's python3-boto3): upload_fileobj / download_fileobj of each
    object, multipart with TransferConfig at several max_concurrency values
    (the best is reported), the objects in parallel threads;
  * s3cmd put / get of the objects (one process each, in parallel);
  * raw curl: one parallel `curl -Z` of single PUTs (also with Content-MD5, the
    check every part of shardpoint's save carries), and of 16 MiB ranged GETs.

Between tools, everything the last one wrote is deleted and the gateway's
garbage collector run at once (`radosgw-admin gc process --include-all`),
so every tool meets an empty memstore OSD (8 GiB; before 2026-11-29's
md5-lanes runs nothing was deleted, and two runs on one server filled it).

For each: GB/s (wall, decimal GB), requests per GiB (counted in the gateway's
log: every request any of them made), client CPU seconds per GiB (this
process's CPU for in-process clients, children's for s3cmd and curl) and the
gateway's CPU seconds per GiB (radosgw's /proc stat). Every load is checked bit
for bit against the saved bytes.

Modelled remote store: the gateway here is CPU-bound on loopback, so the
same runs are also priced for a remote store of --latency-ms per request and
--gbps per client: time = bytes / bandwidth + latency x round trips on the
critical path. A tool's requests come in dependent phases (boto3's upload:
CreateMultipartUpload, then the parts, then CompleteMultipartUpload; its
download_file: a HeadObject, then the ranged GETs; shardpoint's save: the
creates with the directory LIST beside them, the parts, the completes, then
the manifest's conditional PUT with the ListMultipartUploads of the directory
beside it (before 2026-11-28h the LIST went first, and from then to
2026-11-29's md5-lanes run the ListMultipartUploads came after the PUT: one
more round trip each); its load: the manifest GET, then the ranged GETs); a phase of
n requests at a concurrency of c costs ceil(n / c) round trips. The phases'
request counts must add up to the requests counted in the gateway's log, or
the run fails. The formula before 2026-11-28g (requests x latency / requests in
flight, as if every request could be in flight at once) is printed beside it:
it priced boto3's HEAD-then-GET and a multipart upload's three steps as one
round trip. Modelled, from the measured request counts, not measured. The load average is printed with the figures (a loaded machine
makes wall times noise; CPU seconds and request counts hold).
"""

import argparse
import concurrent.futures as cf
import io
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RADOSGW = os.path.join(REPO, "tests", "s3", "radosgw.sh")
GIB = float(1 << 30)


def cpu_self():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class Gateway:
    """The radosgw: its request log (requests counted) and its CPU time."""

    def __init__(self, server_dir):
        self.dir = server_dir
        self.log = os.path.join(server_dir, "log", "client.rgw.log")
        with open(os.path.join(server_dir, "pids")) as f:
            pids = [int(p) for p in f.read().split()]
        self.pid = pids[-1]  # radosgw: started last

    def requests(self):
        with open(self.log, errors="replace") as f:
            return sum(1 for line in f if "req done" in line)

    def cpu(self):
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / tick


def round_trips(phases, in_flight):
    """Round trips on the critical path: each dependent phase of n requests
    at a concurrency of in_flight takes ceil(n / in_flight) of them."""
    return sum(-(-n // max(1, min(in_flight, n))) for n in phases if n > 0)


def multipart(files, before=0, after=(), beside=0):
    """Phases of a save of `files` objects: `before` requests first, then
    one PUT per object (an object of one part) or a multipart upload of
    each (the creates, the parts, the completes), then the phases `after`
    (request counts, each phase waiting for the one before; shardpoint's
    manifest PUT and its ListMultipartUploads are one phase). `beside` requests go out
    with the creates (shardpoint's directory LIST,
    src/checkpoint/held_save.h); a one-part object's PUT waits for them."""

    def phases(reqs):
        data = reqs - before - sum(after) - beside
        mid = [beside, files] if data == files else [files + beside, data - 2 * files, files]
        return [before] + mid + list(after)

    return phases


def then(first):
    """Phases of a load: `first` requests (shardpoint's manifest GET,
    boto3's HeadObjects), then every GET in flight."""
    return lambda reqs: [first, reqs - first]


def sequential(procs):
    """Phases of `procs` single-connection processes side by side (s3cmd):
    each request waits for the one before it in its process."""
    return lambda reqs: [procs] * (reqs // procs) + [reqs % procs]


def measure(gw, label, nbytes, in_flight, fn, rows, model, phases):
    # the gateway writes its log lines after answering: let them land
    time.sleep(0.3)
    r0, g0, c0, k0 = gw.requests(), gw.cpu(), cpu_self(), cpu_children()
    t0 = time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    time.sleep(0.5)
    reqs = gw.requests() - r0
    gib = nbytes / GIB
    client = (cpu_self() - c0) + (cpu_children() - k0)
    latency_s, bw = model
    # Requests in flight at once: at most the tool's concurrency, and at most
    # the requests there are (each request waits at least one latency, as in
    # bench/network_storage.h). The formula before 2026-11-28f divided by
    # the concurrency alone, so 12 requests at a concurrency of 64 cost under
    # a fifth of one latency; kept as model_old_gbs for comparison.
    # phases: the request count of each dependent phase, given the total
    # counted (a tool whose counts do not add up fails the run: the model
    # then prices requests that were not made, or misses some).
    ph = phases(reqs)
    assert sum(ph) == reqs, f"{label}: phases {ph} do not add up to the {reqs} requests counted"
    trips = round_trips(ph, in_flight)
    modelled = nbytes / bw + trips * latency_s
    modelled_old = nbytes / bw + reqs * latency_s / max(1, min(in_flight, reqs))
    row = dict(label=label, gbs=nbytes / wall / 1e9, wall=wall, reqs=reqs, reqs_gib=reqs / gib,
               cpu_gib=client / gib, gw_cpu_gib=(gw.cpu() - g0) / gib, in_flight=in_flight,
               phases=ph, trips=trips,
               model_gbs=nbytes / modelled / 1e9, model_old_gbs=nbytes / modelled_old / 1e9)
    rows.append(row)
    print(f"  {label:<34} {row['gbs']:6.3f} GB/s  {reqs:5d} req ({row['reqs_gib']:7.1f}/GiB)  "
          f"client CPU {row['cpu_gib']:6.2f} s/GiB  gateway CPU {row['gw_cpu_gib']:6.2f} s/GiB  "
          f"phases {ph} = {trips} round trips, modelled remote {row['model_gbs']:6.3f} GB/s (old "
          f"formula "
          f"{row['model_old_gbs']:6.3f})", flush=True)
    return row


def shardpoint_runs(sp, env, opts, bucket, shards, ranks, gw, rows, model):
    per = shards[0].shape[0]
    g = np.concatenate(shards)
    path = f"s3://{bucket}/bench/sp-{uuid.uuid4().hex[:8]}"
    nbytes = g.nbytes
    inflight = ranks * 4  # io_threads per rank, parts_in_flight per file

    def run(n, fn):
        comms = sp.thread_comms(n)
        with cf.ThreadPoolExecutor(n) as ex:
            list(ex.map(fn, range(n), comms))

    def save(rank, comm):
        sp.save({"w": sp.column_parallel("w", shards[rank], g.shape, rank, ranks)}, path, comm,
                storage_options=opts)

    # Unmeasured: a process's first save pays one-time costs (the storage's
    # part buffers' fresh pages, connections) that later saves of a training
    # job do not; boto3's best of three concurrencies is warm likewise.
    first = path
    path = first + "-warm-up"
    run(ranks, save)
    path = first
    measure(gw, "shardpoint save", nbytes, inflight, lambda: run(ranks, save), rows, model,
            multipart(ranks, beside=1, after=(2,)))
    outs = [np.empty_like(s) for s in shards]

    def load(rank, comm):
        sp.load({"w": sp.column_parallel("w", outs[rank], g.shape, rank, ranks)}, path, comm,
                storage_options=opts)

    # Unmeasured: the first load after the save pays one-time costs (fresh
    # pages of the output arrays, the allocator's first large blocks) that
    # would otherwise land on whichever load is measured first.
    run(ranks, load)

    measure(gw, "shardpoint load (same layout)", nbytes, inflight, lambda: run(ranks, load), rows,
            model, then(1))
    assert all(np.array_equal(a, b) for a, b in zip(outs, shards)), "load differs"
    outs = [np.empty_like(s) for s in shards]

    # GETs of 16 MiB whatever the rank's share (read_slice_bytes raises the
    # request size past the per-thread cap): 2 per rank, as curl's below.
    def load16(rank, comm):
        sp.load({"w": sp.column_parallel("w", outs[rank], g.shape, rank, ranks)}, path, comm,
                storage_options=opts, read_slice_bytes=16 << 20)

    measure(gw, "shardpoint load (16 MiB GETs)", nbytes, inflight, lambda: run(ranks, load16),
            rows, model, then(1))
    assert all(np.array_equal(a, b) for a, b in zip(outs, shards)), "load differs"
    outs = [np.empty_like(s) for s in shards]

    # The old way, for comparison: a GET per 1 MiB read slice. The variable is
    # read when a storage is made: the extra key makes a fresh one.
    os.environ["SHARDPOINT_S3_READ_BYTES"] = str(1 << 20)
    opts_1mib = dict(opts, addressing_style="path")

    def load1(rank, comm):
        sp.load({"w": sp.column_parallel("w", outs[rank], g.shape, rank, ranks)}, path, comm,
                storage_options=opts_1mib)

    try:
        measure(gw, "shardpoint load (1 MiB GETs, before)", nbytes, inflight,
                lambda: run(ranks, load1), rows, model, then(1))
    finally:
        del os.environ["SHARDPOINT_S3_READ_BYTES"]
    assert all(np.array_equal(a, b) for a, b in zip(outs, shards)), "load differs"
    m = ranks - 1
    cols = g.shape[1] // m
    routs = [np.empty((g.shape[0], cols), dtype=g.dtype) for _ in range(m)]

    def reshard(rank, comm):
        sp.load({"w": sp.row_parallel("w", routs[rank], g.shape, rank, m)}, path, comm,
                storage_options=opts)

    if g.shape[1] % m == 0:
        measure(gw, f"shardpoint load ({ranks}->{m} resharded)", nbytes, m * 4,
                lambda: run(m, reshard), rows, model, then(1))
        assert all(np.array_equal(routs[r], g[:, r * cols:(r + 1) * cols]) for r in range(m))
    del per


def boto3_client(env):
    """A boto3 S3 client of the test server in `env`."""
    import boto3
    return boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"],
                        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                        region_name=env["AWS_REGION"])


def purge(env, bucket, server, prefix="bench/"):
    """Deletes every object under `prefix` and has the gateway free their
    data now (its garbage collector would wait 2 hours), outside any
    measured window."""
    client = boto3_client(env)
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
    subprocess.run(["radosgw-admin", "-c", os.path.join(server, "ceph.conf"), "gc", "process",
                    "--include-all"], check=True, timeout=300, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def boto3_runs(env, bucket, blobs, gw, rows, model):
    from boto3.s3.transfer import TransferConfig
    client = boto3_client(env)
    nbytes = sum(len(b) for b in blobs)
    best_up = best_down = None
    for conc in (4, 10, 16):
        cfg = TransferConfig(multipart_threshold=16 << 20, multipart_chunksize=16 << 20,
                             max_concurrency=conc)
        keys = [f"bench/boto3-{conc}-{i}" for i in range(len(blobs))]

        def up():
            with cf.ThreadPoolExecutor(len(blobs)) as ex:
                list(ex.map(lambda kb: client.upload_fileobj(io.BytesIO(kb[1]), bucket, kb[0],
                                                             Config=cfg), zip(keys, blobs)))

        r = measure(gw, f"boto3 upload (concurrency {conc})", nbytes, conc * len(blobs), up,
                    rows, model, multipart(len(blobs)))
        best_up = r if best_up is None or r["gbs"] > best_up["gbs"] else best_up
        got = [io.BytesIO() for _ in blobs]

        def down():
            with cf.ThreadPoolExecutor(len(blobs)) as ex:
                list(ex.map(lambda kg: client.download_fileobj(bucket, kg[0], kg[1], Config=cfg),
                            zip(keys, got)))

        r = measure(gw, f"boto3 download (concurrency {conc})", nbytes, conc * len(blobs), down,
                    rows, model, then(len(blobs)))
        assert all(g.getvalue() == b for g, b in zip(got, blobs)), "boto3 download differs"
        best_down = r if best_down is None or r["gbs"] > best_down["gbs"] else best_down
    return best_up, best_down


def s3cmd_runs(env, bucket, files, tmp, gw, rows, model):
    cfg = os.path.join(tmp, "s3cfg")
    host = env["AWS_ENDPOINT_URL"].split("://", 1)[1]
    with open(cfg, "w") as f:
        f.write(f"[default]\naccess_key = {env['AWS_ACCESS_KEY_ID']}\nsecret_key = "
                f"{env['AWS_SECRET_ACCESS_KEY']}\nhost_base = {host}\nhost_bucket = {host}\n"
                "use_https = False\nsignature_v2 = False\nmultipart_chunk_size_mb = 16\n")
    nbytes = sum(os.path.getsize(p) for p in files)

    def each(argv_of):
        procs = [subprocess.Popen(argv_of(i, p), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE) for i, p in enumerate(files)]
        for p in procs:
            _, err = p.communicate()
            assert p.returncode == 0, err.decode()

    measure(gw, "s3cmd put", nbytes, len(files),
            lambda: each(lambda i, p: ["s3cmd", "-c", cfg, "-q", "put", p,
                                       f"s3://{bucket}/bench/s3cmd-{i}"]), rows, model,
            sequential(len(files)))
    outs = [p + ".s3cmd" for p in files]
    measure(gw, "s3cmd get", nbytes, len(files),
            lambda: each(lambda i, p: ["s3cmd", "-c", cfg, "-q", "--force", "get",
                                       f"s3://{bucket}/bench/s3cmd-{i}", outs[i]]), rows, model,
            sequential(len(files)))
    for a, b in zip(files, outs):
        assert open(a, "rb").read() == open(b, "rb").read(), "s3cmd get differs"


def curl_runs(env, bucket, files, gw, rows, model, range_bytes=16 << 20):
    sign = ["--aws-sigv4", f"aws:amz:{env['AWS_REGION']}:s3", "--user",
            f"{env['AWS_ACCESS_KEY_ID']}:{env['AWS_SECRET_ACCESS_KEY']}",
            "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
    base = env["AWS_ENDPOINT_URL"] + f"/{bucket}/bench/curl-"
    nbytes = sum(os.path.getsize(p) for p in files)
    put = ["curl", "-sf", "--no-progress-meter", "-Z", "--parallel-max", "16"]
    for i, p in enumerate(files):
        put += sign + ["-T", p, f"{base}{i}", "--next"]
    put = put[:-1]
    # curl knows the keys and sizes beforehand: every request in one phase
    # (the raw bound; a user would need the sizes from a listing or a HEAD).
    measure(gw, f"curl parallel PUT ({len(files)} objects)", nbytes, len(files),
            lambda: subprocess.run(put, check=True, stdout=subprocess.DEVNULL), rows, model,
            lambda reqs: [reqs])
    # The same PUTs carrying Content-MD5, the integrity check every part of
    # shardpoint's save carries (the server verifies it): the digests are
    # computed in the measured run (openssl, counted as the client's CPU).
    def put_md5():
        md5 = [subprocess.run(f"openssl dgst -md5 -binary '{p}' | base64", shell=True, check=True,
                              capture_output=True, text=True).stdout.strip() for p in files]
        cmd = ["curl", "-sf", "--no-progress-meter", "-Z", "--parallel-max", "16"]
        for i, p in enumerate(files):
            cmd += sign + ["-H", f"Content-MD5: {md5[i]}", "-T", p, f"{base}md5-{i}", "--next"]
        subprocess.run(cmd[:-1], check=True, stdout=subprocess.DEVNULL)

    measure(gw, f"curl parallel PUT + Content-MD5 ({len(files)})", nbytes, len(files), put_md5,
            rows, model, lambda reqs: [reqs])
    get = ["curl", "-sf", "--no-progress-meter", "-Z", "--parallel-max", "16"]
    parts = []
    for i, p in enumerate(files):
        size = os.path.getsize(p)
        for off in range(0, size, range_bytes):
            out = f"{p}.curl.{off}"
            parts.append((p, off, out))
            get += sign + ["-r", f"{off}-{min(size, off + range_bytes) - 1}", "-o", out,
                           f"{base}{i}", "--next"]
    get = get[:-1]
    measure(gw, f"curl parallel ranged GET ({len(parts)} x 16 MiB)", nbytes, 16,
            lambda: subprocess.run(get, check=True, stdout=subprocess.DEVNULL), rows, model,
            lambda reqs: [reqs])
    for p, off, out in parts:
        with open(p, "rb") as f:
            f.seek(off)
            assert f.read(range_bytes) == open(out, "rb").read(), "curl GET differs"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=128, help="bytes moved per run, MiB")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--server-dir", default="", help="a radosgw.sh start DIR already running")
    ap.add_argument("--latency-ms", type=float, default=20.0, help="modelled per request")
    ap.add_argument("--gbps", type=float, default=1.25, help="modelled client bandwidth, GB/s")
    ap.add_argument("--out", default="", help="also write the report here")
    args = ap.parse_args()
    import shardpoint as sp

    tmp = tempfile.mkdtemp(prefix="sp_s3_bench_")
    own = not args.server_dir
    server = args.server_dir or os.path.join(tmp, "server")
    try:
        if own:
            subprocess.run(["bash", RADOSGW, "start", server], check=True,
                           stdout=subprocess.DEVNULL)
        env = {}
        with open(os.path.join(server, "env")) as f:
            for line in f:
                k, _, v = line.strip().removeprefix("export ").partition("=")
                env[k] = v
        bucket = env.get("SHARDPOINT_S3_BUCKET", "shardpoint")
        opts = {"endpoint_url": env["AWS_ENDPOINT_URL"], "region_name": env["AWS_REGION"],
                "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
                "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"]}
        gw = Gateway(server)
        ranks = args.ranks
        cols = 3 * 4 * 1024  # divisible by ranks - 1 for 2..5 ranks
        rows_total = max(ranks, (args.mib << 20) // (cols * 4) // ranks * ranks)
        g = np.random.default_rng(39).standard_normal((rows_total, cols)).astype(np.float32)
        shards = [s.copy() for s in np.split(g, ranks)]
        blobs = [s.tobytes() for s in shards]
        files = []
        for i, b in enumerate(blobs):
            p = os.path.join(tmp, f"obj{i}")
            with open(p, "wb") as f:
                f.write(b)
            files.append(p)
        model = (args.latency_ms / 1000.0, args.gbps * 1e9)
        load = os.getloadavg()
        head = (f"s3_bench: {g.nbytes / (1 << 20):.0f} MiB in {ranks} objects/shards, radosgw 16.2 "
                f"(memstore OSD) on 127.0.0.1; load average {load[0]:.2f} {load[1]:.2f} "
                f"{load[2]:.2f} on {os.cpu_count()} CPUs; modelled remote: "
                f"{args.latency_ms:g} ms/request, {args.gbps:g} GB/s")
        print(head, flush=True)
        rows = []
        # Each tool's objects are deleted before the next tool runs, so every
        # tool meets the same (empty) memstore OSD, which is 8 GiB: a fuller
        # one is slower, and two runs' objects filled it.
        shardpoint_runs(sp, env, opts, bucket, shards, ranks, gw, rows, model)
        purge(env, bucket, server)
        boto3_runs(env, bucket, blobs, gw, rows, model)
        purge(env, bucket, server)
        if shutil.which("s3cmd"):
            s3cmd_runs(env, bucket, files, tmp, gw, rows, model)
            purge(env, bucket, server)
        curl_runs(env, bucket, files, gw, rows, model)
        purge(env, bucket, server)
        load = os.getloadavg()
        tail = f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
        print(tail)
        if args.out:
            with open(args.out, "w") as f:
                f.write(head + "\n")
                for r in rows:
                    f.write(f"{r['label']}\t{r['gbs']:.4f} GB/s\t{r['reqs']} req\t"
                            f"{r['reqs_gib']:.1f} req/GiB\t{r['cpu_gib']:.3f} client CPU s/GiB\t"
                            f"{r['gw_cpu_gib']:.3f} gateway CPU s/GiB\t"
                            f"{r['phases']} phases\t{r['trips']} round trips\t"
                            f"{r['model_gbs']:.4f} GB/s modelled remote\t"
                            f"{r['model_old_gbs']:.4f} GB/s modelled (old formula)\n")
                f.write(tail + "\n")
    finally:
        if own:
            subprocess.run(["bash", RADOSGW, "stop", server], check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
