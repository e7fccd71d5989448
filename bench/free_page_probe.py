#!/usr/bin/python3
"""free_page_probe: what reusing freed memory costs on this machine.

    /usr/bin/python3 bench/free_page_probe.py [--gib 2] [--pauses 0,0.5,1,2,4]

Touches one byte per 4 KiB page of a fresh --gib buffer, frees it, and again
after each pause, printing seconds, GB/s and the process's system CPU. On a VM
whose kernel reports free pages to the host (virtio-balloon free page
reporting; Firecracker guests here), pages free for a moment are handed back
and the next touch of them faults on the host too, all of it system time:
measured here, ~3 s per GiB taken back against ~0.15 s per GiB for memory
freed a moment ago. The kernel's counter of reported
memory (/sys/module/page_reporting/parameters/reported_kib, where this kernel
has it) is printed beside each pause. No pause: the pages just freed come
back still backed.
"""

import argparse
import os
import time

import numpy as np

REPORTED = "/sys/module/page_reporting/parameters/reported_kib"


def reported_kib():
    try:
        with open(REPORTED) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def touch(nbytes):
    cpu0, t0 = os.times(), time.perf_counter()
    b = np.empty(nbytes, dtype=np.uint8)
    b[::4096] = 1
    seconds = time.perf_counter() - t0
    del b
    return seconds, os.times().system - cpu0.system


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gib", type=float, default=2.0)
    p.add_argument("--pauses", default="0,0.5,0,1,0,2,0,4,0",
                   help="seconds to wait before each touch, comma-separated")
    args = p.parse_args()
    n = int(args.gib * 2**30)
    print(f"free page reporting: {'counter at ' + REPORTED if reported_kib() is not None else 'no counter on this kernel'}")
    touch(n)  # first touch: whatever state the memory is in
    for pause in [float(x) for x in args.pauses.split(",")]:
        r0 = reported_kib()
        time.sleep(pause)
        r1 = reported_kib()
        seconds, system = touch(n)
        rep = f"; {(r1 - r0) / 2**20:.2f} GiB reported to the host meanwhile" if r0 is not None else ""
        print(f"pause {pause:4.1f} s: touch {args.gib:g} GiB in {seconds:.2f} s "
              f"({n / seconds / 1e9:.2f} GB/s, system CPU {system:.2f} s){rep}", flush=True)


if __name__ == "__main__":
    main()
