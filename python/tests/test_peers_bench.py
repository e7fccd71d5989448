"""bench/peers_bench.py keeps working: a tiny run (4 ranks, one layer, one repetition) of
every peer and operation, every load checked bit for bit by the benchmark itself. No
timing is asserted; the figures come from the full-size command in
docs/performance.md#how-to-run-the-benchmarks."""

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
            assert (peer, "tp_dp") in ops and (peer, "other_dim") in ops, peer
        assert f"| {peer} |" in p.stdout, p.stdout
    if "fio" in peers:
        assert "| fio, barrier to barrier |" in p.stdout, p.stdout
    # memory touched and freed before each op: twice the state by default (--preback)
    assert res["info"]["preback_bytes"] == int(2 * res["info"]["state_bytes"] / 2**30 * 2**30)
    for r in res["records"]:
        assert len(r["ranks"]) == 4 and r["seconds"] > 0
        assert all(x["system_seconds"] >= 0 and x["user_seconds"] >= 0 for x in r["ranks"]), r
        if r["op"] != "save" and r["peer"] != "fio":
            assert all(x["needed"] > 0 for x in r["ranks"]), r
        if r["op"] != "save" and r["peer"] == "shardpoint":  # every rank's own split
            assert all(0 < x["engine_seconds"] <= x["call_seconds"] for x in r["ranks"]), r
    assert "| seconds in the engine / in the whole load call, slowest rank |" in p.stdout
    # a torch.save load reads whole files: every rank's file for another dim (4x what it
    # needs), two for TP 2 x DP 2 (all it needs, plus replicated norms and pickle framing)
    def rchar_per_needed(op):
        rec = [r for r in res["records"] if r["peer"] == "torch.save" and r["op"] == op][0]
        return sum(x["rchar"] for x in rec["ranks"]) / sum(x["needed"] for x in rec["ranks"])
    assert 3.5 < rchar_per_needed("other_dim") < 4.5
    assert 0.95 < rchar_per_needed("tp_dp") < 1.5
    assert not os.listdir(tmp_path / "ckpt")  # cleaned up without --keep


def test_a_wrong_value_fails_the_check():
    specs = S.model_specs(64, 1, 4)
    spec = [s for s in specs if s.key.endswith("linear_fc2.weight")][0]
    t = torch.zeros(spec.local_shape("other_dim", 4), dtype=spec.dtype)
    S.fill(spec, "other_dim", 2, 4, t)
    S.check(spec, "other_dim", 2, 4, t)
    with pytest.raises(AssertionError, match="linear_fc2.weight"):
        S.check(spec, "other_dim", 1, 4, t)  # another rank's piece
    t.view(-1)[17] += 1
    with pytest.raises(AssertionError, match="rank 2: 'decoder.layers.0.mlp.linear_fc2.weight'"):
        S.check(spec, "other_dim", 2, 4, t)


def test_layouts():
    for s in S.model_specs(64, 1, 4):
        same, other = s.dims["same"], s.dims["other_dim"]
        if s.dims["same"] is None or len(s.shape) == 1:
            assert other == same, s.key
        else:
            assert {same, other} == {0, 1}, s.key
        # TP 2 x DP 2: ranks 1 and 3 hold the same piece, the half ranks 0 and 1 of TP 4 held
        assert s.box("tp_dp", 1, 4) == s.box("tp_dp", 3, 4)
        if same is not None:
            lo, hi = s.box("tp_dp", 1, 4)[same]
            assert (lo, hi) == (s.box("same", 2, 4)[same][0], s.box("same", 3, 4)[same][1])


