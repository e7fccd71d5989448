"""Layouts from torch's own sharded types, with no layout written by hand.

ShardedTensor (torch.distributed._shard, torch 1.13 here) runs for real: gloo
processes save with one world size and ChunkShardingSpec and load with
another. DTensor needs torch >= 2.4 and is skipped on older torch."""

import os
import subprocess

import pytest
import torch

import shardpoint as sp
import shardpoint.torch as spt
from conftest import PYTHON, subprocess_env

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers",
                      "sharded_tensor_worker.py")


def _run(mode, ckpt, world, w_dim, v_dim, tmp_path):
    init = tmp_path / f"init_{mode}_{world}"
    procs = [subprocess.Popen([PYTHON, WORKER, mode, ckpt, str(r), str(world), str(init),
                               str(w_dim), str(v_dim)], env=subprocess_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and f"ok {r}" in out, out


def _global(name):
    import importlib.util
    spec = importlib.util.spec_from_file_location("stw", WORKER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.global_tensor(name)


@pytest.mark.parametrize("save,load", [((2, 0, 1), (3, 1, 0))])
def test_sharded_tensor_reshards_across_world_sizes_and_specs(tmp_path, save, load):
    ckpt = str(tmp_path / "ckpt")
    _run("save", ckpt, *save, tmp_path)
    _run("load", ckpt, *load, tmp_path)
    # and one process reads the global tensors whole
    w = torch.zeros(12, 6, dtype=torch.bfloat16)
    v = torch.zeros(5, 7, dtype=torch.bfloat16)
    sp.load({"w": w, "nested": {"v": v}}, ckpt)
    assert torch.equal(w.view(torch.int16), _global("w").view(torch.int16))
    assert torch.equal(v.view(torch.int16), _global("v").view(torch.int16))


def _has_dtensor():
    try:
        from torch.distributed.tensor import DTensor  # noqa: F401
    except ImportError:
        return False
    return tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 4)


DTENSOR_SKIP = pytest.mark.skipif(
    not _has_dtensor(), reason=f"DTensor needs torch >= 2.4 (this is torch {torch.__version__})")


@DTENSOR_SKIP
def test_dtensor_placements_map_to_layouts(tmp_path):  # pragma: no cover - torch >= 2.4
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/init", rank=0,
                            world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1, 1))
        g = torch.arange(35, dtype=torch.float32).reshape(5, 7)
        d = distribute_tensor(g, mesh, [Shard(0), Replicate()])
        sp.save({"d": d}, tmp_path / "c")
        out = torch.zeros(5, 7)
        sp.load({"d": out}, tmp_path / "c")
        assert torch.equal(out, g)
        st = spt.torch_layouts.from_torch("d", d) if hasattr(spt, "torch_layouts") else None
        assert st is None or st.keys == ["d"]
    finally:
        dist.destroy_process_group()


def test_torch_types_recognised_by_class():
    from shardpoint import torch_layouts
    assert not torch_layouts.is_torch_sharded(torch.zeros(2))
    st = torch_layouts.from_torch("x", torch.zeros(2, 3))
    assert st.keys == ["x"]
