"""Checkpoints written by the real PyTorch DCP (torch 1.13, several gloo
processes) loaded by shardpoint under other layouts, bit for bit."""

import io
import os
import shutil
import subprocess
import sys

import pytest
import torch

import shardpoint as sp
from conftest import PYTHON, free_port, run_ranks, subprocess_env

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers"))
from dcp_save import globals_  # noqa: E402

G = globals_()


@pytest.fixture(scope="module", params=[(3, False), (2, True)], ids=["3ranks", "2ranks-single-file"])
def dcp_dir(request, tmp_path_factory):
    world, single = request.param
    out = str(tmp_path_factory.mktemp("dcp") / "ckpt")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers", "dcp_save.py")
    args = [PYTHON, script, out, str(world), str(free_port())] + (["--single-file"] if single else [])
    subprocess.run(args, check=True, env=subprocess_env(), timeout=120)
    assert os.path.exists(os.path.join(out, ".metadata"))
    return out


def test_whole_tensors_bit_for_bit(dcp_dir):
    sd = {k: torch.zeros_like(v) for k, v in G.items()}
    sp.load(sd, dcp_dir, sp.single(), strict=False)
    for k, v in G.items():
        assert sd[k].dtype == v.dtype
        assert torch.equal(sd[k].view(torch.uint8), v.view(torch.uint8)), k


def test_reshard_rows_and_columns(dcp_dir):
    # 4 ranks: emb by rows in 4 uneven parts (3, 3, 2, 2), col by rows (DCP
    # stored it by columns), so every rank reads pieces of several items.
    rows = [(0, 3), (3, 6), (6, 8), (8, 10)]
    crow = [(0, 2), (2, 3), (3, 5), (5, 6)]

    def load(r, comm):
        e = torch.zeros(rows[r][1] - rows[r][0], 4)
        c = torch.zeros(crow[r][1] - crow[r][0], 7, dtype=torch.bfloat16)
        sd = {"emb": sp.ShardedTensor("emb", e, [10, 4], [rows[r][0], 0]),
              "col": sp.ShardedTensor("col", c, [6, 7], [crow[r][0], 0])}
        sp.load(sd, dcp_dir, comm, allow_unexpected_keys=True)
        return e, c

    out = run_ranks(4, load)
    assert torch.equal(torch.cat([o[0] for o in out]), G["emb"])
    assert torch.equal(torch.cat([o[1] for o in out]).view(torch.int16), G["col"].view(torch.int16))


def test_reads_only_the_needed_bytes(dcp_dir):
    x = torch.zeros(2, 4)
    res = sp.load({"emb": sp.ShardedTensor("emb", x, [10, 4], [5, 0])}, dcp_dir, sp.single(),
                  allow_unexpected_keys=True, cooperative=False)
    assert torch.equal(x, G["emb"][5:7])
    assert res.bytes_read == 2 * 4 * 4


def test_bytes_item_is_what_dcp_stored(dcp_dir):
    sd = {"extra": b""}
    sp.load(sd, dcp_dir, sp.single(), allow_unexpected_keys=True, raw_objects=True)
    # torch 1.13 DCP stores a byte item with torch.save: its bytes load back.
    value = torch.load(io.BytesIO(sd["extra"]))
    assert value.getvalue() == b"dcp-bytes-item"


def test_missing_key_is_a_typed_error(dcp_dir):
    with pytest.raises(sp.NotFoundError, match="nope"):
        sp.load({"nope": torch.zeros(1)}, dcp_dir, sp.single())


def cli():
    """The shardpoint CLI: bundled in an installed package, built beside the
    package (a build tree), or on PATH."""
    from conftest import package_dir
    from shardpoint import _cli
    for path in (_cli.binary(), os.path.join(os.path.dirname(package_dir()), "shardpoint")):
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return shutil.which("shardpoint")


def test_real_dcp_loads_what_convert_to_dcp_wrote(dcp_dir, tmp_path, request):
    # Once (not per fixture layout): two gloo processes cost seconds.
    if request.node.callspec.params["dcp_dir"] != (3, False):
        pytest.skip("runs once, on the 3-rank fixture")
    exe = cli()
    if exe is None:
        pytest.skip("no shardpoint CLI: not in the package, beside it, nor on PATH")
    # A shardpoint checkpoint in a layout DCP never saw: emb rows 0:7 | 7:10,
    # col columns 0:4 | 4:7, from 2 ranks.
    spd = str(tmp_path / "sp")
    rows, cols = [(0, 7), (7, 10)], [(0, 4), (4, 7)]

    def save(r, comm):
        (r0, r1), (c0, c1) = rows[r], cols[r]
        sd = {"emb": sp.ShardedTensor("emb", G["emb"][r0:r1].clone(), [10, 4], [r0, 0]),
              "col": sp.ShardedTensor("col", G["col"][:, c0:c1].contiguous(), [6, 7], [0, c0]),
              "bias": G["bias"], "ids": G["ids"]}
        sp.save(sd, spd, comm)

    run_ranks(2, save)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    for src, dst in ((spd, a), (dcp_dir, b)):  # b: DCP -> DCP keeps the byte item
        r = subprocess.run([exe, "convert", "--to", "dcp", "--torch", "1.13", src, dst],
                           capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "(PyTorch DCP)" in r.stdout
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers", "dcp_load.py")
    r = subprocess.run([PYTHON, script, str(free_port()), "2", a, "+" + b], capture_output=True,
                       text=True, env=subprocess_env(), timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "dcp_load: ok" in r.stdout
