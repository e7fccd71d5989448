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


@needs_server
def test_https_with_the_ca_bundle_option_and_untrusted_without(opts, url):
    https = dict(opts, endpoint_url=SERVER["SHARDPOINT_S3_HTTPS_ENDPOINT"],
                 ca_bundle=SERVER["SHARDPOINT_S3_CA_BUNDLE"])
    g = _g(64, 512, 9)
    sp.save({"x": g}, f"{url}/tls", sp.single(), storage_options=https)
    out = np.zeros_like(g)
    sp.load({"x": out}, f"{url}/tls", sp.single(), storage_options=https)
    assert np.array_equal(out, g)
    untrusted = dict(https)
    del untrusted["ca_bundle"]
    with pytest.raises(sp.FailedPreconditionError, match="is not trusted"):
        sp.metadata(f"{url}/tls", storage_options=untrusted)


def test_storage_options_are_checked():
    with pytest.raises(sp.InvalidArgumentError, match="unknown key.*'endpoint'"):
        sp.metadata("s3://b/p", storage_options={"endpoint": "http://127.0.0.1:1"})
    with pytest.raises(sp.InvalidArgumentError, match="addressing 'sideways'"):
        sp.metadata("s3://b/p", storage_options={"addressing_style": "sideways",
                                                 "aws_access_key_id": "k",
                                                 "aws_secret_access_key": "s"})
    for bad in ({"multipart_chunksize": 0}, {"max_concurrency": "4"},
                {"max_pool_connections": True}, {"multipart_chunksize": 2.5e7}):
        key = next(iter(bad))
        with pytest.raises(sp.InvalidArgumentError, match=f"'{key}'.*positive int"):
            sp.metadata("s3://b/p", storage_options=bad)
    with pytest.raises(sp.InvalidArgumentError, match="part size 1048576 bytes"):
        sp.metadata("s3://b/p", storage_options={"multipart_chunksize": 1 << 20,
                                                 "aws_access_key_id": "k",
                                                 "aws_secret_access_key": "s"})


@needs_server
def test_part_size_and_concurrency_options_shape_the_upload(opts, url):
    import boto3
    # A 12 MiB file: one PUT at the default 16 MiB parts, 3 parts at 5 MiB
    # (a multipart object's ETag ends in "-<parts>").
    g = _g(3 * 1024, 1024, 2)
    client = boto3.client("s3", endpoint_url=opts["endpoint_url"], region_name=opts["region_name"],
                          aws_access_key_id=opts["aws_access_key_id"],
                          aws_secret_access_key=opts["aws_secret_access_key"])
    bucket = url[len("s3://"):].split("/", 1)[0]
    for name, extra, suffix in (("default", {}, None),
                                ("small", {"multipart_chunksize": 5 << 20, "max_concurrency": 2,
                                           "max_pool_connections": 3}, "-3")):
        path = f"{url}/{name}"
        o = dict(opts, **extra)
        sp.save({"w": g}, path, storage_options=o)
        back = {"w": np.zeros_like(g)}
        sp.load(back, path, storage_options=o)
        assert np.array_equal(back["w"], g)
        key = path[len(f"s3://{bucket}/"):] + "/data/0.safetensors"
        etag = client.head_object(Bucket=bucket, Key=key)["ETag"].strip('"')
        assert (etag.endswith(suffix) if suffix else "-" not in etag), (name, etag)


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


@needs_server
def test_hf_functions_take_storage_options(opts, url):
    # shardpoint.hf on s3:// with storage_options alone (no AWS environment):
    # write an HF model, describe and load it, convert it to a checkpoint and
    # export that back, all on the object store, bit for bit.
    import torch

    import shardpoint.hf as sphf
    torch.manual_seed(11)
    tensors = {"a.weight": torch.randn(48, 40), "b.bias": torch.randn(40)}
    sphf.write_model(f"{url}/hf", tensors, config={"hidden_size": 40}, storage_options=opts)
    info = sphf.describe(f"{url}/hf", storage_options=opts)
    assert {k: v.shape for k, v in info.items()} == {"a.weight": (48, 40), "b.bias": (40,)}
    model = {k: torch.zeros_like(v) for k, v in tensors.items()}
    sphf.load(model, f"{url}/hf", comm=sp.single(), storage_options=opts)
    assert all(torch.equal(model[k], tensors[k]) for k in tensors)
    assert sphf.convert(f"{url}/hf", f"{url}/ck", storage_options=opts).tensors == 2
    back = sp.read(f"{url}/ck", storage_options=opts)
    assert np.array_equal(back["a.weight"], tensors["a.weight"].numpy())
    sphf.export(f"{url}/ck", f"{url}/hf2", storage_options=opts)
    again = {k: torch.zeros_like(v) for k, v in tensors.items()}
    sphf.load(again, f"{url}/hf2", comm=sp.single(), storage_options=opts)
    assert all(torch.equal(again[k], tensors[k]) for k in tensors)


@needs_server
def test_dcp_writer_and_reader_take_storage_options(opts, url):
    # torch 1.13's DCP through shardpoint.dcp onto s3://, options per call.
    import sys

    import torch
    spdcp = pytest.importorskip("shardpoint.dcp")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from dcp_compat import import_dcp
    dcp = import_dcp()
    torch.manual_seed(12)
    sd = {"w": torch.randn(64, 33), "b": torch.randn(7)}
    dcp.save_state_dict(sd, spdcp.StorageWriter(f"{url}/dcp", sp.single(), storage_options=opts),
                        no_dist=True)
    back = {k: torch.zeros_like(v) for k, v in sd.items()}
    dcp.load_state_dict(back, spdcp.StorageReader(f"{url}/dcp", storage_options=opts),
                        no_dist=True)
    assert all(torch.equal(back[k], sd[k]) for k in sd)


