"""CheckpointManager: iteration directories, `latest`, resume, retention, the lock."""

import os
import socket

import numpy as np
import pytest
import torch

import shardpoint as sp
from conftest import run_ranks


def state(seed):
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(64, 8, generator=g), "step": seed}


def test_save_resume_and_tracker(tmp_path):
    with sp.CheckpointManager(tmp_path) as m:
        assert m.resume(state(0)) == (None, None)
        for it in (10, 20):
            stats = m.save(state(it), it, common={"it": it})
            assert stats.bytes_written > 0
        assert m.iterations() == [10, 20] and m.latest() == 20 and m.tracker() == 20
        assert m.path_for(20) == os.path.join(str(tmp_path), "iter_0000020")
        out = state(0)
        it, res = m.resume(out)
        assert it == 20 and res.common == {"it": 20}
        assert torch.equal(out["w"], state(20)["w"]) and out["step"] == 20


def test_resume_ignores_killed_save(tmp_path):
    with sp.CheckpointManager(tmp_path) as m:
        m.save(state(1), 1)
        # a save killed before its commit: data files, no manifest
        killed = tmp_path / "iter_0000002" / "data"
        killed.mkdir(parents=True)
        (killed / "0.safetensors").write_bytes(b"\0" * 100)
        assert m.latest() == 1
        out = state(0)
        assert m.resume(out)[0] == 1
        assert torch.equal(out["w"], state(1)["w"])


def test_keep_last_never_removes_newest(tmp_path):
    with sp.CheckpointManager(tmp_path, keep_last=2) as m:
        for it in range(1, 6):
            m.save(state(it), it)
        assert m.iterations() == [4, 5]
        assert sorted(os.listdir(tmp_path)) == [".lock", "iter_0000004", "iter_0000005",
                                                "latest"]


def test_save_async_updates_tracker_after_commit(tmp_path):
    with sp.CheckpointManager(tmp_path) as m:
        sd = state(7)
        expected = sd["w"].clone()
        h = m.save_async(sd, 7)
        sd["w"].fill_(-1)  # staged: does not change the checkpoint
        h.wait()
        assert m.tracker() == 7
        h2 = m.save_async(state(8), 8, saver=sp.AsyncSaver())
        # close() waits for the save in flight
    assert h2.done() and h2.wait().bytes_written > 0
    with sp.CheckpointManager(tmp_path) as m:
        assert m.tracker() == 8
        out = state(0)
        m.resume(out, common=False)
        assert torch.equal(out["w"], state(8)["w"])
        out = state(0)
        sp.load(out, m.path_for(7))
        assert torch.equal(out["w"], expected)


def test_async_error_surfaces_at_wait_and_close(tmp_path):
    m = sp.CheckpointManager(tmp_path)
    m.save(state(1), 1)
    h = m.save_async(state(1), 1)  # iter_0000001 exists and overwrite is off
    with pytest.raises(sp.FailedPreconditionError, match="already exists"):
        h.wait()
    assert m.tracker() == 1
    h = m.save_async(state(1), 1)
    with pytest.raises(sp.FailedPreconditionError, match="already exists"):
        m.close()
    with pytest.raises(sp.FailedPreconditionError, match="closed"):
        m.latest()


def test_lock_rejects_second_job(tmp_path):
    with sp.CheckpointManager(tmp_path):
        with pytest.raises(sp.FailedPreconditionError, match=r"\.lock"):
            sp.CheckpointManager(tmp_path)
        sp.CheckpointManager(tmp_path, lock=False).close()  # explicitly unlocked
    sp.CheckpointManager(tmp_path).close()  # released


def test_close_releases_the_lock_while_a_traceback_holds_the_manager(tmp_path):
    m = sp.CheckpointManager(tmp_path)
    try:
        m.save(state(1), -1)
    except sp.InvalidArgumentError as e:
        err = e  # its traceback's frames still reference the manager
    assert err.__traceback__ is not None
    m.close()
    sp.CheckpointManager(tmp_path).close()  # the lock is free at once


def test_lock_left_by_an_earlier_life_of_this_pid_is_taken_over(tmp_path):
    """A restarted container: same host, same pid, no live holder."""
    (tmp_path / ".lock").write_text(f"pid {os.getpid()} host {socket.gethostname()}\n")
    sp.CheckpointManager(tmp_path).close()


def test_bad_arguments(tmp_path):
    with pytest.raises(sp.InvalidArgumentError, match="keep_last"):
        sp.CheckpointManager(tmp_path, keep_last=-1)
    with sp.CheckpointManager(tmp_path) as m:
        with pytest.raises(sp.InvalidArgumentError, match="iteration"):
            m.path_for(-3)


def test_ranks_resume_under_another_split(tmp_path):
    """4 ranks save a row-sharded tensor; 2 ranks resume it under another split."""
    full = np.random.default_rng(3).standard_normal((8, 6)).astype(np.float32)

    def save_rank(r, comm):
        with sp.CheckpointManager(tmp_path, comm, keep_last=1) as m:
            for it in (100, 200):
                shard = np.ascontiguousarray(full[2 * r:2 * r + 2] * (it // 100))
                m.save({"w": sp.ShardedTensor("w", shard, (8, 6), (2 * r, 0))}, it)

    run_ranks(4, save_rank)

    def load_rank(r, comm):
        with sp.CheckpointManager(tmp_path, comm) as m:
            out = np.zeros((8, 3), np.float32)
            it, _ = m.resume({"w": sp.ShardedTensor("w", out, (8, 6), (0, 3 * r))})
            return it, out

    results = run_ranks(2, load_rank)
    assert sorted(os.listdir(tmp_path)) == ["iter_0000200", "latest"]  # lock released
    for r, (it, out) in enumerate(results):
        assert it == 200
        np.testing.assert_array_equal(out, full[:, 3 * r:3 * r + 3] * 2)
