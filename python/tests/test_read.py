"""Reading a checkpoint without a template: metadata, read, iter_tensors, verify, inspect.

The checkpoint is written by two ranks with TP layouts (a column-parallel
bf16 weight, a fused QKV stored as components, a row-parallel weight) plus
per-rank values, common state and metadata; one process reads it back whole."""

import os

import numpy as np
import pytest
import torch

import shardpoint as sp
from conftest import run_ranks

G = {}


def _globals():
    if not G:
        g = torch.Generator().manual_seed(11)
        G["w"] = torch.randn(8, 6, generator=g).to(torch.bfloat16)
        G["row"] = torch.randn(4, 10, generator=g)
        for n in "qkv":
            G[n] = torch.randn(6, 4, generator=g, dtype=torch.float64)
        G["step"] = torch.tensor(7, dtype=torch.int64)
    return G


@pytest.fixture
def saved(ckpt):
    g = _globals()

    def rank(r, comm):
        qkv = torch.cat([g[n].chunk(2, 0)[r] for n in "qkv"])
        sd = {"w": sp.column_parallel("model.w", g["w"].chunk(2, 0)[r].clone(), [8, 6], r, 2),
              "row": sp.row_parallel("model.row", g["row"].chunk(2, 1)[r].clone(), [4, 10], r, 2),
              "qkv": sp.fused([sp.FusedPart(f"model.{n}", [6, 4]) for n in "qkv"], qkv, 0, r, 2),
              "step": g["step"].clone(),
              "rng": sp.ShardedObject("rng", {"rank": r}, index=(r,), grid=(2,)),
              "pp": sp.ShardedObject("pp", 10 + r, index=(0, r), grid=(1, 2)),
              "cfg": {"lr": 0.5, "name": "tiny"}}
        sp.save(sd, ckpt, comm, common={"iteration": 3}, metadata={"run": "read-test"})

    run_ranks(2, rank)
    return ckpt


def _bits(t):
    return t.reshape(-1).contiguous().view(torch.uint8)


def test_metadata(saved):
    md = sp.metadata(saved)
    assert sorted(md.tensors) == ["model.k", "model.q", "model.row", "model.v", "model.w", "step"]
    w = md.tensors["model.w"]
    assert (w.dtype, w.shape, len(w.chunks), w.nbytes) == ("BF16", (8, 6), 2, 8 * 6 * 2)
    assert sorted(c.offset for c in w.chunks) == [(0, 0), (4, 0)]
    assert all(c.shape == (4, 6) and c.end - c.begin == 48 and c.file in md.files
               for c in w.chunks)
    assert md.tensors["model.row"].chunks[1].offset == (0, 5)
    assert md.tensors["step"].shape == ()
    objs = {(o.key, o.index) for o in md.objects}
    assert {("rng", (0,)), ("rng", (1,)), ("cfg.lr", ()), ("cfg.name", ())} <= objs
    assert md.has_common and md.common_bytes > 0
    assert md.metadata == {"run": "read-test"}
    assert md.nbytes == sum(t.nbytes for t in md.tensors.values())


def test_read_everything_whole(saved):
    g = _globals()
    out = sp.read(saved)
    assert torch.equal(_bits(out["model.w"]), _bits(g["w"]))
    assert out["model.w"].dtype == torch.bfloat16
    assert torch.equal(out["model.row"], g["row"])
    for n in "qkv":
        assert torch.equal(out[f"model.{n}"], g[n])
    assert out["step"].shape == () and out["step"].item() == 7
    # one value per rank: keyed by the rank itself; a grid of more dims by tuples
    assert out["rng"] == {0: {"rank": 0}, 1: {"rank": 1}}
    assert out["rng"][0] == {"rank": 0}
    assert out["pp"] == {(0, 0): 10, (0, 1): 11}
    assert out["cfg.lr"] == 0.5 and out["cfg.name"] == "tiny"
    assert out["<common>"] == {"iteration": 3}


