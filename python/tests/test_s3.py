"""The Python package on s3:// paths, against a real Ceph radosgw.

Runs where SHARDPOINT_S3_SERVER_DIR names a directory started with
`tests/s3/radosgw.sh start DIR` (ctest's s3_python_check does this, under the
s3_server fixture); elsewhere the tests that need it are skipped, saying so. The
in-process tests pass the server's endpoint and keys as `storage_options`
only (the process has no AWS environment variables for them), so they prove
the per-call options; the multi-process save uses the environment instead.
"""

import os
import subprocess
import uuid

import numpy as np
import pytest

import shardpoint as sp
from conftest import PYTHON, free_port, run_ranks, subprocess_env

SERVER_DIR = os.environ.get("SHARDPOINT_S3_SERVER_DIR", "")
WORKERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers")


def _server_env():
    env_file = os.path.join(SERVER_DIR, "env")
    if not SERVER_DIR or not os.path.isfile(env_file):
        return None
    env = {}
    with open(env_file) as f:
        for line in f:
            k, _, v = line.strip().removeprefix("export ").partition("=")
            if k:
                env[k] = v
    return env


SERVER = _server_env()
needs_server = pytest.mark.skipif(
    SERVER is None, reason="no radosgw: run `ctest -R s3_python_check` (fixture s3_server), or "
    "set SHARDPOINT_S3_SERVER_DIR to a directory started with tests/s3/radosgw.sh start DIR")


@pytest.fixture
def opts():
    return {"endpoint_url": SERVER["AWS_ENDPOINT_URL"], "region_name": SERVER["AWS_REGION"],
            "addressing_style": "path", "aws_access_key_id": SERVER["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": SERVER["AWS_SECRET_ACCESS_KEY"]}


@pytest.fixture
def url():
    """A fresh prefix in the server's bucket."""
    return f"s3://{SERVER['SHARDPOINT_S3_BUCKET']}/py/{uuid.uuid4().hex[:12]}"


def _g(rows, cols, seed):
    return np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)


@needs_server
def test_four_ranks_save_three_load_resharded_bit_for_bit(opts, url):
    # 4 thread ranks row-split G (1.5 MiB: several 1 MiB blocks and chunks per
    # file) and 3 load it column-split: every rank reads pieces of every file.
    g = _g(96, 4095, 1)
    path = f"{url}/ckpt"

    def save(rank, comm):
        rows = 96 // 4
        return sp.save({"w": sp.column_parallel("w", g[rank * rows:(rank + 1) * rows].copy(),
                                                g.shape, rank, 4),
                        "step": sp.ShardedObject("step", 100)}, path, comm,
                       common={"lr": 0.1}, storage_options=opts)

    run_ranks(4, save)

    def load(rank, comm):
        cols = 4095 // 3
        start = rank * cols
        out = np.zeros((96, cols), dtype=np.float32)
        sd = {"w": sp.row_parallel("w", out, g.shape, rank, 3),
              "step": sp.ShardedObject("step")}
        res = sp.load(sd, path, comm, storage_options=opts)
        np.testing.assert_array_equal(out, g[:, start:start + cols])
        assert sd["step"].value == 100 and res.common == {"lr": 0.1}
        return res.bytes_read

    assert sum(run_ranks(3, load)) >= g.nbytes
    assert sp.verify(path, storage_options=opts).ok
    md = sp.metadata(path, storage_options=opts)
    assert md.tensors["w"].shape == (96, 4095) and len(md.files) == 4
    assert "w    F32    96x4095" in sp.inspect(path, storage_options=opts)
    whole = sp.read(path, storage_options=opts, backend="numpy")
    np.testing.assert_array_equal(whole["w"], g)
    got = dict(sp.iter_tensors(path, storage_options=opts, backend="numpy", max_bytes=1 << 20))
    np.testing.assert_array_equal(got["w"], g)


@needs_server
def test_async_save_and_errors(opts, url):
    g = _g(8, 300, 2)
    path = f"{url}/a"
    saver = sp.AsyncSaver()
    h = saver.save({"x": g}, path, sp.single(), storage_options=opts)
    h.wait()
    out = np.zeros_like(g)
    sp.load({"x": out}, path, sp.single(), storage_options=opts)
    np.testing.assert_array_equal(out, g)
    # a second save to a committed prefix: refused, nothing changed
    with pytest.raises(sp.FailedPreconditionError):
        sp.save({"x": g + 1}, path, sp.single(), storage_options=opts)
    with pytest.raises(sp.FailedPreconditionError, match="rename"):
        sp.save({"x": g + 1}, path, sp.single(), overwrite=True, storage_options=opts)
    sp.load({"x": out}, path, sp.single(), storage_options=opts)
    np.testing.assert_array_equal(out, g)
    with pytest.raises(sp.NotFoundError):
        sp.metadata(f"{url}/absent", storage_options=opts)
    # wrong secret: a permission error, the secret in no message
    bad = dict(opts, aws_secret_access_key="not-the-secret-" + "x" * 24)
    with pytest.raises(sp.Error) as e:
        sp.metadata(path, storage_options=bad)
    assert "permission denied" in str(e.value) and "not-the-secret" not in str(e.value)


