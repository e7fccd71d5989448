"""FSDP2 (torch 2.x `fully_shard`, DTensor parameters and AdamW state) saved with
`shardpoint.torch.TrainState` and resumed under another FSDP2 world size, under
FSDP2 over tensor parallelism (2 x 2, `_StridedShard`) and in one unsharded
process, bit for bit; and the same from FSDP2 over tensor parallelism. Needs torch >= 2.6: skipped on this project's
machines (Debian's torch 1.13), run on a GPU machine by tests/gpu/run.sh."""

import os
import sys

import pytest
import torch

import shardpoint.torch as spt
from conftest import free_port, run_python, torch_has

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "workers", "fsdp2_worker.py")
sys.path.insert(0, os.path.join(HERE, "workers"))


pytestmark = pytest.mark.skipif(
    not torch_has(2, 6, "torch.distributed.fsdp.fully_shard"), reason=f"needs torch >= 2.6's FSDP2 (this is torch {torch.__version__})")


def _worker(*args):
    assert "fsdp2_worker: ok" in run_python(WORKER, *args)


# saved from plain FSDP2 (2 ranks), or from FSDP2 over TP (2 x 2: _StridedShard on the
# column-parallel weight); resumed by 3 FSDP2 ranks (10 rows: 4, 4, 2), by FSDP2 over TP
# (2 x 2) and, with no FSDP, by one process whose plain model and optimizer get the full
# tensors
@pytest.mark.parametrize("mode, ranks", [("save", 2), ("save2d", 4)], ids=["fsdp2", "fsdp2_tp"])
def test_fsdp2_resumes_under_another_layout(tmp_path, mode, ranks):  # pragma: no cover
    from fsdp2_worker import build
    ckpt, ref = tmp_path / "ckpt", tmp_path / "ref.pt"
    _worker(mode, ckpt, ranks, free_port(), ref)
    _worker("load", ckpt, 3, free_port(), ref)
    _worker("load2d", ckpt, 4, free_port(), ref)
    model = build()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    spt.TrainState(model, opt, rng=False).load(ckpt)
    want = torch.load(ref, weights_only=True)
    for name, p in model.named_parameters():
        assert torch.equal(p.detach(), want[name]), name
        assert torch.equal(opt.state[p]["exp_avg"], want[f"{name}.exp_avg"]), name
        assert torch.equal(opt.state[p]["exp_avg_sq"], want[f"{name}.exp_avg_sq"]), name
