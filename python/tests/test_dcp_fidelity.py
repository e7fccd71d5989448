"""Interop fidelity with the real torch 1.13 DCP (one process, no_dist):
tensors DCP stores with strides load bit for bit, and the objects that
``convert --to dcp`` writes load back in DCP as the values they were."""

import math
import os
import subprocess
import sys

import pytest
import torch

import shardpoint as sp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dcp_compat import import_dcp  # noqa: E402
from test_dcp import cli  # noqa: E402


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


def same(a, b):
    """Equal values, NaN equal to NaN, types compared too."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def test_real_dcp_loads_objects_convert_to_dcp_wrote(tmp_path):
    exe = cli()
    if exe is None:
        pytest.skip("no shardpoint CLI: not in the package, beside it, nor on PATH")
    objects = {
        "blob": b"\x00\xff raw \x80 bytes",
        "empty": b"",
        "big": 2 ** 70,
        "neg": -(2 ** 63) - 1,
        "small": -7,
        "f": 0.1,
        "nan": float("nan"),
        "inf": float("-inf"),
        "name": "ad\u00e9 \U0001F600 \n\"q\"",
        "none": None,
        "flag": True,
        "hist": [1, 2.5, None, False, "x", {"k": [1, {"z": "ok"}]}, [], {}],
        "tup": (3, "a"),  # stored as a JSON list: DCP gives a list
        "pick": {1, 2},   # pickled (allow_pickle)
    }
    want = dict(objects, tup=[3, "a"])
    ck, out = str(tmp_path / "sp"), str(tmp_path / "dcp")
    sd = dict(objects, w=torch.arange(6, dtype=torch.float32).reshape(2, 3))
    sp.save(sd, ck, sp.single(), allow_pickle=True)
    r = subprocess.run([exe, "convert", "--to", "dcp", "--torch", "1.13", ck, out],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr

    dcp = import_dcp()
    back = {k: None for k in objects}
    back["w"] = torch.zeros(2, 3)
    dcp.load_state_dict(back, dcp.FileSystemReader(out), no_dist=True)
    assert torch.equal(back["w"], sd["w"])
    for k, v in want.items():
        assert same(v, back[k]), (k, v, back[k])
