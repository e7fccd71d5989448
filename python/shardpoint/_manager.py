"""CheckpointManager: one checkpoint per training iteration under a root directory.

    <root>/iter_0000100/   a checkpoint (complete iff it has a manifest)
    <root>/latest          the iteration last committed (updated atomically)
    <root>/.lock           held by the job that writes here

Resume picks the newest *complete* checkpoint, so a save killed half-way is
ignored; ``keep_last=N`` removes older checkpoints after each commit but never
the newest complete one. A second job opening the same root fails with
FailedPreconditionError naming the holder of the lock. The C++
``shardpoint::CheckpointManager`` does the work; see include/shardpoint/manager.h.

With ``local_root``, the manager drives two tiers (the C++
``shardpoint::TieredManager``, include/shardpoint/tiered_manager.h,
docs/local-tier.md): ``save`` follows a schedule, a local checkpoint in node
memory replicated to other nodes every ``local_every`` iterations and a
persistent one under ``root`` every ``persistent_every``, drained in the
background from the local checkpoint; ``resume`` loads the newest checkpoint
complete in either tier.
"""

from __future__ import annotations

import dataclasses
import os
from types import TracebackType
from typing import Any

from shardpoint import _shardpoint as _C
from shardpoint._checkpoint import (AsyncSaver, LoadResult, SaveHandle, SaveStats, _build,
                                    _wait_until_comm_idle, default_saver, load, save)
from shardpoint._staging import DeviceStaging
from shardpoint._storage import storage_for
from shardpoint.comm import Comm, default_comm

__all__ = ["CheckpointManager", "TierStep"]



class _NothingToResume(Exception):
    """Raised out of ``load`` by a tiered resume that found no checkpoint in
    either tier (the native resume returned None); never escapes the manager."""


@dataclasses.dataclass(frozen=True)
class TierStep:
    """What a ``save`` or ``save_async`` of a manager with a local tier did:
    ``local`` (a local checkpoint taken, or started), ``persistent`` (a
    persistent one saved or its drain started), ``committed`` (the iteration
    of a drain that committed in this call, else None), ``handle`` (with
    ``save_async``: the SaveHandle of the local save running in the background,
    else None)."""

    local: bool
    persistent: bool
    committed: int | None
    handle: SaveHandle | None = dataclasses.field(default=None, compare=False)


