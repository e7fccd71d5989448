"""What a CUDA load's host staging costs, per process, with N processes at once
(as the peers benchmark's ranks share one GPU): faulting in fresh pageable
memory of a rank's share, copying it to the device from pageable and from
pinned memory, and pinning it.

    python3 bench/staging_probe.py [--mib 568] [--procs 4] [--tensors 60]

Prints the median over 3 rounds of each step's slowest process, in seconds
and GB/s. Needs torch with CUDA.
"""

import argparse
import multiprocessing as mp
import statistics
import time


def worker(mib, tensors, rounds, barrier, out):
    import torch
    dev = torch.device("cuda", 0)
    n = (mib << 20) // tensors
    dst = [torch.empty(n, dtype=torch.uint8, device=dev) for _ in range(tensors)]
    res = {}

    def step(name, fn):
        barrier.wait()
        t0 = time.perf_counter()
        r = fn()
        torch.cuda.synchronize()
        res.setdefault(name, []).append(time.perf_counter() - t0)
        return r

    for _ in range(rounds):
        host = step("fault in fresh pageable memory",
                    lambda: [torch.empty(n, dtype=torch.uint8).fill_(1) for _ in range(tensors)])
        step("copy to the device from pageable",
             lambda: [d.copy_(h, non_blocking=True) for d, h in zip(dst, host)])
        del host
        pinned = step("allocate pinned memory",
                      lambda: [torch.empty(n, dtype=torch.uint8, pin_memory=True)
                               for _ in range(tensors)])
        step("copy to the device from pinned",
             lambda: [d.copy_(h, non_blocking=True) for d, h in zip(dst, pinned)])
        del pinned
    out.put(res)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=568, help="bytes per process, MiB")
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--tensors", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(a.procs), ctx.Queue()
    ps = [ctx.Process(target=worker, args=(a.mib, a.tensors, a.rounds, barrier, out))
          for _ in range(a.procs)]
    for p in ps:
        p.start()
    results = [out.get() for _ in ps]
    for p in ps:
        p.join()
    print(f"{a.procs} processes, {a.mib} MiB each in {a.tensors} tensors; median of "
          f"{a.rounds} rounds of the slowest process")
    for name in results[0]:
        s = statistics.median(max(r[name][i] for r in results) for i in range(a.rounds))
        print(f"  {name}: {s:.3f} s ({a.procs * (a.mib << 20) / s / 1e9:.1f} GB/s, "
              f"all processes)")


if __name__ == "__main__":
    main()
