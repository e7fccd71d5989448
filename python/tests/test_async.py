"""save_async: stall only for the copy, wait()/done(), errors at wait(), reuse."""

import os
import time

import numpy as np
import pytest
import torch

import shardpoint as sp
from conftest import run_ranks


def test_save_async_round_trip(ckpt):
    w = torch.arange(1 << 16, dtype=torch.float32)
    sd = {"w": w, "bf": w[:100].to(torch.bfloat16).reshape(10, 10).t(), "step": 3}
    h = sp.save_async(sd, ckpt, common={"step": 3})
    w.fill_(-1)  # the state was staged: changing it now does not change the checkpoint
    stats = h.wait()
    assert h.done() and stats.bytes_written >= w.numel() * 4
    assert h.staged_bytes >= w.numel() * 4 and h.stall_seconds >= 0
    assert h.wait().bytes_written == stats.bytes_written  # same result every time
    out = {"w": torch.zeros(1 << 16), "bf": torch.zeros(10, 10, dtype=torch.bfloat16),
           "step": 0}
    r = sp.load(out, ckpt)
    assert torch.equal(out["w"], torch.arange(1 << 16, dtype=torch.float32))
    assert torch.equal(out["bf"], torch.arange(100.0).to(torch.bfloat16).reshape(10, 10).t())
    assert out["step"] == 3 and r.common == {"step": 3}


def test_done_polls_and_wait_timeout(ckpt):
    h = sp.save_async({"w": np.ones(1000)}, ckpt)
    deadline = time.monotonic() + 30
    while not h.done():
        assert time.monotonic() < deadline
        time.sleep(0.001)
    h.wait(timeout=5)


def test_error_comes_at_wait(ckpt):
    sp.save({"w": torch.ones(1)}, ckpt)
    h = sp.save_async({"w": torch.ones(1)}, ckpt)  # no overwrite: fails in the background
    with pytest.raises(sp.FailedPreconditionError, match="already exists"):
        h.wait()
    with pytest.raises(sp.FailedPreconditionError):
        h.wait()
    # errors in the Python part come at once
    with pytest.raises(sp.PickleNotAllowedError):
        sp.save_async({"x": object()}, ckpt + "x")


def test_saver_reuses_pool_and_plan(tmp_path):
    saver = sp.AsyncSaver()
    w = torch.zeros(1000)
    handles = []
    for i in range(3):
        w.fill_(float(i))
        handles.append(saver.save({"w": w, "i": i}, tmp_path / f"iter_{i}"))
    saver.wait()
    assert all(h.done() for h in handles)
    assert saver.plan_cache.hits == 2 and saver.plan_cache.misses == 1
    assert saver.pool_bytes >= 4000
    for i in range(3):
        out = {"w": torch.zeros(1000), "i": -1}
        sp.load(out, tmp_path / f"iter_{i}")
        assert out["i"] == i and (out["w"] == i).all()


def test_reserve_ahead_of_the_first_save(tmp_path):
    sd = {"w": torch.arange(300000, dtype=torch.float32), "b": torch.ones(7, 3, dtype=torch.bfloat16),
          "note": "objects are not staged in the pool"}
    need = sp.AsyncSaver(reserve=sd).pool_bytes
    assert 300000 * 4 + 42 <= need < 300000 * 4 + (3 << 20)  # 2 MiB rounding
    saver = sp.AsyncSaver(reserve=sd)
    assert saver.pool_bytes == need and isinstance(saver.pool_huge_pages, bool)
    for i in range(2):
        h = saver.save(sd, tmp_path / f"r{i}")
        assert not h.pool_grew and saver.pool_bytes == need
        h.wait()
    cold = sp.AsyncSaver()
    assert cold.pool_bytes == 0
    assert cold.save(sd, tmp_path / "c0").pool_grew
    assert not cold.save(sd, tmp_path / "c1").pool_grew
    cold.wait()
    out = {"w": torch.zeros(300000), "b": torch.zeros(7, 3, dtype=torch.bfloat16), "note": ""}
    sp.load(out, tmp_path / "r1")
    assert torch.equal(out["w"], sd["w"]) and out["note"] == sd["note"]
    assert saver.reserve(1) == need  # a pool already that large is kept


def test_reserve_beyond_the_bound(tmp_path):
    saver = sp.AsyncSaver(max_staging_bytes=4 << 20)
    with pytest.raises(sp.FailedPreconditionError, match="max_staging_bytes"):
        saver.reserve(5 << 20)
    assert saver.pool_bytes == 0
    assert saver.reserve({"w": torch.zeros(1000)}) == 2 << 20
    h = saver.save({"w": torch.zeros(2 << 20)}, tmp_path / "over")  # 8 MiB > bound
    with pytest.raises(sp.FailedPreconditionError, match="max_staging_bytes"):
        h.wait()
    assert saver.pool_bytes == 2 << 20 and not os.path.exists(tmp_path / "over" / "manifest")


def test_staging_bound(tmp_path):
    saver = sp.AsyncSaver(max_staging_bytes=1024)
    h = saver.save({"w": torch.zeros(1000)}, tmp_path / "c")
    with pytest.raises(sp.Error, match="staging|1024"):
        h.wait()


def test_async_ranks_as_threads(ckpt):
    g = torch.arange(64, dtype=torch.float64).reshape(8, 8)

    def save(r, comm):
        saver = sp.AsyncSaver()
        local = g.chunk(4, 1)[r].clone()
        h = saver.save({"w": sp.row_parallel("w", local, [8, 8], r, 4),
                        "rng": sp.ShardedObject("rng", [r, r], index=(r,), grid=(4,))},
                       ckpt, comm)
        local.zero_()
        return h.wait().bytes_written

    assert len(set(run_ranks(4, save))) == 1
    x = torch.zeros(8, 8, dtype=torch.float64)
    objs = [sp.ShardedObject("rng", None, index=(r,), grid=(4,)) for r in range(4)]
    sp.load({"w": x, "o": objs}, ckpt)
    assert torch.equal(x, g) and [o.value for o in objs] == [[r, r] for r in range(4)]
    assert os.path.exists(os.path.join(ckpt, "manifest"))


def test_log_lines(tmp_path):
    lines = []
    sp.save({"w": torch.ones(3)}, tmp_path / "a", log=lines.append)
    h = sp.save_async({"w": torch.ones(3)}, tmp_path / "b", log=lines.append)
    h.wait()

    def broken(line):
        raise RuntimeError("ignored")

    sp.save({"w": torch.ones(3)}, tmp_path / "c", log=broken)
    assert len(lines) == 3, lines  # saved a; b staged; b saved
    assert "saved checkpoint" in lines[0] and "/a'" in lines[0]
    assert "async save" in lines[1] and "saved checkpoint" in lines[2] and "/b'" in lines[2]