class CheckpointManager:
    """``CheckpointManager(root, comm=None, keep_last=0, lock=True)``. Collective:
    every rank opens it with the same arguments and calls ``save``, ``save_async``
    and ``resume`` in the same order; ``iterations``, ``latest`` and ``tracker``
    are local. Use it as a context manager (or call ``close``) to release the lock.
    ``lock=False`` skips the lock file (when the scheduler guarantees one writer).

    ``storage_options`` (as ``save``'s, for an ``s3://`` root) apply to the
    manager and to every save, save_async and resume through it; with a local
    tier, to the persistent tier (its drains, saves, commits and resume).

    Two tiers: ``local_root`` (e.g. ``"/dev/shm/myjob"``, the same path on every
    node) turns on the local tier; ``node_id`` (default the hostname) groups
    ranks into nodes, ``replicas`` copies of each rank's data go to other nodes.
    ``save(state_dict, it)`` then takes a local checkpoint when ``it %
    local_every == 0`` and a persistent one when ``it % persistent_every == 0``
    (0: never), drained from the local checkpoint in the background
    (``drain=True``; at most ``drain_bytes_per_second`` per rank, 0 = no bound)
    and committed at a later ``save`` or ``flush``; it returns a ``TierStep``.
    ``keep_local`` local checkpoints stay per node, ``keep_last`` persistent
    ones. ``resume`` loads the newest checkpoint complete in either tier (its
    LoadResult's ``bytes_local``/``bytes_peer``/``bytes_persistent`` say from
    where). ``flush()`` (collective) waits for the drain in flight and commits
    it; ``close`` leaves a drain in flight uncommitted."""

    def __init__(self, root: str | os.PathLike, comm: Comm | None = None, *,
                 keep_last: int = 0, lock: bool = True,
                 local_root: str | os.PathLike | None = None, local_every: int = 1,
                 persistent_every: int = 1, node_id: str | None = None, replicas: int = 1,
                 drain: bool = True, drain_bytes_per_second: int = 0,
                 keep_local: int = 2, storage_options: dict | None = None) -> None:
        self._comm = comm if comm is not None else default_comm()
        if int(keep_last) < 0:
            raise _C.InvalidArgumentError(f"keep_last must be >= 0, got {keep_last}")
        _wait_until_comm_idle(self._comm)
        self._storage_options = storage_options
        self._t: Any = None
        if local_root is None:
            self._m: Any = _C.CheckpointManager.open(os.fspath(root), self._comm,
                                                      int(keep_last), bool(lock),
                                                      storage_for(storage_options))
        else:
            self._t = _C.TieredManager.open(
                str(root), self._comm, os.fspath(local_root), node_id or "", int(replicas),
                int(local_every), int(persistent_every), bool(drain),
                int(drain_bytes_per_second), int(keep_local), int(keep_last), bool(lock),
                storage_for(storage_options))
            self._m = self._t.persistent
            self._local_root = os.fspath(local_root)
        self._last: SaveHandle | None = None
        self._saver: AsyncSaver | None = None  # of the async local save in flight

    @property
    def tiered(self) -> bool:
        """Whether this manager has a local tier (``local_root``)."""
        return self._t is not None

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

    def save(self, state_dict: dict, iteration: int, **kwargs: Any) -> Any:
        """``shardpoint.save`` into ``path_for(iteration)``, then updates ``latest`` and
        applies retention. Same keyword arguments as ``save``. Returns SaveStats.
        With a local tier: the schedule (see the class), ``common``,
        ``metadata`` and ``allow_pickle`` as for ``save``; returns a TierStep."""
        m = self._manager()
        if self._t is not None:
            return self._tier_save(state_dict, int(iteration), **kwargs)
        stats = save(state_dict, self.path_for(iteration), self._comm, **self._with(kwargs))
        m.mark_committed(int(iteration), self._comm)
        return stats

    def _tier_save(self, state_dict: dict, iteration: int, *, saver: AsyncSaver | None = None,
                   common: Any = None, metadata: dict | None = None,
                   allow_pickle: bool = False) -> TierStep:
        self._manager()
        _wait_until_comm_idle(self._comm)  # the manager's own async save too
        staging = DeviceStaging(load=False)
        try:
            st, owners, _ = _build(state_dict, load=False, allow_pickle=allow_pickle,
                                   common=common, metadata=metadata, staging=staging)
            local, persistent, committed, h = self._t.save(
                st, iteration, self._comm, saver._saver if saver is not None else None)
            del owners  # staged (async) or written: the caller's memory is free
        finally:
            staging.release()
        handle: SaveHandle | None = None
        if h is not None and saver is not None:
            handle = SaveHandle(h, self._comm, f"{self._local_root}/iter_{iteration:07d}")
            saver._last = handle  # other collectives on this Comm wait for it
            self._last = handle
            self._saver = saver  # outlives the save in flight
        return TierStep(local, persistent, committed, handle)

    def flush(self) -> int | None:
        """With a local tier: waits for the drain in flight and commits it (collective).
        Returns the iteration it committed, or None. Without: does nothing."""
        self._manager()
        if self._t is None:
            return None
        _wait_until_comm_idle(self._comm)
        return self._t.flush(self._comm)

    def save_async(self, state_dict: dict, iteration: int, *, saver: AsyncSaver | None = None,
                   **kwargs: Any) -> Any:
        """``shardpoint.save_async`` into ``path_for(iteration)``; ``latest`` and
        retention follow in the background once the save committed. ``saver``:
        an AsyncSaver (default: the process's own). Returns a SaveHandle.
        With a local tier: ``save``'s schedule, the local checkpoint written
        and replicated in ``saver``'s background thread after the staging copy
        (the only stall); returns a TierStep whose ``handle`` is that save's
        SaveHandle (None when no local checkpoint was due). The next collective
        call on the manager's Comm waits for it first."""
        m = self._manager()
        saver = saver if saver is not None else default_saver()
        if self._t is not None:
            return self._tier_save(state_dict, int(iteration), saver=saver, **kwargs)
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
        when there is none. Same keyword arguments as ``load``. With a local tier:
        the newest checkpoint complete in either tier (docs/local-tier.md)."""
        if self._t is not None:
            return self._tier_resume(state_dict, **kwargs)
        it = self.agree_on_latest()
        if it is None:
            return None, None
        return it, load(state_dict, self.path_for(it), self._comm, **self._with(kwargs))

    def _with(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``kwargs`` with the manager's storage_options unless they name their own."""
        if self._storage_options is not None:
            kwargs.setdefault("storage_options", self._storage_options)
        return kwargs

    def _tier_resume(self, state_dict: dict,
                     **kwargs: Any) -> tuple[int, LoadResult] | tuple[None, None]:
        t = self._t
        self._manager()
        chosen: list[int] = []

        def native(st: Any, path: str, comm: Any, options: Any) -> Any:
            got = t.resume(st, comm, options)
            if got is None:  # neither tier has one: nothing was loaded
                raise _NothingToResume
            chosen.append(got[0])
            return got[2]

        try:
            result = load(state_dict, self.root, self._comm, _native=native,
                          **self._with(kwargs))
        except _NothingToResume:
            return None, None
        return chosen[0], result

    def close(self) -> None:
        """Waits for this manager's save in flight (raising its error) and
        releases the lock, at once: not when the last reference to the manager
        goes (a traceback may keep one). Idempotent."""
        last, self._last = self._last, None
        m, self._m = self._m, None
        t, self._t = self._t, None
        try:
            if last is not None:
                last.wait()
        finally:
            if m is not None:
                m.close()
            del t  # joins a drain in flight, uncommitted

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
