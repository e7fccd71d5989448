"""shardpoint.dcp with torch 2.x's real DCP (`torch.distributed.checkpoint.save`,
`async_save`, `load`; DTensors on a CPU device mesh, gloo processes): saved by 4
ranks with the StorageWriter, loaded by 3 with the StorageReader bit for bit;
the reader also reads FileSystemWriter's directories. Needs torch >= 2.4:
skipped on this project's machines (Debian's torch 1.13); written for the GPU
machine (tests/gpu/run.sh), where it has not run yet."""

import os
import sys

import pytest

import shardpoint as sp
from conftest import free_port, run_python, torch_has

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "workers", "spdcp2_worker.py")
sys.path.insert(0, os.path.join(HERE, "workers"))

pytestmark = pytest.mark.skipif(
    not torch_has(2, 4, "torch.distributed.checkpoint", "torch.distributed.tensor.DTensor"),
    reason="needs torch >= 2.4's DCP and DTensor")


def _worker(*args):
    out = run_python(WORKER, *args)
    assert "spdcp2_worker: ok" in out, out


@pytest.mark.parametrize("how", [[], ["--async"], ["--checkpoint-id"]],
                         ids=["save", "async_save", "checkpoint_id"])
def test_four_ranks_to_three(tmp_path, how):  # pragma: no cover - torch >= 2.4
    d = str(tmp_path / "ckpt")
    _worker("save", d, 4, free_port(), *how)
    assert sp.verify(d).ok
    assert sp.metadata(d).metadata["dcp"]["writer"] == "shardpoint.dcp"
    _worker("load", d, 3, free_port(), "--values")


def test_reads_filesystem_writer_directory(tmp_path):  # pragma: no cover - torch >= 2.4
    d = str(tmp_path / "dcp")
    run_python(os.path.join(HERE, "workers", "dcp2_worker.py"), "save", d, 4, free_port())
    _worker("load", d, 3, free_port())
