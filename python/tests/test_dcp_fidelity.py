"""Interop fidelity with the real torch 1.13 DCP (one process, no_dist):
tensors DCP stores with strides load bit for bit."""

import os
import sys

import torch

import shardpoint as sp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dcp_compat import import_dcp  # noqa: E402


def strided_state():
    base = torch.arange(48 * 40, dtype=torch.float32).reshape(48, 40).mul(0.25)
    return {
        "w_t": base.t(),                                                    # strides (1, 40)
        "p3": torch.arange(60, dtype=torch.int16).reshape(3, 4, 5).permute(1, 2, 0),
        "half_t": torch.arange(12, dtype=torch.float16).reshape(3, 4).t(),  # (4, 3)
    }


def test_real_dcp_strided_tensors_load_whole_and_resharded(tmp_path):
    dcp = import_dcp()
    out = str(tmp_path / "dcp")
    src = strided_state()
    dcp.save_state_dict(src, dcp.FileSystemWriter(out), no_dist=True)
    sd = {k: torch.zeros(v.shape, dtype=v.dtype) for k, v in src.items()}
    sp.load(sd, out, sp.single())
    for k, v in src.items():
        assert torch.equal(sd[k], v), k
    # Boxes across the stored order: w_t rows 5:30 (storage columns), p3's
    # middle index, read alone, not cooperatively.
    w = torch.zeros(25, 48)
    p = torch.zeros(4, 2, 3, dtype=torch.int16)
    sp.load({"w_t": sp.ShardedTensor("w_t", w, [40, 48], [5, 0]),
             "p3": sp.ShardedTensor("p3", p, [4, 5, 3], [0, 2, 0])}, out, sp.single(),
            allow_unexpected_keys=True, cooperative=False)
    assert torch.equal(w, src["w_t"][5:30])
    assert torch.equal(p, src["p3"][:, 2:4])
