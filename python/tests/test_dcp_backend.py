"""shardpoint.dcp with torch 1.13's real DCP (torch.distributed._shard.checkpoint):
ShardedTensors saved by 2 gloo processes with the shardpoint StorageWriter form
a shardpoint checkpoint (verify, metadata, sp.load accept it) that 3 processes
load with the StorageReader bit for bit; the reader also reads plain DCP
directories and checkpoints written by sp.save."""

import io
import os
import sys

import pytest
import torch

import shardpoint as sp
from conftest import PYTHON, free_port, subprocess_env

spdcp = pytest.importorskip("shardpoint.dcp")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "workers"))
from dcp_save import globals_  # noqa: E402

G = globals_()
WORKER = os.path.join(HERE, "workers", "spdcp_worker.py")


def run(*args):
    import subprocess
    r = subprocess.run([PYTHON, *map(str, args)], capture_output=True, text=True,
                       env=subprocess_env(), timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr


def cause(excinfo):
    """The shardpoint error inside DCP's CheckpointException (rank 0's)."""
    e = excinfo.value
    failures = getattr(e, "failures", None)
    if failures:
        first = failures[min(failures)]
        return first[0] if isinstance(first, tuple) else first
    return e


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("spdcp") / "ckpt")
    run(WORKER, "save", free_port(), 2, d)
    return d


def test_writer_makes_a_shardpoint_checkpoint(written):
    assert not os.path.exists(os.path.join(written, ".metadata"))  # not DCP's format
    report = sp.verify(written)
    assert report.ok and report.chunks_checked >= 6 and report.objects_checked == 2
    assert "shardpoint.dcp" in sp.inspect(written)  # the writer's metadata
    md = sp.metadata(written)
    assert md.metadata["dcp"]["writer"] == spdcp.WRITER_TAG
    assert {k: t.shape for k, t in md.tensors.items()} == {k: tuple(v.shape) for k, v in G.items()}
    assert len(md.tensors["emb"].chunks) == 2 and len(md.tensors["col"].chunks) == 2
    sd = {k: torch.zeros_like(v) for k, v in G.items()}
    res = sp.load(sd, written, sp.single(), allow_unexpected_keys=True)
    assert sorted(res.unexpected_keys) == ["extra", "step"]
    assert all(same(sd[k], v) for k, v in G.items())
    values = sp.read(written)
    assert torch.load(io.BytesIO(values["extra"])).getvalue() == b"dcp-bytes-item"


def test_two_ranks_to_three_bit_for_bit(written):
    run(WORKER, "load", free_port(), 3, written, "--step")


def test_a_rank_that_cannot_prepare_fails_every_rank(tmp_path):
    d = str(tmp_path / "bad")
    run(WORKER, "save-bad", free_port(), 2, d)
    with pytest.raises(sp.NotFoundError):
        sp.metadata(d)


def test_reads_plain_dcp_directory(tmp_path):
    d = str(tmp_path / "dcp")
    run(os.path.join(HERE, "workers", "dcp_save.py"), d, 3, free_port())
    assert os.path.exists(os.path.join(d, ".metadata"))
    run(WORKER, "load", free_port(), 2, d)


def test_reads_sp_save_checkpoint_values_in_process(tmp_path):
    d = str(tmp_path / "c")
    sp.save({"w": G["emb"], "lrs": [0.5, 0.25], "name": "x"}, d, sp.single())
    sd = {"w": torch.zeros(10, 4), "lrs": None, "name": None}
    spdcp._D.module.load_state_dict(sd, spdcp.StorageReader(d), no_dist=True)
    assert same(sd["w"], G["emb"]) and sd["lrs"] == [0.5, 0.25] and sd["name"] == "x"


def test_writer_in_process_and_overwrite(tmp_path):
    d = str(tmp_path / "c")
    dcp = spdcp._D.module
    dcp.save_state_dict({"w": G["col"]}, spdcp.StorageWriter(d, sp.single()), no_dist=True)
    with pytest.raises(spdcp._D.module.CheckpointException) as e:
        dcp.save_state_dict({"w": G["col"]}, spdcp.StorageWriter(d, sp.single()), no_dist=True)
    assert isinstance(cause(e), sp.FailedPreconditionError) and "exists" in str(cause(e))
    dcp.save_state_dict({"w": G["emb"]}, spdcp.StorageWriter(d, sp.single(), overwrite=True),
                        no_dist=True)
    sd = {"w": torch.zeros(10, 4)}
    dcp.load_state_dict(sd, spdcp.StorageReader(d), no_dist=True)
    assert same(sd["w"], G["emb"])


def test_flipped_byte_is_a_checksum_error(tmp_path):
    d = str(tmp_path / "c")
    dcp = spdcp._D.module
    dcp.save_state_dict({"w": G["emb"]}, spdcp.StorageWriter(d, sp.single()), no_dist=True)
    chunk = sp.metadata(d).tensors["w"].chunks[0]
    with open(os.path.join(d, chunk.file), "r+b") as f:
        f.seek(chunk.begin + 5)
        b = f.read(1)
        f.seek(chunk.begin + 5)
        f.write(bytes([b[0] ^ 0x10]))
    sd = {"w": torch.zeros(10, 4)}
    with pytest.raises(spdcp._D.module.CheckpointException) as e:
        dcp.load_state_dict(sd, spdcp.StorageReader(d), no_dist=True)
    assert isinstance(cause(e), sp.DataLossError) and "checksum" in str(cause(e))
    dcp.load_state_dict(sd, spdcp.StorageReader(d, verify_checksums=False), no_dist=True)
    assert not same(sd["w"], G["emb"])  # the flipped byte, read unchecked