def test_read_numpy_backend_and_keys(saved):
    g = _globals()
    out = sp.read(saved, keys=["model.w", "model.q"], objects=False, backend="numpy")
    assert sorted(out) == ["model.q", "model.w"]
    assert out["model.w"].dtype == np.uint16  # bfloat16 bits
    assert np.array_equal(out["model.w"], g["w"].view(torch.int16).numpy().view(np.uint16))
    assert np.array_equal(out["model.q"], g["q"].numpy())
    with pytest.raises(sp.NotFoundError, match="no tensors \\['nope'\\]"):
        sp.read(saved, keys=["nope"])


def test_read_memory_bound_and_iterator(saved, monkeypatch):
    with pytest.raises(sp.InvalidArgumentError, match="more than max_bytes=100; .*iter_tensors"):
        sp.read(saved, max_bytes=100)
    from shardpoint import _read
    groups = []
    real = _read._load_tensors

    def spy(path, infos, *rest):
        groups.append(sum(i.nbytes for i in infos))
        return real(path, infos, *rest)

    monkeypatch.setattr(_read, "_load_tensors", spy)
    whole = sp.read(saved, objects=False)
    groups.clear()
    got = dict(sp.iter_tensors(saved, max_bytes=200))
    assert list(got) == sorted(whole)
    for k, t in got.items():
        assert torch.equal(_bits(t), _bits(whole[k])), k
    assert len(groups) > 1 and all(n <= 200 for n in groups)


def test_verify_and_inspect(saved):
    r = sp.verify(saved)
    assert r.ok and r.tensors == 6 and r.chunks_checked >= 10 and r.objects_checked >= 4
    text = sp.inspect(saved)
    assert "model.w" in text and "BF16" in text and "8x6" in text and "read-test" in text
    # flip one byte of model.w's first chunk
    c = sp.metadata(saved).tensors["model.w"].chunks[0]
    with open(os.path.join(saved, c.file), "r+b") as f:
        f.seek(c.begin)
        b = f.read(1)
        f.seek(c.begin)
        f.write(bytes([b[0] ^ 0xFF]))
    r = sp.verify(saved)
    assert not r.ok and len(r.faults) == 1
    fault = r.faults[0]
    assert (fault.kind, fault.key, fault.file, fault.begin, fault.end) == (
        "chunk", "model.w", c.file, c.begin, c.end)
    with pytest.raises(sp.DataLossError, match="model.w"):
        sp.read(saved)


def test_verify_knobs_and_their_deprecated_old_names(saved):
    """io_threads= / read_slice_bytes= are the names load uses; the old threads= /
    slice_bytes= still work, with a DeprecationWarning, and may not be mixed with them."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new names warn about nothing
        new = sp.verify(saved, io_threads=2, read_slice_bytes=7)
    assert new.ok and new.bytes_checked > 7
    with pytest.warns(DeprecationWarning, match="threads= is deprecated; use io_threads="):
        old = sp.verify(saved, threads=2)
    assert old.ok and old.bytes_checked == new.bytes_checked
    with pytest.warns(DeprecationWarning, match="slice_bytes= is deprecated; use read_slice_bytes="):
        old = sp.verify(saved, slice_bytes=7)
    assert old.ok and (old.chunks_checked, old.bytes_checked) == (new.chunks_checked,
                                                                   new.bytes_checked)
    with pytest.raises(TypeError, match="io_threads"):
        sp.verify(saved, io_threads=2, threads=2)
    with pytest.raises(TypeError, match="read_slice_bytes"):
        sp.verify(saved, read_slice_bytes=7, slice_bytes=7)


def test_missing_checkpoint_is_file_not_found(tmp_path):
    for fn in (sp.metadata, sp.read, sp.verify, sp.inspect):
        with pytest.raises(FileNotFoundError):
            fn(tmp_path / "nothing")
