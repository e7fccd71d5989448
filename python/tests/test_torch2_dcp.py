"""torch 2.x's real DCP (`torch.distributed.checkpoint`, DTensors on a CPU device
mesh, several gloo processes) and shardpoint, both ways, bit for bit. Needs
torch >= 2.4: skipped on this project's machines (Debian's torch 1.13), run on a
GPU machine by tests/gpu/run.sh."""

import io
import os
import subprocess
import sys

import pytest
import torch

import shardpoint as sp
from conftest import free_port, run_python, run_ranks, torch_has

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "workers", "dcp2_worker.py")
sys.path.insert(0, os.path.join(HERE, "workers"))
from dcp2_worker import globals_, same  # noqa: E402


pytestmark = pytest.mark.skipif(
    not torch_has(2, 4, "torch.distributed.checkpoint", "torch.distributed.tensor.DTensor"),
    reason=f"needs torch >= 2.4's DCP and DTensor (this is torch "
    f"{torch.__version__})")
G = globals_()


def _worker(*args):
    return run_python(WORKER, *args)


@pytest.fixture(scope="module", params=[(4, False), (3, True)],
                ids=["4ranks-2d-mesh", "3ranks-single-file"])
def dcp2_dir(request, tmp_path_factory):  # pragma: no cover - torch >= 2.4
    world, single = request.param
    out = str(tmp_path_factory.mktemp("dcp2") / "ckpt")
    _worker("save", out, world, free_port(), *(["--single-file"] if single else []))
    return out


def test_whole_tensors_bit_for_bit(dcp2_dir):  # pragma: no cover - torch >= 2.4
    sd = {k: torch.zeros_like(t) for k, t in G.items()}
    res = sp.load(sd, dcp2_dir, sp.single(), strict=False)
    for k, t in G.items():
        assert same(sd[k], t), k
    assert "extra" in res.unexpected_keys and "step" in res.unexpected_keys, res


def test_reshards_columns_and_rows(dcp2_dir):  # pragma: no cover - torch >= 2.4
    def load(r, comm):
        grid = torch.zeros(8, 2)
        col = torch.zeros(2, 7, dtype=torch.bfloat16)
        sd = {"grid": sp.ShardedTensor("grid", grid, [8, 6], [0, 2 * r]),
              "col": sp.ShardedTensor("col", col, [6, 7], [2 * r, 0])}
        sp.load(sd, dcp2_dir, comm, allow_unexpected_keys=True)
        return grid, col

    for r, (grid, col) in enumerate(run_ranks(3, load)):
        assert same(grid, G["grid"][:, 2 * r:2 * r + 2].contiguous()), r
        assert same(col, G["col"][2 * r:2 * r + 2]), r


def test_byte_items(dcp2_dir):  # pragma: no cover - torch >= 2.4
    # torch 2.x, as 1.13, stores every object with torch.save, a BytesIO too
    sd = {"extra": b"", "step": b""}
    sp.load(sd, dcp2_dir, sp.single(), allow_unexpected_keys=True, raw_objects=True)
    assert sd["extra"][:4] == b"PK\x03\x04"
    assert torch.load(io.BytesIO(sd["extra"]), weights_only=False).getvalue() == \
        b"dcp-bytes-item"
    assert torch.load(io.BytesIO(sd["step"]), weights_only=False) == 7


def test_dcp2_loads_what_convert_to_dcp_wrote(tmp_path):  # pragma: no cover - torch >= 2.4
    from test_dcp import cli
    exe = cli()
    if exe is None:
        pytest.skip("no shardpoint CLI: not in the package, beside it, nor on PATH")
    spd, out = str(tmp_path / "sp"), str(tmp_path / "dcp")

    def save(r, comm):  # emb rows 0:7 | 7:10, the rest whole on both ranks
        rows = [(0, 7), (7, 10)][r]
        sd = {k: t for k, t in G.items() if k != "emb"}
        sd["emb"] = sp.ShardedTensor("emb", G["emb"][rows[0]:rows[1]].clone(), [10, 4],
                                     [rows[0], 0])
        sp.save(sd, spd, comm)

    run_ranks(2, save)
    r = subprocess.run([exe, "convert", "--to", "dcp", spd, out], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "dcp2_worker: ok" in _worker("load", out, 4, free_port())


NEWER = ("uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2")


@pytest.mark.skipif(not all(hasattr(torch, n) for n in NEWER),
                    reason="needs torch >= 2.3 (uint16/32/64, float8)")
def test_newer_dtypes_both_ways(tmp_path):  # pragma: no cover - torch >= 2.4
    # torch 2.x saves these as `_rebuild_tensor_v3` of an untyped storage
    import torch.distributed.checkpoint as dcp
    from test_dcp import cli
    g = torch.Generator().manual_seed(99)
    raw = torch.randint(0, 256, (5, 48), dtype=torch.uint8, generator=g)
    want = {n: raw[:, :6 * torch.empty(0, dtype=getattr(torch, n)).element_size()]
            .contiguous().view(getattr(torch, n)) for n in NEWER}
    assert all(t.shape == (5, 6) for t in want.values())

    # torch 2.x's DCP -> shardpoint, rows 1:4 of each
    theirs = str(tmp_path / "theirs")
    dcp.save(dict(want), storage_writer=dcp.FileSystemWriter(theirs))
    sd = {n: sp.ShardedTensor(n, torch.empty(3, 6, dtype=t.dtype), [5, 6], [1, 0])
          for n, t in want.items()}
    sp.load(sd, theirs, sp.single())
    for n, t in want.items():
        assert same(sd[n].data, t[1:4].contiguous()), n

    # shardpoint -> convert --to dcp -> torch 2.x's DCP
    exe = cli()
    if exe is None:
        pytest.skip("no shardpoint CLI: not in the package, beside it, nor on PATH")
    spd, ours = str(tmp_path / "sp"), str(tmp_path / "ours")
    sp.save(dict(want), spd, sp.single())
    r = subprocess.run([exe, "convert", "--to", "dcp", spd, ours], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    back = {n: torch.empty_like(t) for n, t in want.items()}
    dcp.load(back, storage_reader=dcp.FileSystemReader(ours))
    for n, t in want.items():
        assert same(back[n], t), n
