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
  returns item i from rank i) or, faster, ``all_to_all_buffer(send:
  bytearray, counts: list[int]) -> (buffer, list[int])`` (``send`` holds
  ``counts[i]`` bytes for rank i back to back; return the bytes from each
  rank back to back in one C-contiguous buffer, e.g. a numpy array, and how
  many came from each; every count is at least 1). Cooperative load moves
  the blocks one rank reads for others with it; without either the library
  falls back to all-gathers, where every rank receives every rank's messages.
  The torch and mpi4py adapters implement both, the buffer form with one
  ``all_to_all_single`` of uint8 tensors (gloo) or one ``Ialltoallv`` of the
  buffers, so the bytes cross the interpreter as two buffers per exchange.

Deadlines: every collective of ``thread_comms``, ``MPI4PyComm`` and
``TorchDistributedComm`` waits at most ``deadline`` (seconds or a
``datetime.timedelta``; default ``DEFAULT_DEADLINE``, 30 minutes, as
torch.distributed's own default; ``0`` or less: none) for the other ranks,
counted from this rank's entry. Past it, or as soon as gloo sees a peer's
connection close (its process died), it raises ``DeadlineExceededError``
naming the collective and the ranks that did not arrive as far as it can tell
(threads: exactly; MPI and gloo do not say, so those comms name the ranks on
this host whose process exited or is stopped), and the comm is broken: every later collective raises the same error. A rank that
died thus makes the others fail instead of waiting forever. The deadline must
exceed the longest a rank can be kept waiting by a peer's share of a save or
a load.

``default_comm()`` is what ``save``/``load`` use when no comm is given: the
torch.distributed adapter if torch.distributed is initialized, the mpi4py one
if mpi4py's MPI is initialized with more than one rank, else ``single()``.
Creating the torch and mpi4py adapters is collective (a new group or a
communicator duplicate), so every rank must make its first ``save``/``load``
call at the same point.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import socket
import sys
import threading
import time
import weakref
from typing import Any, Optional, Union

from shardpoint import _shardpoint as _C

Comm = _C.Comm

__all__ = ["Comm", "single", "thread_comms", "MPI4PyComm", "TorchDistributedComm",
           "default_comm", "DEFAULT_DEADLINE"]

DEFAULT_DEADLINE = datetime.timedelta(minutes=30)

Deadline = Optional[Union[float, int, datetime.timedelta]]


def _seconds(deadline: Deadline) -> float:
    """The deadline in seconds; 0 for none."""
    if deadline is None:
        deadline = DEFAULT_DEADLINE
    if isinstance(deadline, datetime.timedelta):
        deadline = deadline.total_seconds()
    if isinstance(deadline, bool) or not isinstance(deadline, (int, float)):
        raise _C.InvalidArgumentError(
            f"deadline: expected seconds or a datetime.timedelta, got {deadline!r}")
    return max(float(deadline), 0.0)


def _whoami() -> tuple:
    return (socket.gethostname(), os.getpid())


def _proc_state(pid: int) -> Optional[str]:
    """The state letter of process `pid` (/proc/<pid>/stat), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _local_casualties(peers: list, me: int) -> list:
    """The ranks among `peers` ((host, pid) per rank) on this host whose process
    exited or is stopped: what a transport that does not say can still learn."""
    host = socket.gethostname()
    out = []
    for r, (h, pid) in enumerate(peers):
        if r == me or h != host:
            continue
        state = _proc_state(pid)
        if state is None or state in "ZXx":
            out.append(f"rank {r} (pid {pid} on this host) exited")
        elif state in "Tt":
            out.append(f"rank {r} (pid {pid} on this host) is stopped")
    return out


def _describe(seconds: float) -> str:
    return f" within its deadline of {seconds:g} s" if seconds > 0 else " (no deadline set)"


class _Collectives:
    """Numbers a comm's collectives and breaks the comm at its first deadline error."""

    def __init__(self, name: str, rank: int, seconds: float) -> None:
        self.name, self.rank, self.seconds = name, rank, seconds
        self.count = 0
        self.broken: Optional[str] = None

    def begin(self) -> None:
        if self.broken is not None:
            raise _C.DeadlineExceededError(self.broken)
        self.count += 1

    def fail(self, op: str, why: str, peers: Optional[list] = None,
             transport: str = "") -> "_C.DeadlineExceededError":
        gone = _local_casualties(peers, self.rank) if peers else []
        # A killed peer closes its connections a moment before the kernel shows
        # it as exited: look again for up to a second before saying nothing.
        until = time.monotonic() + 1.0
        while peers and not gone and time.monotonic() < until:
            time.sleep(0.02)
            gone = _local_casualties(peers, self.rank)
        who = "; ".join(gone) if gone else f"{transport} does not say which rank"
        self.broken = (f"{self.name} rank {self.rank}: collective #{self.count} ({op}) did not "
                       f"complete{_describe(self.seconds)}: {why}: {who}; this comm "
                       "is unusable from now on")
        return _C.DeadlineExceededError(self.broken)


def single() -> Comm:
    """A Comm for a job of one process."""
    return _C.make_single_comm()


def thread_comms(n: int, deadline: Deadline = None) -> list[Comm]:
    """``n`` connected Comms for ranks as threads of this process (``comms[i]`` is rank i).

    Each thread calls ``save``/``load`` with its own Comm; the GIL is released
    while the C++ library runs, so the ranks proceed in parallel. A collective
    waits at most ``deadline`` (see the module's doc) and then raises
    ``DeadlineExceededError`` naming the ranks that did not arrive."""
    seconds = _seconds(deadline)
    return _C.make_thread_comms(int(n), max(1, round(seconds * 1000)) if seconds > 0 else 0)


class _ReceiveMemory:
    """all_to_all_buffer's receive memory (uint8 numpy), reused from call to
    call: fresh memory for every round of a cooperative load costs a page
    fault per 4 KiB (on a VM whose host took freed pages back, seconds of
    system CPU per GiB). A call gets new memory while the array the previous
    call returned is still referenced (by its caller, or by an abandoned MPI
    request), so no returned array is ever overwritten."""

    def __init__(self) -> None:
        self._whole: Any = None
        self._last: Any = None  # weakref to the array handed out last

    def take(self, n: int) -> Any:
        import numpy as np
        if (self._whole is None or len(self._whole) < n
                or (self._last is not None and self._last() is not None)):
            self._whole = np.empty(max(n + n // 4, 1), dtype=np.uint8)  # some room to grow
        out = self._whole[:n]
        self._last = weakref.ref(out)
        return out


class MPI4PyComm(Comm):
    """A Comm over an mpi4py communicator (default ``MPI.COMM_WORLD``).

    Collective: duplicates ``comm``. Byte payloads travel in MPI buffers
    (Iallgatherv / Igatherv / Ibcast / Ialltoallv), never pickled. Every
    collective is started nonblocking and polled against ``deadline`` (see the
    module's doc); MPI does not say which rank is missing, so the error names
    the ranks on this host whose process exited or is stopped, and the
    abandoned collective's buffers are kept for the life of the comm (MPI can
    neither cancel nor free it). Whether the other ranks
    live on when one dies is the launcher's choice: Open MPI's mpirun kills
    the job unless run with ``--enable-recovery``. An async save makes MPI
    calls from a background thread: MPI must provide MPI_THREAD_MULTIPLE if
    the application makes MPI calls meanwhile (mpi4py requests it by default).
    """

    def __init__(self, comm: Any = None, deadline: Deadline = None) -> None:
        Comm.__init__(self)
        from mpi4py import MPI
        import numpy as np
        self._MPI = MPI
        self._np = np
        self._comm = (comm if comm is not None else MPI.COMM_WORLD).Dup()
        self._rank = self._comm.Get_rank()
        self._size = self._comm.Get_size()
        self._seconds = _seconds(deadline)
        self._calls = _Collectives("MPI4PyComm", self._rank, self._seconds)
        self._start = 0.0
        self._abandoned: list = []
        self._recv = _ReceiveMemory()
        # Who each rank is, for naming a local rank that died (MPI does not say).
        self._peers = self._comm.allgather(_whoami())

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def _begin(self) -> None:
        self._calls.begin()
        self._start = time.monotonic()

    def _wait(self, req, op: str, *buffers) -> None:
        """Polls `req` until done or the current collective's deadline."""
        nap = 1e-5
        spin_until = time.monotonic() + 2e-4
        while not req.Test():
            now = time.monotonic()
            if self._seconds > 0 and now - self._start >= self._seconds:
                self._abandoned.append((req, buffers))
                raise self._calls.fail(op, "a rank did not arrive (dead, hung or too slow)",
                                       self._peers, "MPI")
            if now >= spin_until:
                time.sleep(nap)
                nap = min(nap * 2, 1e-3)

    def _sizes(self, n, op):
        np = self._np
        mine = np.array([n], dtype=np.int64)
        sizes = np.zeros(self._size, dtype=np.int64)
        self._wait(self._comm.Iallgather(mine, sizes), op, mine, sizes)
        return sizes

    @staticmethod
    def _split(buf, sizes):
        out, pos = [], 0
        for n in sizes:
            out.append(buf[pos:pos + int(n)].tobytes())
            pos += int(n)
        return out

    def _displs(self, sizes):
        np = self._np
        return np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)

    def all_gather(self, data: bytes) -> list[bytes]:
        np, MPI = self._np, self._MPI
        self._begin()
        sizes = self._sizes(len(data), "all_gather")
        buf = np.empty(int(sizes.sum()), dtype=np.uint8)
        mine = np.frombuffer(data, dtype=np.uint8)
        self._wait(self._comm.Iallgatherv(
            mine, [buf, sizes.tolist(), self._displs(sizes).tolist(), MPI.BYTE]),
            "all_gather", mine, buf, data)
        return self._split(buf, sizes)

    def gather(self, data: bytes, root: int) -> list[bytes]:
        np, MPI = self._np, self._MPI
        self._begin()
        sizes = self._sizes(len(data), "gather")
        mine = np.frombuffer(data, dtype=np.uint8)
        if self._rank != root:
            self._wait(self._comm.Igatherv(mine, None, root=root), "gather", mine, data)
            return []
        buf = np.empty(int(sizes.sum()), dtype=np.uint8)
        self._wait(self._comm.Igatherv(
            mine, [buf, sizes.tolist(), self._displs(sizes).tolist(), MPI.BYTE], root=root),
            "gather", mine, buf, data)
        return self._split(buf, sizes)

    def broadcast(self, data: bytes, root: int) -> bytes:
        np = self._np
        self._begin()
        n = np.array([len(data) if self._rank == root else 0], dtype=np.int64)
        self._wait(self._comm.Ibcast(n, root=root), "broadcast", n)
        buf = (np.frombuffer(data, dtype=np.uint8).copy() if self._rank == root
               else np.empty(int(n[0]), dtype=np.uint8))
        self._wait(self._comm.Ibcast(buf, root=root), "broadcast", buf)
        return buf.tobytes()

    def barrier(self) -> None:
        self._begin()
        self._wait(self._comm.Ibarrier(), "barrier")

    def all_to_all(self, send: list[bytes]) -> list[bytes]:
        buf, recv_counts = self.all_to_all_buffer(b"".join(send), [len(b) for b in send])
        return self._split(buf, recv_counts)

    def all_to_all_buffer(self, send: Any, counts: list) -> tuple:
        """``send``: ``counts[i]`` bytes for rank i, back to back (any buffer).
        Returns (a uint8 numpy array of the bytes from each rank back to back,
        how many came from each): one Ialltoall of the counts, one Ialltoallv."""
        np, MPI = self._np, self._MPI
        self._begin()
        sent = np.array(counts, dtype=np.int64)
        recv_counts = np.zeros(self._size, dtype=np.int64)
        self._wait(self._comm.Ialltoall(sent, recv_counts), "all_to_all", sent, recv_counts)
        out = np.frombuffer(send, dtype=np.uint8)
        buf = self._recv.take(int(recv_counts.sum()))
        self._wait(self._comm.Ialltoallv(
            [out, sent.tolist(), self._displs(sent).tolist(), MPI.BYTE],
            [buf, recv_counts.tolist(), self._displs(recv_counts).tolist(), MPI.BYTE]),
            "all_to_all", out, buf, send)
        return buf, recv_counts.tolist()

    def free(self) -> None:
        """Frees the duplicated communicator (before MPI_Finalize); a comm that
        abandoned a collective keeps it."""
        if self._comm is not None and not self._abandoned:
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

    ``deadline`` (see the module's doc) is the gloo groups' timeout, which
    gloo applies to each of the two or three operations a collective is made
    of. A peer that dies closes its connections, so the others fail at once;
    one that hangs, after the deadline. gloo does not say which rank it was:
    the error names the ranks on this host whose process exited or is stopped.
    """

    def __init__(self, group: Any = None, deadline: Deadline = None) -> None:
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
        seconds = _seconds(deadline)
        timeout = datetime.timedelta(seconds=seconds) if seconds > 0 \
            else datetime.timedelta(days=3650)
        made = {g: dist.new_group(ranks=list(g), backend="gloo", timeout=timeout)
                for g in groups}
        if not mine:
            raise _C.FailedPreconditionError(
                f"TorchDistributedComm: process {me} is not a member of the group it passed")
        self._global = mine
        self._group = made[tuple(mine)]
        self._rank = mine.index(me)
        self._size = len(mine)
        self._calls = _Collectives("TorchDistributedComm", self._rank, seconds)
        self._recv = _ReceiveMemory()
        # Who each rank is, for naming a local rank that died (gloo does not say).
        self._peers = [None] * self._size
        dist.all_gather_object(self._peers, _whoami(), group=self._group)

    @contextlib.contextmanager
    def _collective(self, op):
        """Numbers the collective; a gloo failure (a timeout, a peer's closed
        connection) breaks the comm with DeadlineExceededError."""
        self._calls.begin()
        try:
            yield
        except RuntimeError as e:
            if isinstance(e, _C.Error):
                raise
            text = str(e).strip()
            if "Timed out" in text or "timed out" in text:
                why = "a rank did not arrive (dead, hung or too slow)"
            elif any(s in text for s in ("closed by peer", "reset by peer", "Broken pipe",
                                         "Connection refused")):
                why = "a peer rank's process is gone (its connection closed)"
            else:
                why = "the transport failed"
            raise self._calls.fail(op, f"{why} (gloo: {text})", self._peers, "gloo") from e

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
        with self._collective("all_gather"):
            out, width = self._gather_frames(data, 0)
            if out is None:
                out = self._torch.empty(self._size * (8 + width), dtype=self._torch.uint8)
            self._dist.broadcast(out, src=self._global[0], group=self._group)
        return self._unframe(out, width)

    def gather(self, data: bytes, root: int) -> list[bytes]:
        with self._collective("gather"):
            out, width = self._gather_frames(data, root)
        return [] if out is None else self._unframe(out, width)

    _INLINE = 4096  # a broadcast's first message: the length and up to 4088 bytes

    def broadcast(self, data: bytes, root: int) -> bytes:
        with self._collective("broadcast"):
            return self._broadcast(data, root)

    def _broadcast(self, data, root):
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
        with self._collective("all_to_all"):
            return self._all_to_all(send)

    def _all_to_all(self, send):
        # Every message carries one pad byte: gloo fails on empty tensors.
        joined = bytearray().join(x for b in send for x in (b, b"\0"))
        buf, sizes = self._all_to_all_buffer(joined, [len(b) + 1 for b in send])
        view = memoryview(buf)
        result, at = [], 0
        for n in sizes:
            result.append(bytes(view[at:at + n - 1]))
            at += n
        return result

    def all_to_all_buffer(self, send: Any, counts: list) -> tuple:
        """``send``: ``counts[i]`` bytes for rank i, back to back (a writable
        buffer; every count at least 1, as gloo fails on empty tensors).
        Returns (a uint8 numpy array of the bytes from each rank back to back,
        how many came from each). This is how a cooperative load's blocks
        move: C++ hands one buffer in and splits the one returned."""
        with self._collective("all_to_all"):
            return self._all_to_all_buffer(send, counts)

    def _all_to_all_buffer(self, send, counts):
        # One size exchange and one all_to_all_single of uint8 tensors with
        # uneven splits (gloo has it), on the buffers themselves: no copy here.
        torch = self._torch
        sent = torch.tensor(counts, dtype=torch.int64)
        recv_counts = torch.empty(self._size, dtype=torch.int64)
        self._dist.all_to_all_single(recv_counts, sent, group=self._group)
        sizes = [int(n) for n in recv_counts.tolist()]
        out = self._recv.take(sum(sizes))
        self._dist.all_to_all_single(torch.from_numpy(out),
                                     torch.frombuffer(send, dtype=torch.uint8), sizes,
                                     [int(n) for n in counts], group=self._group)
        return out, sizes

    def barrier(self) -> None:
        with self._collective("barrier"):
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
