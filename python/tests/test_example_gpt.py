"""examples/train_gpt.py: one process trains a GPT-like model (tied embeddings,
dropout, AdamW, OneCycleLR, batches from the RNG), checkpoints at step 6; a fresh
process resumes from it: the losses of steps 7..12 and the final parameters are
bit for bit those of the uninterrupted run."""

import json
import os
import subprocess

from conftest import PYTHON, REPO, subprocess_env

EXAMPLE = os.path.join(REPO, "examples", "train_gpt.py")


def run(tmp_path, name, *args):
    log = tmp_path / f"{name}.json"
    cmd = [PYTHON, EXAMPLE, "--steps", "12", "--ckpt", str(tmp_path / "ckpt"), "--log", str(log),
           *args]
    p = subprocess.run(cmd, env=subprocess_env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=180)
    assert p.returncode == 0, p.stdout
    with open(log) as f:
        return json.load(f), p.stdout


def test_resume_in_a_fresh_process_is_bit_for_bit(tmp_path):
    full, _ = run(tmp_path, "full", "--save-at", "6")
    resumed, out = run(tmp_path, "resumed", "--resume")
    assert "resumed from" in out and resumed["start"] == 6
    assert sorted(int(k) for k in resumed["losses"]) == list(range(7, 13))
    for step, loss in resumed["losses"].items():
        assert loss == full["losses"][step], step  # float.hex(): exact
    assert resumed["digest"] == full["digest"]
    first, last = (float.fromhex(full["losses"][s]) for s in ("1", "12"))
    assert last < first  # it learns
