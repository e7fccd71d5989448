"""shardpoint on a real network filesystem: sshfs (FUSE, SFTP over TCP) on
loopback, mounted by scripts/sshfs_mount.sh. Skipped where it cannot be
mounted (not root, no /dev/fuse, no sshfs or sshd; scripts/setup.sh installs
the packages).

Like NFS (.nfsXXXX), sshfs keeps a file removed while some process holds it
open under a hidden name (.fuse_hiddenXXXX), and removing that name makes
another: removing a directory holding one used to loop for ever, so an
overwrite or retention hung while, say, an evaluation job had a file of the
old checkpoint open. Each scenario runs in a child process (or rank threads)
under a timeout, so a hang is a failure, not a stuck suite.
"""

import json
import os
import shutil
import subprocess
import textwrap

import numpy as np
import pytest

import shardpoint as sp

from conftest import PYTHON, REPO, free_port, run_ranks, subprocess_env

SCRIPT = os.path.join(REPO, "scripts", "sshfs_mount.sh")


@pytest.fixture(scope="module")
def netfs(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root to mount sshfs")
    if not os.path.exists("/dev/fuse") or shutil.which("sshfs") is None \
            or not os.path.exists("/usr/sbin/sshd"):
        pytest.skip("needs /dev/fuse, sshfs and sshd (apt-get install sshfs openssh-server)")
    base = tmp_path_factory.mktemp("netfs")
    mnt = str(base / "mnt")
    up = subprocess.run(["bash", SCRIPT, "up", str(base / "export"), mnt, str(free_port())],
                        capture_output=True, text=True, timeout=120)
    if up.returncode != 0:
        pytest.skip(f"could not mount sshfs: {up.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["bash", SCRIPT, "down", mnt], capture_output=True, timeout=120)


def run_child(body, timeout=120):
    """Runs `body` (Python, with sp, np, json imported) in a child; returns what
    it prints as JSON on its last line."""
    code = "import json, os, sys, time, warnings\nimport numpy as np\nimport shardpoint as sp\n" \
        + textwrap.dedent(body)
    try:
        r = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True,
                           env=subprocess_env(), timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {timeout} s (a hang)")
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_overwrite_while_a_file_of_the_old_checkpoint_is_open(netfs):
    ck = os.path.join(netfs, "ck")
    out = run_child(f"""
        ck = {ck!r}
        rng = np.random.default_rng(7)
        a = {{"w": rng.standard_normal((64, 32), dtype=np.float32)}}
        b = {{"w": rng.standard_normal((64, 32), dtype=np.float32)}}
        c = {{"w": rng.standard_normal((64, 32), dtype=np.float32)}}
        sp.save(a, ck)
        held = open(os.path.join(ck, "data", "0.safetensors"), "rb")  # a reader elsewhere
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            st = sp.save(b, ck, overwrite=True)
        got = {{"w": np.zeros((64, 32), np.float32)}}
        sp.load(got, ck)
        first = dict(error=st.cleanup_error, warned=[str(w.message) for w in caught
                                                     if w.category is RuntimeWarning],
                     loads_b=bool(np.array_equal(got["w"].view(np.uint32), b["w"].view(np.uint32))),
                     old_manifest=os.path.exists(ck + ".old/manifest"))
        # Still held: the leftover is moved aside, the save goes on.
        st = sp.save(c, ck, overwrite=True)
        sp.load(got, ck)
        again = dict(error=st.cleanup_error, stale=sorted(n for n in os.listdir({netfs!r})
                                                          if n.startswith("ck.")),
                     loads_c=bool(np.array_equal(got["w"].view(np.uint32), c["w"].view(np.uint32))))
        held.close()
        # The filesystem drops the hidden name once it sees the close.
        for _ in range(200):
            if not any(n.startswith(".fuse_hidden") for n in os.listdir(ck + ".stale.1/data")):
                break
            time.sleep(0.05)
        st = sp.save(a, ck, overwrite=True)
        sp.load(got, ck)
        second = dict(error=st.cleanup_error, left=sorted(n for n in os.listdir({netfs!r})
                                                          if n.startswith("ck.")),
                      loads_a=bool(np.array_equal(got["w"].view(np.uint32), a["w"].view(np.uint32))))
        print(json.dumps(dict(first=first, again=again, second=second)))
    """)
    first, again, second = out["first"], out["again"], out["second"]
    # Committed and loads; the previous checkpoint is left, named, not a checkpoint.
    assert first["loads_b"]
    assert not first["old_manifest"]
    assert ck + ".old" in first["error"]
    assert ".fuse_hidden" in first["error"]
    assert "still not empty after 3 passes" in first["error"]
    assert len(first["warned"]) == 1 and first["error"] in first["warned"][0]
    # While it is held, the next overwrite moves the leftover aside and commits.
    assert again == dict(error="", stale=["ck.stale.1"], loads_c=True)
    # Once the file is closed, the next overwrite removes every leftover.
    assert second == dict(error="", left=[], loads_a=True)


def test_retention_while_a_file_of_an_old_checkpoint_is_open(netfs):
    root = os.path.join(netfs, "run")
    out = run_child(f"""
        root = {root!r}
        s = {{"w": np.arange(1000, dtype=np.float32)}}
        with sp.CheckpointManager(root, keep_last=1) as m:
            m.save(s, 1)
            held = open(os.path.join(m.path_for(1), "data", "0.safetensors"), "rb")
            try:
                m.save(s, 2)
                err = None
            except sp.Error as e:
                err = (type(e).__name__, str(e))
            latest = m.latest()
        print(json.dumps(dict(err=err, latest=latest,
                              manifest_1=os.path.exists(os.path.join(root, "iter_0000001", "manifest")))))
    """)
    assert out["err"] is not None, "retention cannot remove iteration 1 while it is open"
    name, message = out["err"]
    assert name == "IOFailureError"
    assert "committed" in message and "retention failed" in message
    assert ".fuse_hidden" in message
    assert out["latest"] == 2
    assert not out["manifest_1"]  # removed first: never a manifest without its data


def test_resharded_load_and_verify_on_the_network_filesystem(netfs):
    ck = os.path.join(netfs, "tp")
    full = np.random.default_rng(3).standard_normal((256, 96), dtype=np.float32)
    run_ranks(4, lambda r, comm: sp.save(
        {"w": sp.chunk("w", full[64 * r:64 * (r + 1)], [256, 96], 0, r, 4)}, ck, comm))
    got = [np.zeros((256, 48), np.float32) for _ in range(2)]
    run_ranks(2, lambda r, comm: sp.load(
        {"w": sp.chunk("w", got[r], [256, 96], 1, r, 2)}, ck, comm))
    for r in range(2):
        assert np.array_equal(got[r].view(np.uint32), full[:, 48 * r:48 * (r + 1)].view(np.uint32))
    assert sp.verify(ck).ok
