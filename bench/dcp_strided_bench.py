"""Bytes read and time of shardpoint loading a DCP item stored with strides.

torch 1.13's real DCP (one process) saves an N x N float32 matrix as `w.t()`
(strides (1, N)) and a permuted 3-D tensor; shardpoint then loads each whole,
by rows and by columns, one rank. Bytes read are the process's `rchar`
(/proc/self/io: every read() and pread(), page cache or not), so they count
what the strided view file read from the .distcp file, not the row-major bytes
it handed on. DCP's own load (torch.load of the whole item) is the baseline.

    PYTHONPATH=build-test/python /usr/bin/python3 bench/dcp_strided_bench.py --n 4096
"""
import argparse
import os
import sys
import tempfile
import time

import torch

import shardpoint as sp

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python", "tests"))
from dcp_compat import import_dcp  # noqa: E402
from peers.measure import io_counters  # noqa: E402


def measure(label, fn, needed):
    r0, t0 = io_counters()["rchar"], time.perf_counter()
    fn()
    dt, read = time.perf_counter() - t0, io_counters()["rchar"] - r0
    print(f"{label:38s} {needed / 2**20:8.1f} MiB needed {read / 2**20:8.1f} MiB read "
          f"({read / needed:4.2f}x) {dt * 1e3:8.1f} ms")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4096)
    n = ap.parse_args().n
    dcp = import_dcp()
    w = torch.arange(n * n, dtype=torch.float32).reshape(n, n)
    p = torch.arange(n * n, dtype=torch.float32).reshape(n // 64, 64, n).permute(2, 0, 1)
    src = {"w_t": w.t(), "p3": p}
    with tempfile.TemporaryDirectory() as d:
        dcp.save_state_dict(src, dcp.FileSystemWriter(d), no_dist=True)
        mat = n * n * 4
        h = n // 2

        def load(key, box_shape, offset, shape):
            out = torch.zeros(box_shape)
            sp.load({key: sp.ShardedTensor(key, out, shape, offset)}, d, sp.single(),
                    allow_unexpected_keys=True, cooperative=False)
            assert torch.equal(out, src[key][tuple(slice(o, o + s) for o, s in zip(offset, box_shape))])

        def dcp_load():
            back = {"w_t": torch.zeros(n, n)}
            dcp.load_state_dict(back, dcp.FileSystemReader(d), no_dist=True)
            assert torch.equal(back["w_t"], src["w_t"])

        measure("DCP load_state_dict, w_t whole", dcp_load, mat)
        measure("shardpoint, w_t whole", lambda: load("w_t", (n, n), [0, 0], [n, n]), mat)
        measure("shardpoint, w_t rows 0:n/2", lambda: load("w_t", (h, n), [0, 0], [n, n]), mat // 2)
        measure("shardpoint, w_t columns 0:n/2 (a band)",
                lambda: load("w_t", (n, h), [0, 0], [n, n]), mat // 2)
        measure("shardpoint, p3 [:, 0:1, :] (a band)",
                lambda: load("p3", (n, 1, 64), [0, 0, 0], list(p.shape)), n * 64 * 4)


if __name__ == "__main__":
    main()