def test_ops_runs_only_the_operations_asked_for(tmp_path):
    out = tmp_path / "results.json"
    cmd = [PYTHON, BENCH, "--gib", "0.001", "--layers", "1", "--reps", "2", "--ranks", "2",
           "--drop", "files", "--dir", str(tmp_path / "ckpt"), "--json", str(out),
           "--peers", "shardpoint;shardpoint, io_threads 1;torch.save", "--ops", "save"]
    p = subprocess.run(cmd, env=subprocess_env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    assert p.returncode == 0, p.stdout
    with open(out) as f:
        res = json.load(f)
    got = sorted({(r["peer"], r["op"], r["rep"]) for r in res["records"]})
    assert got == [(peer, "save", rep) for peer in ("shardpoint", "shardpoint, io_threads 1",
                                                    "torch.save") for rep in (0, 1)], got
    assert "CPU seconds of all ranks (per GiB of state) | save |\n|---|---|\n" in p.stdout, p.stdout  # one column


@pytest.mark.parametrize("ops, message", [
    ("save;sideways", "unknown operation 'sideways' (--ops takes: save;same;tp_dp;other_dim)"),
    ("same;tp_dp", "--ops needs save: every load reads what the repetition saved"),
])
def test_bad_ops_are_refused(ops, message):
    p = subprocess.run([PYTHON, BENCH, "--ops", ops], env=subprocess_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    assert p.returncode == 2, p.stdout
    assert message in p.stdout, p.stdout


def test_negative_preback_is_refused():
    p = subprocess.run([PYTHON, BENCH, "--preback", "-1"], env=subprocess_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    assert p.returncode == 2, p.stdout
    assert "--preback wants GiB >= 0, got -1" in p.stdout, p.stdout


def test_a_peer_without_a_cuda_version_is_refused():
    p = subprocess.run([PYTHON, BENCH, "--device", "cuda", "--peers", "shardpoint;numpy .npy"],
                       env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=60)
    assert p.returncode == 2, p.stdout
    assert "peer 'numpy .npy' has no CUDA version" in p.stdout, p.stdout


def test_a_cuda_only_variant_is_refused_on_the_cpu():
    p = subprocess.run([PYTHON, BENCH, "--peers", "shardpoint;shardpoint, pinned loads"],
                       env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=60)
    assert p.returncode == 2, p.stdout
    assert "peer 'shardpoint, pinned loads' runs with --device cuda only" in p.stdout, p.stdout


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_tiny_cuda_run_of_every_peer(tmp_path):  # pragma: no cover - needs a GPU (torch 2.x)
    out = tmp_path / "results.json"
    cmd = [sys.executable, BENCH, "--device", "cuda", "--gib", "0.001", "--layers", "1", "--reps", "1",
           "--ranks", "4", "--drop", "files", "--preback", "0", "--dir", str(tmp_path / "ckpt"),
           "--json", str(out)]
    p = subprocess.run(cmd, env=subprocess_env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=300)
    assert p.returncode == 0, p.stdout
    with open(out) as f:
        res = json.load(f)
    assert res["info"]["device"].startswith("cuda"), res["info"]
    ops = {(r["peer"], r["op"]) for r in res["records"]}
    for peer in ("shardpoint", "torch.save", "PyTorch DCP"):
        for op in ("save", "same", "tp_dp", "other_dim"):
            assert (peer, op) in ops, (peer, op, sorted(ops))


def test_the_report_sets_each_peers_first_repetition_apart():
    sys.argv = ["peers_bench.py"]
    import peers_bench as pb
    rec = lambda peer, op, rep, s: {"peer": peer, "op": op, "rep": rep, "seconds": s,  # noqa: E731
                                     "ranks": [{"rchar": 8, "read_bytes": 8, "needed": 8,
                                                "peak_rss_growth": 0}]}
    info = {"ranks": 4, "state_bytes": 2 * 10**9, "hidden": 64, "layers": 1, "tensors": 1,
            "reps": 3, "cache": "kept"}
    records = [rec("shardpoint", "same", 2, 1.0), rec("shardpoint", "same", 0, 4.0),
               rec("shardpoint", "same", 1, 2.0), rec("torch.save", "same", 0, 1.5)]
    out = pb.report({"info": info, "records": records})
    assert "| seconds, first rep / median of the later ones | load, same layout |" in out, out
    assert "| shardpoint | 4.00 / 1.50 |" in out, out
    assert "| torch.save |  |" in out, out  # one repetition: nothing to set apart
    one = pb.report({"info": dict(info, reps=1), "records": records[:1]})
    assert "first rep" not in one, one


def test_the_report_splits_shardpoints_load_calls_on_their_slowest_rank():
    sys.argv = ["peers_bench.py"]
    import peers_bench as pb
    ranks = lambda *pairs: [{"rchar": 8, "read_bytes": 8, "needed": 8,  # noqa: E731
                             "peak_rss_growth": 0, "engine_seconds": e, "call_seconds": c}
                            for e, c in pairs]
    records = [{"peer": "shardpoint", "op": "tp_dp", "rep": 0, "seconds": 2.0,
                "ranks": ranks((1.0, 1.2), (1.5, 1.9))},
               {"peer": "torch.save", "op": "tp_dp", "rep": 0, "seconds": 2.0,
                "ranks": [{"rchar": 8, "read_bytes": 8, "needed": 8, "peak_rss_growth": 0}]}]
    info = {"ranks": 4, "state_bytes": 2 * 10**9, "hidden": 64, "layers": 1, "tensors": 1,
            "reps": 1, "cache": "kept"}
    out = pb.report({"info": info, "records": records})
    assert "| seconds in the engine / in the whole load call, slowest rank | " \
           "load, TP=2 x DP=2 |" in out, out
    assert "| shardpoint | 1.50 / 1.90 |" in out, out  # rank 1: its call took longest
    assert "| torch.save |" not in out.split("in the whole load call")[1], out