def test_storage_options_are_checked():
    with pytest.raises(sp.InvalidArgumentError, match="unknown key.*'endpoint'"):
        sp.metadata("s3://b/p", storage_options={"endpoint": "http://127.0.0.1:1"})
    with pytest.raises(sp.InvalidArgumentError, match="addressing 'sideways'"):
        sp.metadata("s3://b/p", storage_options={"addressing_style": "sideways",
                                                 "aws_access_key_id": "k",
                                                 "aws_secret_access_key": "s"})


@needs_server
def test_manager_and_train_state(opts, url):
    import torch

    import shardpoint.torch as spt
    torch.manual_seed(5)
    model = torch.nn.Linear(16, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 16)).sum().backward()
    opt.step()
    state = spt.TrainState(model, opt, comm=sp.single(), extra={"step": 0})
    with sp.CheckpointManager(f"{url}/run", sp.single(), keep_last=2,
                              storage_options=opts) as m:
        for it in (10, 20, 30):
            state.extra["step"] = it
            m.save(state.state_dict(), it)
        assert m.iterations() == [20, 30] and m.latest() == 30 and m.tracker() == 30
        # the lease: a second manager on the root is refused while this one holds it
        with pytest.raises(sp.FailedPreconditionError):
            sp.CheckpointManager(f"{url}/run", sp.single(), storage_options=opts)
    fresh = torch.nn.Linear(16, 8)
    fresh_opt = torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
    state2 = spt.TrainState(fresh, fresh_opt, comm=sp.single(), extra={"step": -1})
    with sp.CheckpointManager(f"{url}/run", sp.single(), storage_options=opts) as m:
        it, _ = state2.resume(m)
    assert it == 30 and state2.extra["step"] == 30
    for a, b in zip(model.parameters(), fresh.parameters()):
        assert torch.equal(a, b)
    buf = opt.state_dict()["state"][0]["momentum_buffer"]
    assert torch.equal(fresh_opt.state_dict()["state"][0]["momentum_buffer"], buf)
    # TrainState.save / load straight to a prefix
    state.save(f"{url}/ts", storage_options=opts)
    state2.load(f"{url}/ts", storage_options=opts)
    assert state2.extra["step"] == 30


@needs_server
def test_gloo_processes_save_threads_load_resharded(opts, url):
    # 2 torch.distributed (gloo) processes save through the default storage
    # (the AWS environment variables); 3 thread ranks load row-split.
    import sys
    sys.path.insert(0, WORKERS)
    from s3_gloo_worker import COLS, ROWS, global_tensor
    path = f"{url}/gloo"
    env = subprocess_env()
    env.update(SERVER)
    port = free_port()
    procs = [subprocess.Popen([PYTHON, os.path.join(WORKERS, "s3_gloo_worker.py"), path,
                               str(r), "2", str(port)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    g = global_tensor()

    def load(rank, comm):
        rows = ROWS // 3
        out = np.zeros((rows, COLS), dtype=np.float32)
        sd = {"w": sp.column_parallel("w", out, [ROWS, COLS], rank, 3)}
        res = sp.load(sd, path, comm, storage_options=opts, strict=False)
        np.testing.assert_array_equal(out, g[rank * rows:(rank + 1) * rows])
        return res.common

    assert run_ranks(3, load) == [{"step": 7}] * 3
    values = sp.read(path, storage_options=opts)["rank_value"]
    assert values == {0: {"rank": 0}, 1: {"rank": 1}}


def test_dcp_reader_accepts_an_s3_checkpoint_id():
    # torch's dcp.load picks a reader by validate_checkpoint_id: an s3:// prefix
    # has no local directory, and must still be accepted.
    spdcp = pytest.importorskip("shardpoint.dcp")
    assert spdcp.StorageReader.validate_checkpoint_id("s3://bucket/run/iter_1")
    assert not spdcp.StorageReader.validate_checkpoint_id("/nonexistent/dir")
