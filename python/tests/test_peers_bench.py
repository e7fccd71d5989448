"""bench/peers_bench.py keeps working: a tiny run (4 ranks, one layer, one repetition) of
every peer and operation, every load checked bit for bit by the benchmark itself. No
timing is asserted; the figures come from the full-size command in docs/performance.md."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from conftest import PYTHON, REPO, subprocess_env

BENCH = os.path.join(REPO, "bench", "peers_bench.py")
sys.path.insert(0, os.path.join(REPO, "bench"))

from peers import state as S  # noqa: E402


def test_tiny_run_of_every_peer(tmp_path):
    out = tmp_path / "results.json"
    cmd = [PYTHON, BENCH, "--gib", "0.001", "--layers", "1", "--reps", "1", "--ranks", "4",
           "--drop", "files", "--dir", str(tmp_path / "ckpt"), "--json", str(out)]
    p = subprocess.run(cmd, env=subprocess_env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    assert p.returncode == 0, p.stdout
    with open(out) as f:
        res = json.load(f)
    ops = {(r["peer"], r["op"]) for r in res["records"]}
    peers = ["shardpoint", "torch.save", "numpy .npy", "PyTorch DCP", "memcpy"]
    peers += ["fio"] if shutil.which("fio") else []
    for peer in peers:
        assert (peer, "save") in ops and (peer, "same") in ops, (peer, sorted(ops))
        if peer not in ("fio", "memcpy"):
            assert (peer, "reshard") in ops, peer
        assert f"| {peer} |" in p.stdout, p.stdout
    for r in res["records"]:
        assert len(r["ranks"]) == 4 and r["seconds"] > 0
        if r["op"] != "save" and r["peer"] != "fio":
            assert all(x["needed"] > 0 for x in r["ranks"]), r
    # every rank of a resharded torch.save load reads every rank's file whole
    rchar = [r for r in res["records"] if r["peer"] == "torch.save" and r["op"] == "reshard"][0]
    assert sum(x["rchar"] for x in rchar["ranks"]) > 3.5 * sum(x["needed"] for x in rchar["ranks"])
    assert not os.listdir(tmp_path / "ckpt")  # cleaned up without --keep


def test_a_wrong_value_fails_the_check():
    specs = S.model_specs(64, 1, 4)
    spec = [s for s in specs if s.key.endswith("linear_fc2.weight")][0]
    t = torch.zeros(spec.local_shape("reshard", 4), dtype=spec.dtype)
    S.fill(spec, "reshard", 2, 4, t)
    S.check(spec, "reshard", 2, 4, t)
    with pytest.raises(AssertionError, match="linear_fc2.weight"):
        S.check(spec, "reshard", 1, 4, t)  # another rank's piece
    t.view(-1)[17] += 1
    with pytest.raises(AssertionError, match="rank 2: 'decoder.layers.0.mlp.linear_fc2.weight'"):
        S.check(spec, "reshard", 2, 4, t)


def test_reshard_cuts_every_matrix_on_its_other_axis():
    for s in S.model_specs(64, 1, 4):
        same, other = s.dims["same"], s.dims["reshard"]
        if s.dims["same"] is None or len(s.shape) == 1:
            assert other == same, s.key
        else:
            assert {same, other} == {0, 1}, s.key
