"""buffered_write_probe: where a buffered write + fsync's system CPU goes on this machine.

Writes --mib MiB from memory into DIR/probe.bin in 8 MiB pwrite()s and fsyncs it, with and
without fallocate() first, the two in alternating order, after a cache drop (root) or not
(--no-drop); prints the process's system seconds and wall seconds of the writes and of the
fsync. On the VM this project measures on, the first buffered write after a cache drop pays
for fresh page-cache pages (the host had taken the freed memory back), whichever variant it is.

  sudo /usr/bin/python3 bench/buffered_write_probe.py --dir /tmp --mib 256 --reps 4
"""
import argparse
import os
import resource
import time


def one(path, data, falloc, drop):
    if drop:
        os.system("sync; echo 3 > /proc/sys/vm/drop_caches")
    n = len(data)
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if falloc:
            os.posix_fallocate(fd, 0, n)
        mv = memoryview(data)
        for off in range(0, n, 8 << 20):
            os.pwrite(fd, mv[off:off + (8 << 20)], off)
        r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        os.fsync(fd)
    finally:
        os.close(fd)
    r2, t2 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    os.unlink(path)
    print(f"fallocate={'yes' if falloc else 'no '}  write: sys {r1.ru_stime - r0.ru_stime:.2f} s, "
          f"wall {t1 - t0:.2f} s;  fsync: sys {r2.ru_stime - r1.ru_stime:.2f} s, "
          f"wall {t2 - t1:.2f} s", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dir", default="/tmp")
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--reps", type=int, default=4)
    p.add_argument("--no-drop", action="store_true", help="keep the page cache")
    a = p.parse_args()
    data = bytearray(os.urandom(1 << 20)) * a.mib  # touched once, before any measurement
    path = os.path.join(a.dir, "probe.bin")
    for rep in range(a.reps):
        order = (True, False) if rep % 2 == 0 else (False, True)
        for falloc in order:
            one(path, data, falloc, not a.no_drop)
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
