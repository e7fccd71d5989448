"""CheckpointManager: one checkpoint per training iteration under a root directory.

    <root>/iter_0000100/   a checkpoint (complete iff it has a manifest)
    <root>/latest          the iteration last committed (updated atomically)
    <root>/.lock           held by the job that writes here

Resume picks the newest *complete* checkpoint, so a save killed half-way is
ignored; ``keep_last=N`` removes older checkpoints after each commit but never
the newest complete one. A second job opening the same root fails with
FailedPreconditionError naming the holder of the lock. The C++
``shardpoint::CheckpointManager`` does the work; see include/shardpoint/manager.h.
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any

from shardpoint import _shardpoint as _C
from shardpoint._checkpoint import (AsyncSaver, LoadResult, SaveHandle, SaveStats,
                                    _wait_until_comm_idle, default_saver, load, save)
from shardpoint._storage import storage_for
from shardpoint.comm import Comm, default_comm

__all__ = ["CheckpointManager"]


class CheckpointManager:
    """``CheckpointManager(root, comm=None, keep_last=0, lock=True)``. Collective:
    every rank opens it with the same arguments and calls ``save``, ``save_async``
    and ``resume`` in the same order; ``iterations``, ``latest`` and ``tracker``
    are local. Use it as a context manager (or call ``close``) to release the lock.
    ``lock=False`` skips the lock file (when the scheduler guarantees one writer).
    ``storage_options`` (as ``save``'s, for an ``s3://`` root) apply to the
    manager and to every save, save_async and resume through it."""

    def __init__(self, root: str | os.PathLike, comm: Comm | None = None, *,
                 keep_last: int = 0, lock: bool = True,
                 storage_options: dict | None = None) -> None:
        self._comm = comm if comm is not None else default_comm()
        if int(keep_last) < 0:
            raise _C.InvalidArgumentError(f"keep_last must be >= 0, got {keep_last}")
        _wait_until_comm_idle(self._comm)
        self._storage_options = storage_options
        self._m: Any = _C.CheckpointManager.open(os.fspath(root), self._comm, int(keep_last),
                                                  bool(lock), storage_for(storage_options))
        self._last: SaveHandle | None = None

    def _manager(self) -> Any:
        if self._m is None:
            raise _C.FailedPreconditionError("the CheckpointManager is closed")
        return self._m

    @property
    def root(self) -> str:
        return self._manager().root

    def path_for(self, iteration: int) -> str:
        """``<root>/iter_0000100`` for iteration 100."""
        if int(iteration) < 0:
            raise _C.InvalidArgumentError(f"iteration must be >= 0, got {iteration}")
        return self._manager().path_for(int(iteration))

    def iterations(self) -> list[int]:
        """Iterations with a complete checkpoint, ascending (local)."""
        return list(self._manager().complete_iterations())

    def latest(self) -> int | None:
        """The newest complete checkpoint's iteration, or None (local)."""
        return self._manager().latest_complete()

    def tracker(self) -> int | None:
        """What ``<root>/latest`` says, or None (local)."""
        return self._manager().tracker()

    def save(self, state_dict: dict, iteration: int, **kwargs: Any) -> SaveStats:
        """``shardpoint.save`` into ``path_for(iteration)``, then updates ``latest`` and
        applies retention. Same keyword arguments as ``save``. Returns SaveStats."""
        m = self._manager()
        stats = save(state_dict, self.path_for(iteration), self._comm, **self._with(kwargs))
        m.mark_committed(int(iteration), self._comm)
        return stats

    def save_async(self, state_dict: dict, iteration: int, *, saver: AsyncSaver | None = None,
                   **kwargs: Any) -> SaveHandle:
        """``shardpoint.save_async`` into ``path_for(iteration)``; ``latest`` and
        retention follow in the background once the save committed. ``saver``:
        an AsyncSaver (default: the process's own). Returns a SaveHandle."""
        m = self._manager()
        saver = saver if saver is not None else default_saver()
        it = int(iteration)
        handle = saver._submit(
            state_dict, self.path_for(it), self._comm,
            lambda st, c, opts: m.save_async(saver._saver, st, it, c, opts),
            **self._with(kwargs))
        self._last = handle
        return handle

    def agree_on_latest(self) -> int | None:
        """The newest complete checkpoint's iteration as rank 0 sees it, the same on
        every rank, or None (collective). What ``resume`` loads."""
        m = self._manager()
        _wait_until_comm_idle(self._comm)
        return m.agree_on_latest(self._comm)

    def resume(self, state_dict: dict,
               **kwargs: Any) -> tuple[int, LoadResult] | tuple[None, None]:
        """Loads the newest complete checkpoint (rank 0 chooses it) into
        ``state_dict``. Returns ``(iteration, LoadResult)``, or ``(None, None)``
        when there is none. Same keyword arguments as ``load``."""
        it = self.agree_on_latest()
        if it is None:
            return None, None
        return it, load(state_dict, self.path_for(it), self._comm, **self._with(kwargs))

    def _with(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``kwargs`` with the manager's storage_options unless they name their own."""
        if self._storage_options is not None:
            kwargs.setdefault("storage_options", self._storage_options)
        return kwargs

    def close(self) -> None:
        """Waits for this manager's save in flight (raising its error) and
        releases the lock, at once: not when the last reference to the manager
        goes (a traceback may keep one). Idempotent."""
        last, self._last = self._last, None
        m, self._m = self._m, None
        try:
            if last is not None:
                last.wait()
        finally:
            if m is not None:
                m.close()

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001
            if exc_type is None:
                raise

    def __repr__(self) -> str:
        state = "closed" if self._m is None else f"root={self._m.root!r}"
        return f"CheckpointManager({state})"
