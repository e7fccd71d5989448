"""examples/train_tp.py: train on 4 processes (TP 2 x DP 2), save every 4 steps with
save_async, resume on 2 processes under other splits, compare the loss trajectories."""

import json
import os
import shutil
import subprocess

import pytest

from conftest import PYTHON, REPO, subprocess_env

EXAMPLE = os.path.join(REPO, "examples", "train_tp.py")
STEPS, SAVE_EVERY = 8, 4


def train(tmp_path, name, *args):
    log = tmp_path / f"{name}.json"
    cmd = [PYTHON, EXAMPLE, "--steps", str(STEPS), "--ckpt", str(tmp_path / "ckpt"), "--log",
           str(log), *args]
    p = subprocess.run(cmd, env=subprocess_env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=180)
    assert p.returncode == 0, p.stdout
    with open(log) as f:
        return {int(k): v for k, v in json.load(f)["losses"].items()}, p.stdout


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("train_tp")
    losses, out = train(tmp, "full", "--nproc", "4", "--tp", "2", "--save-every",
                        str(SAVE_EVERY))
    assert sorted(losses) == list(range(1, STEPS + 1))
    assert losses[STEPS] < losses[1]  # it learns
    assert "last checkpoint" in out
    return tmp, losses


def resumed(uninterrupted, *args):
    tmp, full = uninterrupted
    ckpt = tmp / "ckpt" / f"iter_{SAVE_EVERY:07d}"
    assert (ckpt / "manifest").exists()
    losses, out = train(tmp, "resume" + "_".join(args), "--resume", str(ckpt), *args)
    assert f"resumed from {ckpt} at step {SAVE_EVERY}" in out
    assert sorted(losses) == list(range(SAVE_EVERY + 1, STEPS + 1))
    return full, losses


def test_resume_on_2_processes_tp1_dp2(uninterrupted):
    full, losses = resumed(uninterrupted, "--nproc", "2", "--tp", "1")
    for s, v in losses.items():  # TP 1 sums the matmuls in another order: float tolerance
        assert abs(v - full[s]) <= 1e-5 * abs(full[s]), (s, v, full[s])


def test_resume_on_2_processes_tp2_dp1(uninterrupted):
    full, losses = resumed(uninterrupted, "--nproc", "2", "--tp", "2")
    for s, v in losses.items():
        assert abs(v - full[s]) <= 1e-5 * abs(full[s]), (s, v, full[s])


def test_resume_same_layout_is_bitwise(uninterrupted):
    full, losses = resumed(uninterrupted, "--nproc", "4", "--tp", "2")
    assert losses == {s: full[s] for s in losses}


def test_resume_latest_with_retention(uninterrupted, tmp_path):
    """--resume latest: the manager picks the newest complete checkpoint (step 8);
    the run continues to step 10 saving at 10 and keeps only the newest one."""
    tmp, _ = uninterrupted
    root = tmp_path / "ckpt"
    shutil.copytree(tmp / "ckpt", root)  # the other tests still need iter_0000004
    losses, out = train(tmp_path, "latest", "--nproc", "2", "--tp", "2", "--steps", "10",
                        "--resume", "latest", "--save-every", "5", "--keep-last", "1")
    assert f"resumed from {root / f'iter_{STEPS:07d}'} at step {STEPS}" in out
    assert sorted(losses) == [9, 10]
    assert sorted(d for d in os.listdir(root) if d.startswith("iter_")) == ["iter_0000010"]
    assert (root / "latest").read_text().strip() == "10"
