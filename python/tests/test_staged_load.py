"""A load of device tensors, end to end through C++'s tensor groups
(LoadOptions.tensor_groups / on_group_loaded) and the staging's copier thread,
run here on CPU tensors treated as device tensors (the real CUDA load is
test_cuda.py's, on the GPU machine): every group is announced in order and
copied while the next is read, the result is bit for bit, and a load that fails
stops the copier and raises."""

import os

import pytest
import torch

import shardpoint as sp
from conftest import run_ranks
from shardpoint import _checkpoint, _staging


class _Calls(list):
    """The announcements: (group, {pair index: host buffer}); `by`: the staging of each."""

    def __init__(self):
        super().__init__()
        self.by = []


@pytest.fixture
def staged(monkeypatch):
    """Every torch tensor goes through DeviceStaging; records the announced groups."""
    monkeypatch.setattr(_checkpoint, "is_device_tensor", lambda t: isinstance(t, torch.Tensor))
    monkeypatch.setattr(_staging, "GROUP_BYTES", 5000)
    class PageablePool(_staging._PinnedPool):  # pinning needs CUDA
        def new(self, like):
            self.bytes += like.numel() * like.element_size()
            return torch.empty(like.shape, dtype=like.dtype)

    monkeypatch.setattr(_staging, "_POOL", PageablePool())
    calls = _Calls()
    announce = _staging.DeviceStaging.on_group_loaded

    def spy(self, g):  # (g, {pair index: its host buffer now}) for the pairs of group g
        calls.append((g, {k: p[0].clone() for k, p in enumerate(self.pairs)
                          if p is not None and self._group[k] == g}))
        calls.by.append(self)
        announce(self, g)

    monkeypatch.setattr(_staging.DeviceStaging, "on_group_loaded", spy)
    return calls


def _state(seed):
    g = torch.Generator().manual_seed(seed)
    return {f"w{i}": torch.randn(16, 32 + i, generator=g) for i in range(6)}  # 2-2.7 KiB each


def test_groups_are_announced_in_order_and_the_load_is_bit_for_bit(staged, tmp_path):
    src = _state(1)
    sp.save(src, tmp_path / "c")
    dst = {k: torch.zeros_like(v) for k, v in src.items()}
    sp.load(dst, tmp_path / "c")
    assert [g for g, _ in staged] == [0, 1, 2]  # 5000-byte groups: two tensors each
    assert [sorted(bufs) for _, bufs in staged] == [[0, 1], [2, 3], [4, 5]]
    for _, bufs in staged:  # each group complete when announced
        for k, h in bufs.items():
            assert torch.equal(h, src[f"w{k}"]), k
    for k in src:
        assert torch.equal(dst[k], src[k]), k


def test_a_resharded_staged_load_across_ranks(staged, tmp_path):
    full = torch.randn(64, 48, generator=torch.Generator().manual_seed(2))
    run_ranks(2, lambda r, c: sp.save(
        {"w": sp.chunk("w", full[32 * r:32 * (r + 1)].clone(), [64, 48], 0, r, 2)},
        tmp_path / "c", c))
    outs = [torch.zeros(64, 24), torch.zeros(64, 24)]
    run_ranks(2, lambda r, c: sp.load({"w": sp.chunk("w", outs[r], [64, 48], 1, r, 2)},
                                      tmp_path / "c", c))
    assert torch.equal(torch.cat(outs, 1), full)


def test_a_failed_staged_load_raises_and_stops_the_copier(staged, tmp_path):
    src = _state(3)
    sp.save(src, tmp_path / "c")
    data = tmp_path / "c" / "data" / os.listdir(tmp_path / "c" / "data")[0]
    with open(data, "r+b") as f:  # one flipped byte in the last tensor
        f.seek(os.path.getsize(data) - 5)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 1]))
    dst = {k: torch.zeros_like(v) for k, v in src.items()}
    with pytest.raises(sp.DataLossError):
        sp.load(dst, tmp_path / "c")
    import threading
    assert not [t for t in threading.enumerate() if t.name == "shardpoint-h2d"]


