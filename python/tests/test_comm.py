"""Comms: a Comm written in Python, torch.distributed (gloo) and mpi4py adapters."""

import os
import shutil
import subprocess
import threading

import numpy as np
import pytest
import torch

import shardpoint as sp
from conftest import PYTHON, REPO, run_ranks, subprocess_env

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers", "dist_worker.py")


class PyThreadGroup:
    """Collectives between Python threads, for a Comm implemented in Python."""

    def __init__(self, n):
        self.n = n
        self.slots = [None] * n
        self.barrier_ = threading.Barrier(n)
        self.calls = []


class PyThreadComm(sp.Comm):
    def __init__(self, group, rank):
        sp.Comm.__init__(self)
        self.g, self.r = group, rank

    def rank(self):
        return self.r

    def size(self):
        return self.g.n

    def _exchange(self, data):
        self.g.slots[self.r] = data
        self.g.barrier_.wait()
        out = list(self.g.slots)
        self.g.barrier_.wait()
        return out

    def all_gather(self, data):
        self.g.calls.append("all_gather")
        return self._exchange(data)

    def gather(self, data, root):
        self.g.calls.append("gather")
        out = self._exchange(data)
        return out if self.r == root else None

    def broadcast(self, data, root):
        self.g.calls.append("broadcast")
        return self._exchange(data)[root]

    def barrier(self):
        self.g.calls.append("barrier")
        self.g.barrier_.wait()


def test_comm_implemented_in_python(ckpt):
    group = PyThreadGroup(3)
    comms = [PyThreadComm(group, r) for r in range(3)]
    g = torch.randn(6, 9, dtype=torch.float64)

    def both(r, comm):
        local = g.chunk(3, 1)[r].clone()
        sp.save({"w": sp.row_parallel("w", local, [6, 9], r, 3)}, ckpt, comm)
        h = sp.AsyncSaver().save({"w": sp.row_parallel("w", local, [6, 9], r, 3)},
                                 ckpt + "async", comm)
        h.wait()
        x = torch.zeros(2, 9, dtype=torch.float64)
        sp.load({"w": sp.column_parallel("w", x, [6, 9], r, 3)}, ckpt + "async", comm)
        return x

    out = run_ranks(3, both, comms=comms)
    assert torch.equal(torch.cat(out), g)
    assert "all_gather" in group.calls


def test_thread_comms_collectives():
    def body(r, comm):
        assert comm.rank() == r and comm.size() == 3
        all_ = comm.all_gather(bytes([r]))
        got = comm.gather(b"g%d" % r, 2)
        b = comm.broadcast(b"from1" if r == 1 else b"", 1)
        a2a = comm.all_to_all([bytes([r, j]) * j for j in range(3)])
        comm.barrier()
        return all_, got, b, a2a

    res = run_ranks(3, body)
    for r, (all_, got, b, a2a) in enumerate(res):
        assert all_ == [b"\x00", b"\x01", b"\x02"] and b == b"from1"
        assert a2a == [bytes([s, r]) * r for s in range(3)]
        assert got == ([b"g0", b"g1", b"g2"] if r == 2 else None)


def run_torch_workers(kind, tmp_path, world):
    """`world` dist_worker.py processes of `kind` over torch.distributed (gloo); each must
    exit 0 printing "ok <rank>"."""
    init = tmp_path / "init"
    procs = [subprocess.Popen([PYTHON, WORKER, kind, str(tmp_path), str(r), str(world),
                               str(init)], env=subprocess_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(world)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and f"ok {r}" in out, out


def test_torch_distributed_adapter(tmp_path):
    run_torch_workers("torch", tmp_path, 2)
    x = np.zeros((12, 4), dtype=np.float32)
    sp.load({"w": x}, tmp_path / "sync", strict=False)
    assert np.array_equal(x, np.arange(48, dtype=np.float32).reshape(12, 4))


def test_torch_adapter_over_each_process_own_group(tmp_path):
    """4 processes, each passing its own TP pair: saves and loads per pair; a process
    passing a group it is not in gets FailedPreconditionError, the members a comm."""
    run_torch_workers("torch_groups", tmp_path, 4)


def test_torch_adapter_needs_init():
    import torch.distributed as dist
    assert not dist.is_initialized()
    with pytest.raises(sp.FailedPreconditionError, match="not initialized"):
        sp.TorchDistributedComm()


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun")
def test_mpi4py_adapter(tmp_path):
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", PYTHON, WORKER, "mpi",
           str(tmp_path)]
    p = subprocess.run(cmd, env=subprocess_env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    assert p.returncode == 0 and "ok 0" in p.stdout and "ok 1" in p.stdout, p.stdout
    x = np.zeros((12, 4), dtype=np.float32)
    r = sp.load({"w": x, "rng": sp.ShardedObject("rng", None, index=(1,), grid=(2,))},
                tmp_path / "async")
    assert np.array_equal(x, np.arange(48, dtype=np.float32).reshape(12, 4))
    assert r.missing_keys == []


def test_all_to_all_buffer_reuses_receive_memory_it_no_longer_lends():
    # The adapters receive each round of a cooperative load into the memory of
    # the round before (fresh memory costs a page fault per 4 KiB), but never
    # into an array the caller (or an abandoned MPI request) still holds.
    from shardpoint.comm import _ReceiveMemory
    mem = _ReceiveMemory()
    first = mem.take(1000)
    first[:] = 7
    at = first.ctypes.data
    del first
    second = mem.take(900)  # no larger: the same memory
    assert second.ctypes.data == at and len(second) == 900
    second[:] = 1
    held = mem.take(900)  # `second` is alive: new memory
    assert held.ctypes.data != at
    held[:] = 2
    assert (second == 1).all()
    del second
    bigger = mem.take(10**6)  # larger than the memory it has: new memory
    assert len(bigger) == 10**6 and (held == 2).all()


@pytest.mark.parametrize("cooperative", [True, False])
def test_cooperative_load_reads_replicas_once(ckpt, cooperative):
    # Two ranks hold the same replicated tensor; with cooperative load one of
    # them reads it and sends it to the other, without, both read it.
    w = torch.arange(4096, dtype=torch.float32).reshape(64, 64)
    sp.save({"w": w}, ckpt)

    def body(r, comm):
        t = {"w": torch.zeros(64, 64)}
        res = sp.load(t, ckpt, comm, cooperative=cooperative, read_slice_bytes=4096)
        assert torch.equal(t["w"], w)
        return res.bytes_read, res.bytes_received

    got = run_ranks(2, body)
    nbytes = w.numel() * 4
    if cooperative:
        assert sum(b for b, _ in got) == nbytes and sum(x for _, x in got) == nbytes
    else:
        assert got == [(nbytes, 0), (nbytes, 0)]


def test_comm_latency_bench_runs():
    """bench/comm_latency.py keeps working (no timing asserted: the figures are in
    bench/results/history.md#the-collectives-what-a-small-checkpoint-feels)."""
    bench = os.path.join(REPO, "bench", "comm_latency.py")
    p = subprocess.run([PYTHON, bench, "--ranks", "2", "--iters", "3"], env=subprocess_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert p.returncode == 0, p.stdout
    for row in ("gloo all_gather (1 int64)", "comm.all_gather (1 byte)", "comm.gather (64 KiB)",
                "comm.broadcast (64 KiB)", "comm.all_to_all (1 byte each)", "comm.barrier",
                "sp.save, 8 small tensors (tmpfs)", "sp.load, 8 small tensors (tmpfs)"):
        assert row in p.stdout, p.stdout
