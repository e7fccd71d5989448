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
    .new_group`` requires it). ``group`` (default: the whole world) may differ
    between processes: each passes its own, e.g. its tensor-parallel group, and
    every distinct group gets its own gloo group, used only by shardpoint, so an
    async save in a background thread never interleaves with the training's
    collectives. ``rank()`` is the rank in ``group``. A process that is not a
    member of the group it passes gets ``FailedPreconditionError`` (after taking
    its part in creating the groups, so that the members do not hang).
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
        me, world = dist.get_rank(), dist.get_world_size()
        if group is None:
            mine = list(range(world))
            groups = [tuple(mine)]
        else:
            # Each member learns its group's global ranks (in group order), then
            # every process learns every process's group and creates each
            # distinct one, in the same order everywhere.
            mine = []
            if dist.get_rank(group) >= 0:
                out = [torch.zeros(1, dtype=torch.int64)
                       for _ in range(dist.get_world_size(group))]
                dist.all_gather(out, torch.tensor([me], dtype=torch.int64), group=group)
                mine = [int(t.item()) for t in out]
            every: list[Any] = [None] * world
            dist.all_gather_object(every, mine)
            groups = sorted({tuple(g) for g in every if g})
        made = {g: dist.new_group(ranks=list(g), backend="gloo") for g in groups}
        if not mine:
            raise _C.FailedPreconditionError(
                f"TorchDistributedComm: process {me} is not a member of the group it passed")
        self._global = mine
        self._group = made[tuple(mine)]
        self._rank = mine.index(me)
        self._size = len(mine)

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    # gloo's all_gather costs about three times its gather, broadcast or
    # all_reduce of one number (bench/comm_latency.py measures them), and gloo
    # fails (SIGFPE) on empty tensors. So payloads travel framed (8-byte length,
    # then the bytes, zero-padded to the largest payload: never empty), sized by
    # one all_reduce(MAX), and an all_gather is a gather to rank 0 and a broadcast.

    def _max(self, n):
        t = self._torch.tensor([n], dtype=self._torch.int64)
        self._dist.all_reduce(t, op=self._dist.ReduceOp.MAX, group=self._group)
        return int(t.item())

    def _frame(self, data, width):
        buf = bytearray(8 + width)
        buf[:8] = len(data).to_bytes(8, "little")
        buf[8:8 + len(data)] = data
        return self._torch.frombuffer(buf, dtype=self._torch.uint8)

    def _unframe(self, out, width):
        view = memoryview(out.numpy())
        result = []
        for r in range(self._size):
            at = r * (8 + width)
            n = int.from_bytes(view[at:at + 8], "little")
            if n > width:
                raise _C.DataLossError(f"TorchDistributedComm: rank {r} sent a frame of {n} "
                                       f"bytes in a {width}-byte slot")
            result.append(bytes(view[at + 8:at + 8 + n]))
        return result

    def _gather_frames(self, data, root):
        """(every rank's frame in one tensor on `root`, None elsewhere; slot width)."""
        width = self._max(len(data))
        mine = self._frame(data, width)
        if self._rank != root:
            self._dist.gather(mine, None, dst=self._global[root], group=self._group)
            return None, width
        out = self._torch.empty(self._size * (8 + width), dtype=self._torch.uint8)
        self._dist.gather(mine, list(out.split(8 + width)), dst=self._global[root],
                          group=self._group)
        return out, width

    def all_gather(self, data: bytes) -> list[bytes]:
        out, width = self._gather_frames(data, 0)
        if out is None:
            out = self._torch.empty(self._size * (8 + width), dtype=self._torch.uint8)
        self._dist.broadcast(out, src=self._global[0], group=self._group)
        return self._unframe(out, width)

    def gather(self, data: bytes, root: int) -> list[bytes]:
        out, width = self._gather_frames(data, root)
        return [] if out is None else self._unframe(out, width)

    _INLINE = 4096  # a broadcast's first message: the length and up to 4088 bytes

    def broadcast(self, data: bytes, root: int) -> bytes:
        torch, src = self._torch, self._global[root]
        head = bytearray(self._INLINE)
        if self._rank == root:
            head[:8] = len(data).to_bytes(8, "little")
            inline = min(len(data), self._INLINE - 8)
            head[8:8 + inline] = data[:inline]
        self._dist.broadcast(torch.frombuffer(head, dtype=torch.uint8), src=src,
                             group=self._group)
        n = int.from_bytes(head[:8], "little")
        inline = min(n, self._INLINE - 8)
        if n == inline:
            return bytes(data) if self._rank == root else bytes(head[8:8 + n])
        if self._rank == root:
            rest = torch.frombuffer(bytearray(data[inline:]), dtype=torch.uint8)
        else:
            rest = torch.empty(n - inline, dtype=torch.uint8)
        self._dist.broadcast(rest, src=src, group=self._group)
        return bytes(data) if self._rank == root else bytes(head[8:]) + rest.numpy().tobytes()

    def all_to_all(self, send: list[bytes]) -> list[bytes]:
        # One size exchange and one all_to_all_single with uneven splits (gloo
        # has it). Every message carries one pad byte: gloo fails on empty tensors.
        torch = self._torch
        counts = torch.tensor([len(b) + 1 for b in send], dtype=torch.int64)
        recv_counts = torch.empty(self._size, dtype=torch.int64)
        self._dist.all_to_all_single(recv_counts, counts, group=self._group)
        sizes = [int(n) for n in recv_counts.tolist()]
        # One copy in (join), one out (each message's bytes): these carry a
        # cooperative load's blocks.
        inp = torch.frombuffer(bytearray().join(x for b in send for x in (b, b"\0")),
                               dtype=torch.uint8)
        out = torch.empty(sum(sizes), dtype=torch.uint8)
        self._dist.all_to_all_single(out, inp, sizes, counts.tolist(), group=self._group)
        view = memoryview(out.numpy())
        result, at = [], 0
        for n in sizes:
            result.append(bytes(view[at:at + n - 1]))
            at += n
        return result

    def barrier(self) -> None:
        self._max(0)  # one all_reduce of one number: about half of gloo's barrier


_default: dict[str, Comm] = {}
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