def test_a_cooperative_staged_load_copies_every_group_once(staged, tmp_path):
    # Two thread ranks (a C++ comm: cooperative), rows saved, columns loaded:
    # each rank's 5 KiB tensors are groups of one, announced in the order the
    # rounds complete them, each complete when announced.
    g = torch.Generator().manual_seed(4)
    full = {f"w{i}": torch.randn(64, 40, generator=g) for i in range(6)}
    run_ranks(2, lambda r, c: sp.save(
        {k: sp.chunk(k, v[32 * r:32 * (r + 1)].clone(), [64, 40], 0, r, 2)
         for k, v in full.items()}, tmp_path / "c", c))
    outs = [{k: torch.zeros(64, 20) for k in full} for _ in range(2)]
    run_ranks(2, lambda r, c: sp.load(
        {k: sp.chunk(k, outs[r][k], [64, 40], 1, r, 2) for k in full}, tmp_path / "c", c,
        cooperative=True))
    for st in set(staged.by):
        groups = [gr for (gr, _), by in zip(staged, staged.by) if by is st]
        assert sorted(groups) == list(range(6))  # every group once
        assert st._arenas is None  # groups complete out of order: fresh buffers
    for (gr, bufs), st in zip(staged, staged.by):
        assert list(bufs) == [gr]  # pair k is w{k}, alone in group k
        h = bufs[gr]
        assert any(torch.equal(h, full[f"w{gr}"][:, 20 * r:20 * (r + 1)]) for r in range(2))
    assert len(set(staged.by)) == 2
    for r in range(2):
        for k, v in full.items():
            assert torch.equal(outs[r][k], v[:, 20 * r:20 * (r + 1)]), (r, k)


def test_reserve_pins_what_the_first_save_of_device_tensors_needs(staged, tmp_path):
    # AsyncSaver.reserve of a device state also fills the process's pool of
    # (pinned) host buffers, which sp.save and the saver's saves both take from:
    # neither first save pins anything more.
    src = _state(5)
    saver = sp.AsyncSaver(reserve=src)
    pinned = _staging.pool_bytes()
    assert pinned == sum(v.numel() * v.element_size() for v in src.values())
    sp.save(src, tmp_path / "c")
    saver.save(src, tmp_path / "d").wait()
    assert _staging.pool_bytes() == pinned
    for name in ("c", "d"):
        dst = {k: torch.zeros_like(v) for k, v in src.items()}
        sp.load(dst, tmp_path / name)
        for k in src:
            assert torch.equal(dst[k], src[k]), (name, k)


def _load_only(monkeypatch, src, path):
    """Loads ``path`` into zeros like ``src`` as a process that never saved: no
    free pooled buffer, so the groups' buffers are pageable. Returns the state."""
    monkeypatch.setattr(_staging, "_POOL", type(_staging._POOL)())
    dst = {k: torch.zeros_like(v) for k, v in src.items()}
    sp.load(dst, path, sp.single(), cooperative=False)
    return dst


def test_groups_take_turns_in_two_arenas(staged, monkeypatch, tmp_path):
    # 3 groups of two tensors: group 2 is read into group 0's memory, which the
    # copier has copied out by then
    src = _state(6)
    sp.save(src, tmp_path / "c")
    dst = _load_only(monkeypatch, src, tmp_path / "c")
    assert [sorted(bufs) for _, bufs in staged] == [[0, 1], [2, 3], [4, 5]]
    st = staged.by[0]
    assert st._arenas is not None and st._arenas.mapped_bytes == 2 * st._arenas.capacity
    for _, bufs in staged:  # each group complete when announced
        for k, h in bufs.items():
            assert torch.equal(h, src[f"w{k}"]), k
    for k in src:
        assert torch.equal(dst[k], src[k]), k


def test_a_slow_copier_holds_back_the_group_that_reuses_its_arena(staged, monkeypatch, tmp_path):
    # Were group 2 read before group 0 is copied out, w0 and w1 would hold
    # group 2's bytes.
    import time
    src = _state(7)
    sp.save(src, tmp_path / "c")
    copy = _staging.DeviceStaging._copy_group
    ptrs = {}

    def slow(self, g):
        time.sleep(0.3)
        ptrs.update({k: p[0].data_ptr() for k, p in enumerate(self.pairs) if p is not None})
        copy(self, g)

    monkeypatch.setattr(_staging.DeviceStaging, "_copy_group", slow)
    dst = _load_only(monkeypatch, src, tmp_path / "c")
    assert ptrs[0] == ptrs[4]  # w0 and w4: the same memory
    for k in src:
        assert torch.equal(dst[k], src[k]), k


def test_arenas_unless_values_are_kept_and_for_one_rank_whatever_cooperative_says(
        staged, monkeypatch, tmp_path):
    # one rank loads alone (C++ runs no cooperative load of one rank); a load
    # that keeps a missing key's values copies them in first: fresh buffers
    src = _state(8)
    sp.save(src, tmp_path / "c")
    monkeypatch.setattr(_staging, "_POOL", type(_staging._POOL)())
    for kw, arenas in (({"cooperative": True}, True), ({"strict": False}, False)):
        dst = {k: torch.zeros_like(v) for k, v in src.items()}
        sp.load(dst, tmp_path / "c", sp.single(), **kw)
        assert (staged.by[-1]._arenas is not None) == arenas, kw
        for k in src:
            assert torch.equal(dst[k], src[k]), (kw, k)
