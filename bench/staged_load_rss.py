"""Peak RSS of a load staged as CUDA loads are, on a machine without a GPU: CPU
tensors go through the device staging (python/shardpoint/_staging.py) as if
they were on a device, so the host buffers, the tensor groups and the copier
thread are the CUDA path's; only the copy's target differs.

    python3 bench/staged_load_rss.py GROUP_BYTES [--dir DIR] [--fresh-pages]

Saves 64 tensors of 16 MiB (1 GiB), drops nothing, loads them (one rank, not
cooperative) with tensor groups of GROUP_BYTES (a huge value: one group, every
buffer held to the end) and prints the peak RSS growth of the load, its minor
page faults and its seconds. The groups' buffers take turns in two arenas
(python/shardpoint/_arenas.py); `--fresh-pages` maps a fresh buffer for every
tensor instead, as before 2026-11-27's evening. Run each setting in
a fresh process: glibc keeps freed heap memory, so a second load in one
process would start from the first one's heap.
"""

import argparse
import os
import resource
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import shardpoint as sp  # noqa: E402
from peers import measure as M  # noqa: E402
from shardpoint import _checkpoint, _staging  # noqa: E402


class PageablePool(_staging._PinnedPool):
    """The save's pool, unpinned (pinning needs CUDA); not kept for the load."""

    def new(self, like):
        return torch.empty(like.shape, dtype=like.dtype)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("group_bytes", type=int)
    ap.add_argument("--dir", default="/tmp/shardpoint_staged_rss")
    ap.add_argument("--fresh-pages", action="store_true")
    a = ap.parse_args()
    _checkpoint.is_device_tensor = lambda t: isinstance(t, torch.Tensor)
    _staging._POOL = PageablePool()
    src = {f"w{i}": torch.full((4 << 20,), float(i)) for i in range(64)}
    sp.save(src, a.dir, overwrite=True)
    del src
    _staging._POOL = PageablePool()  # no pooled buffers: the load stages in pageable memory
    _staging.GROUP_BYTES = a.group_bytes
    _staging.ARENAS = not a.fresh_pages
    dst = {f"w{i}": torch.zeros(4 << 20) for i in range(64)}
    rss0 = M.rss_bytes()
    M.reset_peak_rss()
    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t0 = time.perf_counter()
    sp.load(dst, a.dir, cooperative=False)
    seconds = time.perf_counter() - t0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
    assert all(bool((dst[f"w{i}"] == i).all()) for i in range(64)), "wrong values"
    pages = "fresh pages" if a.fresh_pages else "two arenas"
    print(f"tensor groups of {a.group_bytes} B, {pages}: peak RSS growth "
          f"{(M.peak_rss_bytes() - rss0) / 2**20:.0f} MiB, {faults} minor faults, "
          f"{seconds:.2f} s")


if __name__ == "__main__":
    main()
