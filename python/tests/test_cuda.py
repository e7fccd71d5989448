"""CUDA tensors are saved through a reusable pinned host pool and loaded back to
the device. Needs a GPU (skipped otherwise, with the reason)."""

import threading

import pytest
import torch

import shardpoint as sp
from conftest import run_ranks
from shardpoint import _staging

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device on this machine")


def test_cuda_round_trip_and_pool_reuse(ckpt, tmp_path):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, 33, generator=g).to(torch.bfloat16).cuda()
    view = torch.randn(8, 16, generator=g).cuda().t()  # non-contiguous
    def halves(t):  # both TP pieces of "s" (one process holds the whole tensor)
        return [sp.column_parallel("s", t[:32], [64, 33], 0, 2),
                sp.column_parallel("s", t[32:], [64, 33], 1, 2)]

    sp.save({"w": w, "v": view, "st": halves(w)}, ckpt)
    before = _staging.pool_bytes()
    sp.save({"w": w, "v": view, "st": halves(w)}, tmp_path / "again")
    assert _staging.pool_bytes() == before  # reused
    w2 = torch.zeros_like(w)
    v2 = torch.zeros(16, 8, device="cuda")
    s2 = torch.zeros_like(w)
    sp.load({"w": w2, "v": v2, "st": halves(s2)}, ckpt)
    assert torch.equal(w2, w) and torch.equal(v2, view) and torch.equal(s2, w)
    # a load into shapes no save pinned stages in pageable memory: the pool does not grow
    w3 = torch.zeros(64, 33, dtype=torch.bfloat16, device="cuda")
    sp.load({"st": [sp.chunk("s", w3[:, :17], [64, 33], 1, 0, 2),
                    sp.chunk("s", w3[:, 17:], [64, 33], 1, 1, 2)]}, ckpt,
            allow_unexpected_keys=True)
    assert torch.equal(w3, w) and _staging.pool_bytes() == before
    # allow_missing_keys: a key the checkpoint lacks keeps its device values
    keep = torch.full((3,), 5.0, device="cuda")
    w4 = torch.zeros_like(w)
    r = sp.load({"w": w4, "absent": keep}, ckpt, strict=False)
    assert "absent" in r.missing_keys and torch.equal(keep, torch.full((3,), 5.0, device="cuda"))
    assert torch.equal(w4, w)
    cpu = torch.zeros(64, 33, dtype=torch.bfloat16)
    sp.load({"w": cpu}, ckpt, strict=False)
    assert torch.equal(cpu, w.cpu())


def test_cuda_async_save(ckpt):
    w = torch.arange(1000, dtype=torch.float32, device="cuda")
    h = sp.save_async({"w": w}, ckpt)
    w.fill_(-1)  # staged: the save holds the old values
    h.wait()
    out = torch.zeros(1000)
    sp.load({"w": out}, ckpt)
    assert torch.equal(out, torch.arange(1000, dtype=torch.float32))


def test_cuda_load_copies_group_by_group(ckpt, monkeypatch):
    # small groups: each copied to the GPU while C++ reads the next; some tensors in
    # pooled pinned buffers (the shapes saved), the resharded ones in pageable memory
    monkeypatch.setattr(_staging, "GROUP_BYTES", 3000)
    g = torch.Generator().manual_seed(5)
    src = {f"w{i}": torch.randn(24, 16 + i, generator=g).cuda() for i in range(8)}
    sp.save(src, ckpt)
    halves = {k: [torch.zeros(12, v.shape[1], device="cuda") for _ in range(2)]
              for k, v in src.items() if k in ("w1", "w6")}
    dst = {k: torch.zeros_like(v) for k, v in src.items() if k not in halves}
    state = dict(dst)
    for k, (a, b) in halves.items():
        shape = list(src[k].shape)
        state[k] = [sp.chunk(k, a, shape, 0, 0, 2), sp.chunk(k, b, shape, 0, 1, 2)]
    sp.load(state, ckpt)
    for k, v in dst.items():
        assert torch.equal(v, src[k]), k
    for k, (a, b) in halves.items():
        assert torch.equal(torch.cat([a, b]), src[k]), k


def test_cuda_cooperative_load_copies_every_group_once(ckpt, monkeypatch):
    # Two thread ranks over a C++ comm (cooperative): rows saved, columns loaded
    # into CUDA tensors, one tensor per group, each group copied once, as the
    # rounds complete it.
    monkeypatch.setattr(_staging, "GROUP_BYTES", 5000)
    announced, lock = {}, threading.Lock()
    announce = _staging.DeviceStaging.on_group_loaded

    def spy(self, g):
        with lock:
            announced.setdefault(id(self), []).append(g)
        announce(self, g)

    monkeypatch.setattr(_staging.DeviceStaging, "on_group_loaded", spy)
    g = torch.Generator().manual_seed(6)
    full = {f"w{i}": torch.randn(64, 40, generator=g).cuda() for i in range(6)}
    run_ranks(2, lambda r, c: sp.save(
        {k: sp.chunk(k, v[32 * r:32 * (r + 1)].clone(), [64, 40], 0, r, 2)
         for k, v in full.items()}, ckpt, c))
    outs = [{k: torch.zeros(64, 20, device="cuda") for k in full} for _ in range(2)]
    run_ranks(2, lambda r, c: sp.load(
        {k: sp.chunk(k, outs[r][k], [64, 40], 1, r, 2) for k in full}, ckpt, c,
        cooperative=True))
    assert len(announced) == 2 and all(sorted(v) == list(range(6)) for v in announced.values())
    for r in range(2):
        for k, v in full.items():
            assert torch.equal(outs[r][k], v[:, 20 * r:20 * (r + 1)]), (r, k)


def test_cuda_reserve_pins_what_the_first_saves_need(ckpt, tmp_path):
    # shapes no other test here uses: the pool grows by exactly this state
    g = torch.Generator().manual_seed(7)
    src = {f"r{i}": torch.randn(40 + i, 24, generator=g).to(torch.bfloat16).cuda()
           for i in range(4)}
    before = _staging.pool_bytes()
    saver = sp.AsyncSaver(reserve=src)
    pinned = _staging.pool_bytes()
    assert pinned - before == sum(v.numel() * v.element_size() for v in src.values())
    sp.save(src, ckpt)
    saver.save(src, tmp_path / "async").wait()
    assert _staging.pool_bytes() == pinned  # neither first save pinned more
    for path in (ckpt, tmp_path / "async"):
        dst = {k: torch.zeros_like(v) for k, v in src.items()}
        sp.load(dst, path)
        for k in src:
            assert torch.equal(dst[k], src[k]), (path, k)


def test_all_or_nothing_on_the_device(ckpt):
    """A checksum mismatch leaves CUDA tensors as they were with all_or_nothing."""
    src = torch.arange(4096, dtype=torch.float32).cuda()
    sp.save({"a": src, "b": src * 2}, ckpt)
    c = sp.metadata(ckpt).tensors["b"].chunks[0]
    import os
    with open(os.path.join(ckpt, c.file), "r+b") as f:
        f.seek((c.begin + c.end) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 1]))
    a, b = torch.zeros(4096, device="cuda"), torch.zeros(4096, device="cuda")
    with pytest.raises(sp.DataLossError):
        sp.load({"a": a, "b": b}, ckpt, all_or_nothing=True, io_threads=1)
    assert not a.any() and not b.any()
    sp.load({"a": a}, ckpt, all_or_nothing=True, allow_unexpected_keys=True)
    assert torch.equal(a, src) and a.device.type == "cuda"
