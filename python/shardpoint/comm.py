"""Communicators: how the ranks of a job talk during save and load.

shardpoint needs four collectives over bytes (all_gather, gather, broadcast,
barrier). A ``Comm`` provides them:

* ``single()``: a job of one process (the default outside a distributed job);
* ``thread_comms(n)``: ``n`` ranks as threads of this process (tests, demos);
* ``MPI4PyComm(comm)``: over an mpi4py communicator (duplicated, so
  shardpoint's messages never mix with the application's);
* ``TorchDistributedComm(group)``: over ``torch.distributed``; it creates its
  own gloo group, so it works next to NCCL and next to the training's own
  collectives (an async save talks from a background thread);
* any subclass of ``Comm`` implementing ``rank``, ``size``, ``all_gather``,
  ``gather``, ``broadcast`` and ``barrier`` in Python, and optionally
  ``all_to_all(send: list[bytes]) -> list[bytes]`` (item i goes to rank i;
  returns item i from rank i). Cooperative load moves replicated bytes with
  it; without it the library falls back to all-gathers, where every rank
  receives every rank's messages (the torch and mpi4py adapters implement it).

``default_comm()`` is what ``save``/``load`` use when no comm is given: the
torch.distributed adapter if torch.distributed is initialized, the mpi4py one
if mpi4py's MPI is initialized with more than one rank, else ``single()``.
Creating the torch and mpi4py adapters is collective (a new group or a
communicator duplicate), so every rank must make its first ``save``/``load``
call at the same point.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from shardpoint import _shardpoint as _C

Comm = _C.Comm

__all__ = ["Comm", "single", "thread_comms", "MPI4PyComm", "TorchDistributedComm",
           "default_comm"]


def single() -> Comm:
    """A Comm for a job of one process."""
    return _C.make_single_comm()


def thread_comms(n: int) -> list[Comm]:
    """``n`` connected Comms for ranks as threads of this process (``comms[i]`` is rank i).

    Each thread calls ``save``/``load`` with its own Comm; the GIL is released
    while the C++ library runs, so the ranks proceed in parallel."""
    return _C.make_thread_comms(int(n))


class MPI4PyComm(Comm):
    """A Comm over an mpi4py communicator (default ``MPI.COMM_WORLD``).

    Collective: duplicates ``comm``. Byte payloads travel in MPI buffers
    (Allgatherv / Gatherv / Bcast), never pickled. An async save makes MPI calls
    from a background thread: MPI must provide MPI_THREAD_MULTIPLE if the
    application makes MPI calls meanwhile (mpi4py requests it by default).
    """

    def __init__(self, comm: Any = None) -> None:
        Comm.__init__(self)
        from mpi4py import MPI
        import numpy as np
        self._MPI = MPI
        self._np = np
        self._comm = (comm if comm is not None else MPI.COMM_WORLD).Dup()
        self._rank = self._comm.Get_rank()
        self._size = self._comm.Get_size()

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def _sizes(self, n):
        sizes = self._np.zeros(self._size, dtype=self._np.int64)
        self._comm.Allgather(self._np.array([n], dtype=self._np.int64), sizes)
        return sizes

    @staticmethod
    def _split(buf, sizes):
        out, pos = [], 0
        for n in sizes:
            out.append(buf[pos:pos + int(n)].tobytes())
            pos += int(n)
        return out

    def all_gather(self, data: bytes) -> list[bytes]:
        np, MPI = self._np, self._MPI
        sizes = self._sizes(len(data))
        displs = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        buf = np.empty(int(sizes.sum()), dtype=np.uint8)
        self._comm.Allgatherv(np.frombuffer(data, dtype=np.uint8),
                              [buf, sizes.tolist(), displs.tolist(), MPI.BYTE])
        return self._split(buf, sizes)

    def gather(self, data: bytes, root: int) -> list[bytes]:
        np, MPI = self._np, self._MPI
        sizes = np.zeros(self._size, dtype=np.int64) if self._rank == root else None
        self._comm.Gather(np.array([len(data)], dtype=np.int64), sizes, root=root)
        mine = np.frombuffer(data, dtype=np.uint8)
        if self._rank != root:
            self._comm.Gatherv(mine, None, root=root)
            return []
        displs = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        buf = np.empty(int(sizes.sum()), dtype=np.uint8)
        self._comm.Gatherv(mine, [buf, sizes.tolist(), displs.tolist(), MPI.BYTE], root=root)
        return self._split(buf, sizes)

    def broadcast(self, data: bytes, root: int) -> bytes:
        np = self._np
        n = np.array([len(data) if self._rank == root else 0], dtype=np.int64)
        self._comm.Bcast(n, root=root)
        buf = (np.frombuffer(data, dtype=np.uint8).copy() if self._rank == root
               else np.empty(int(n[0]), dtype=np.uint8))
        self._comm.Bcast(buf, root=root)
        return buf.tobytes()

    def barrier(self) -> None:
        self._comm.Barrier()

    def all_to_all(self, send: list[bytes]) -> list[bytes]:
        return [bytes(b) for b in self._comm.alltoall(list(send))]

    def free(self) -> None:
        """Frees the duplicated communicator (before MPI_Finalize)."""
        if self._comm is not None:
            self._comm.Free()
            self._comm = None


class TorchDistributedComm(Comm):
    """A Comm over ``torch.distributed`` (any backend for the training; gloo here).

    Collective over every process of the default group (``torch.distributed
    .new_group`` requires it): creates a gloo group over the ranks of ``group``
    (default: the whole world), used only by shardpoint, so an async save in a
    background thread never interleaves with the training's collectives.
    ``rank()`` is the rank in ``group``.
    """

    def __init__(self, group: Any = None) -> None:
        Comm.__init__(self)
        import torch
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_initialized():
            raise _C.FailedPreconditionError(
                "torch.distributed is not initialized (call init_process_group first)")
        self._torch = torch
        self._dist = dist
        world = dist.get_world_size()
        if group is None:
            ranks = list(range(world))
        else:
            # The global rank of every member of `group`, in group order.
            me = torch.tensor([dist.get_rank()], dtype=torch.int64)
            out = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size(group))]
            dist.all_gather(out, me, group=group)
            ranks = [int(t.item()) for t in out]
        self._global = ranks
        self._group = dist.new_group(ranks=ranks, backend="gloo")
        self._rank = dist.get_rank(self._group)
        self._size = len(ranks)

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def _tensor(self, data, size):
        torch = self._torch
        t = torch.zeros(size, dtype=torch.uint8)
        if data:
            t[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        return t

    def _sizes(self, n):
        torch = self._torch
        out = [torch.zeros(1, dtype=torch.int64) for _ in range(self._size)]
        self._dist.all_gather(out, torch.tensor([n], dtype=torch.int64), group=self._group)
        return [int(t.item()) for t in out]

    # gloo fails (SIGFPE) on empty tensors: payloads are padded to at least one byte.

    def all_gather(self, data: bytes) -> list[bytes]:
        sizes = self._sizes(len(data))
        width = max(1, max(sizes))
        out = [self._torch.empty(width, dtype=self._torch.uint8) for _ in range(self._size)]
        self._dist.all_gather(out, self._tensor(data, width), group=self._group)
        return [t[:n].numpy().tobytes() for t, n in zip(out, sizes)]

    def gather(self, data: bytes, root: int) -> list[bytes]:
        # Sizes everywhere (gloo's gather needs equal sizes), then one padded gather.
        sizes = self._sizes(len(data))
        width = max(1, max(sizes))
        dst = self._global[root]
        if self._rank != root:
            self._dist.gather(self._tensor(data, width), None, dst=dst, group=self._group)
            return []
        out = [self._torch.empty(width, dtype=self._torch.uint8) for _ in range(self._size)]
        self._dist.gather(self._tensor(data, width), out, dst=dst, group=self._group)
        return [t[:n].numpy().tobytes() for t, n in zip(out, sizes)]

    def broadcast(self, data: bytes, root: int) -> bytes:
        torch = self._torch
        src = self._global[root]
        n = torch.tensor([len(data) if self._rank == root else 0], dtype=torch.int64)
        self._dist.broadcast(n, src=src, group=self._group)
        if n.item() == 0:
            return b""
        t = self._tensor(data if self._rank == root else b"", int(n.item()))
        self._dist.broadcast(t, src=src, group=self._group)
        return t.numpy().tobytes()

    def all_to_all(self, send: list[bytes]) -> list[bytes]:
        # One size exchange and one all_to_all_single with uneven splits (gloo
        # has it). Every message carries one pad byte: gloo fails on empty tensors.
        torch = self._torch
        counts = torch.tensor([len(b) + 1 for b in send], dtype=torch.int64)
        recv_counts = torch.empty(self._size, dtype=torch.int64)
        self._dist.all_to_all_single(recv_counts, counts, group=self._group)
        sizes = [int(n) for n in recv_counts.tolist()]
        inp = torch.frombuffer(bytearray(b"".join(b + b"\0" for b in send)), dtype=torch.uint8)
        out = torch.empty(sum(sizes), dtype=torch.uint8)
        self._dist.all_to_all_single(out, inp, sizes, counts.tolist(), group=self._group)
        data = out.numpy().tobytes()
        result, at = [], 0
        for n in sizes:
            result.append(data[at:at + n - 1])
            at += n
        return result

    def barrier(self) -> None:
        self._dist.barrier(group=self._group)


_default = {}
_default_lock = threading.Lock()


def default_comm() -> Comm:
    """The Comm ``save``/``load`` use when none is given (created once per process)."""
    with _default_lock:
        torch = sys.modules.get("torch")
        dist = getattr(torch, "distributed", None) if torch is not None else None
        if dist is not None and dist.is_available() and dist.is_initialized():
            if "torch" not in _default:
                _default["torch"] = TorchDistributedComm()
            return _default["torch"]
        mpi = sys.modules.get("mpi4py.MPI")
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() \
                and mpi.COMM_WORLD.Get_size() > 1:
            if "mpi" not in _default:
                _default["mpi"] = MPI4PyComm(mpi.COMM_WORLD)
            return _default["mpi"]
        if "single" not in _default:
            _default["single"] = single()
        return _default["single"]