@needs_server
def test_dcp_reader_loads_a_plain_torch_dcp_directory_on_s3(opts, url, tmp_path):
    # A DCP directory written by torch 1.13's own FileSystemWriter, uploaded
    # file by file as it is (boto3), loads by torch's load_state_dict through
    # shardpoint.dcp's reader: its .metadata comes through shardpoint's storage.
    import sys

    import torch
    boto3 = pytest.importorskip("boto3")
    spdcp = pytest.importorskip("shardpoint.dcp")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from dcp_compat import import_dcp
    dcp = import_dcp()
    torch.manual_seed(13)
    sd = {"w": torch.randn(96, 40), "b": torch.randn(9).to(torch.float64),
          "step": torch.tensor(7)}
    local = tmp_path / "dcp"
    dcp.save_state_dict(sd, dcp.FileSystemWriter(str(local)), no_dist=True)
    client = boto3.client("s3", endpoint_url=opts["endpoint_url"],
                          region_name=opts["region_name"],
                          aws_access_key_id=opts["aws_access_key_id"],
                          aws_secret_access_key=opts["aws_secret_access_key"])
    bucket, prefix = url[len("s3://"):].split("/", 1)
    for name in sorted(os.listdir(local)):
        client.upload_file(str(local / name), bucket, f"{prefix}/dcp/{name}")
    back = {k: torch.zeros_like(v) for k, v in sd.items()}
    dcp.load_state_dict(back, spdcp.StorageReader(f"{url}/dcp", storage_options=opts),
                        no_dist=True)
    assert all(torch.equal(back[k], sd[k]) for k in sd)


@needs_server
def test_train_state_mapped_load_takes_storage_options(opts, url):
    # TrainState.load(mapping=...) on s3:// (its placement, _C.place_in_hf, and
    # its manifest reads through the storage): a checkpoint under HF names,
    # saved with storage_options alone, loads into a torch model bit for bit.
    import torch

    from shardpoint.torch import TrainState
    torch.manual_seed(14)
    stored = {"weight": torch.randn(24, 40), "bias": torch.randn(24)}
    sp.save({k: v.numpy() for k, v in stored.items()}, f"{url}/ck", sp.single(),
            storage_options=opts)
    model = torch.nn.Linear(40, 24)
    TrainState(model, comm=sp.single(), rng=False).load(f"{url}/ck", mapping="",
                                                        storage_options=opts)
    assert torch.equal(model.weight, stored["weight"]) and torch.equal(model.bias, stored["bias"])


@needs_server
def test_tiered_manager_drains_a_local_checkpoint_to_s3(opts, url, tmp_path):
    # A manager with a local tier and an s3:// persistent root, set up by
    # storage_options: iteration 2's local checkpoint drains to the store.
    w = _g(64, 1024, 4)
    root = f"{url}/tiered"
    with sp.CheckpointManager(root, sp.single(), local_root=str(tmp_path / "local"),
                              persistent_every=2, storage_options=opts) as m:
        assert m.tiered
        assert not m.save({"w": w}, 1).persistent
        assert m.save({"w": w * 2}, 2).persistent
        assert m.flush() == 2
        assert m.iterations() == [2]
        path = m.path_for(2)
    assert path.startswith("s3://")
    out = np.zeros_like(w)
    sp.load({"w": out}, path, storage_options=opts)
    np.testing.assert_array_equal(out, w * 2)
    assert sp.verify(path, storage_options=opts).ok


_HOLD_LEASE = """
import os, signal, sys
import numpy as np
import shardpoint as sp
m = sp.CheckpointManager(sys.argv[1], sp.single())
m.save({"w": np.arange(1000, dtype=np.float32)}, 5)
print("saved", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@needs_server
def test_killed_jobs_lease_refuses_then_expires_and_is_taken_over(opts, url):
    # A job holding the manager's lease (6 s: SHARDPOINT_S3_LEASE_SECONDS) is
    # SIGKILLed after a save. The next job is refused with a typed error while
    # the lease lasts, then takes it over and resumes the saved iteration.
    import time
    root = f"{url}/lease"
    env = subprocess_env()
    env.update(SERVER)
    env["SHARDPOINT_S3_LEASE_SECONDS"] = "6"
    p = subprocess.run([PYTHON, "-c", _HOLD_LEASE, root], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == -9 and "saved" in p.stdout, p.stdout + p.stderr
    with pytest.raises(sp.FailedPreconditionError, match=r"is held \(pid .* ms left"):
        sp.CheckpointManager(root, sp.single(), storage_options=opts)
    deadline = time.monotonic() + 30
    while True:
        try:
            m = sp.CheckpointManager(root, sp.single(), storage_options=opts)
            break
        except sp.FailedPreconditionError:
            assert time.monotonic() < deadline, "the expired lease was never taken over"
            time.sleep(0.5)
    with m:
        out = np.zeros(1000, dtype=np.float32)
        it, _ = m.resume({"w": out})
    assert it == 5
    np.testing.assert_array_equal(out, np.arange(1000, dtype=np.float32))
