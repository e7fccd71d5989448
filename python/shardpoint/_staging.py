"""Device tensors (CUDA) through pinned host memory.

The C++ engine reads and writes host memory. A save copies each device
tensor into a pinned host buffer (all copies queued, then one stream
synchronize) and hands the buffer to C++. Pinned buffers come from one
process-wide pool keyed by dtype and shape, so a training job that saves the
same state every N steps allocates its pinned memory once.

A load reads into host buffers and copies them to the device afterwards: a
pooled pinned buffer where one of that dtype and shape is free (a job that
saved this layout before), else ordinary pageable memory. Pinning costs
several times a pageable copy (the driver locks and maps every page), so a
process that loads a layout once (a resume before any save, an evaluation,
an export) does not pin what it will not reuse; its first save pins. The
pageable buffers of a load's tensor groups take turns in two arenas
(``_arenas``), so that a load faults in two groups' pages, not its whole
share. CPU tensors never come here.
"""

from __future__ import annotations

import threading
from typing import Any

from shardpoint._arenas import MAX_ARENA, GroupArenas

__all__ = ["is_device_tensor", "DeviceStaging", "pool_bytes"]


def is_device_tensor(t: Any) -> bool:
    """True for a torch CUDA tensor (other devices are refused by describe)."""
    dev = getattr(t, "device", None)
    return getattr(dev, "type", None) == "cuda" and hasattr(t, "data_ptr")


class _PinnedPool:
    def __init__(self) -> None:
        self._free: dict[tuple, list] = {}
        self._lock = threading.Lock()
        self.bytes = 0

    def take_free(self, like: Any) -> Any:
        """A free pooled buffer like ``like``, or None."""
        with self._lock:
            free = self._free.get((like.dtype, tuple(like.shape)))
            return free.pop() if free else None

    def take(self, like: Any) -> Any:
        """A free pooled buffer like ``like``, else a new pinned one (pooled on give)."""
        buf = self.take_free(like)
        return self.new(like) if buf is None else buf

    def new(self, like: Any) -> Any:
        import torch
        buf = torch.empty(like.shape, dtype=like.dtype, pin_memory=True)
        with self._lock:
            self.bytes += buf.numel() * buf.element_size()
        return buf

    def give(self, buf: Any) -> None:
        with self._lock:
            self._free.setdefault((buf.dtype, tuple(buf.shape)), []).append(buf)


_POOL = _PinnedPool()


def pool_bytes() -> int:
    """Pinned host bytes this process holds for device tensors."""
    return _POOL.bytes


# A load's device tensors are read and copied in groups of about this many bytes.
GROUP_BYTES = 64 << 20
# The groups' pageable buffers take turns in two arenas (False: a fresh buffer
# for each tensor, as before 2026-11-27's evening; the bench compares both).
ARENAS = True
# Pageable buffers of at least this many bytes are mappings of their own.
OWN_MAPPING_BYTES = 1 << 20


def _pageable(like: Any) -> Any:
    """An empty pageable buffer like ``like``. A large one is an anonymous mapping
    of its own, unmapped when freed: memory from the heap could stay with the
    process after a free (glibc keeps freed chunks below its adaptive mmap
    threshold), and then the groups' buffers freed one by one would not lower
    the load's peak."""
    import torch
    n = like.numel() * like.element_size()
    if n < OWN_MAPPING_BYTES:
        return torch.empty(like.shape, dtype=like.dtype)
    import mmap
    m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return torch.frombuffer(m, dtype=torch.uint8).view(like.dtype).view(like.shape)


class DeviceStaging:
    """The host buffers of one save or load. ``host(t, index)`` returns the
    buffer C++ uses for device tensor ``t``, the state's tensor ``index`` (a
    save's holds a copy of it, queued); ``ready()`` waits for the queued
    device-to-host copies; ``release()`` returns the pinned buffers to the
    pool. ``keep_values`` (load): copy each tensor into its buffer first, for
    loads that may leave some of it unwritten (``allow_missing_keys``: a key
    the checkpoint lacks keeps its values); a strict load writes all of every
    buffer, so it skips that copy.

    A load copies to the devices while it reads: ``groups(n)`` splits the
    device tensors, in state order, into groups of about ``GROUP_BYTES``
    (``LoadOptions.tensor_groups``), and C++ calls ``on_group_loaded(g)`` as
    each group is complete; a copier thread then copies that group to its
    devices and frees its pageable buffers, while C++ reads the next group.
    ``finish()`` waits for the copier (and copies what no call announced)."""

    def __init__(self, load: bool, keep_values: bool = True, reuse: bool = False) -> None:
        self.load = load
        self.copy_in = not load or keep_values
        self.pairs: list[tuple[Any, Any] | None] = []
        self.pinned: list[Any] = []
        self._index: list[int] = []  # the state's tensor index of each pair
        self._group: list[int] = []  # the group of each pair
        self._queue: Any = None
        self._copier: threading.Thread | None = None
        self._copied: set[int] = set()
        self._error: BaseException | None = None
        self._devices: set[Any] = set()
        self._owners: list[Any] = []  # what keeps C++'s view of each buffer alive
        self._last_group, self._group_size = 0, 0
        # group g's pageable buffers in arena g % 2: only where every group is
        # announced in order (not cooperative) and no value is copied in first
        use = load and reuse and ARENAS and not self.copy_in and GROUP_BYTES <= MAX_ARENA
        self._arenas = GroupArenas(GROUP_BYTES) if use else None
        self._copied_event: list[threading.Event] = []

    def host(self, t: Any, index: int = -1) -> Any:
        group = self._next_group(t.numel() * t.element_size())
        if self.load:
            h = _POOL.take_free(t)
            if h is None:  # see the module's doc
                h = self._arenas.take(t, group) if self._arenas is not None else None
                h = _pageable(t) if h is None else h
            else:
                self.pinned.append(h)
        else:
            h = _POOL.take(t)
            self.pinned.append(h)
        if self.copy_in:
            h.copy_(t.detach(), non_blocking=True)
        self.pairs.append((h, t))
        self._owners.append(None)
        self._index.append(index)
        self._group.append(group)
        if t.device.type == "cuda":
            self._devices.add(t.device)
        return h

    def hold(self, owner: Any) -> None:
        """Keeps ``owner`` (the object behind C++'s view of the last buffer) as long
        as that buffer."""
        self._owners[-1] = owner

    def _next_group(self, nbytes: int) -> int:
        """The group of the next device tensor: groups of about GROUP_BYTES, in
        state order (one larger tensor is a group of its own)."""
        if self._group_size and self._group_size + nbytes > GROUP_BYTES:
            self._last_group, self._group_size = self._last_group + 1, 0
        self._group_size += nbytes
        return self._last_group

    def groups(self, n: int) -> list[int]:
        """The group of each of the state's ``n`` tensors (host tensors: 0), and
        starts the copier."""
        out = [0] * n
        for g, i in zip(self._group, self._index):
            out[i] = g
        self._copied_event = [threading.Event() for _ in range(self._last_group + 1)]
        import queue
        self._queue = queue.SimpleQueue()
        self._copier = threading.Thread(target=self._copy_groups, name="shardpoint-h2d",
                                        daemon=True)
        self._copier.start()
        return out

    def on_group_loaded(self, g: int) -> None:
        """Called by C++ (with the GIL) when every byte of group ``g`` is in place.
        With arenas, returns once group g - 1 is copied out: the engine reads
        group g + 1, into g - 1's arena, when this returns."""
        self._queue.put(g)
        if self._arenas is not None and g >= 1:
            self._copied_event[g - 1].wait()  # releases the GIL for the copier

    def _copy_group(self, g: int) -> None:
        import torch
        pinned = {id(h) for h in self.pinned}
        with torch.no_grad():
            for k, pair in enumerate(self.pairs):
                if pair is None or self._group[k] != g:
                    continue
                h, t = pair
                t.copy_(h, non_blocking=True)
                if id(h) not in pinned:  # a pageable copy has read h when copy_ returns
                    self.pairs[k] = self._owners[k] = None  # C++ is done with it: freed
        self._copied.add(g)

    def _copy_groups(self) -> None:
        while True:
            g = self._queue.get()
            if g is None:
                return
            if self._error is None:
                try:
                    self._copy_group(g)
                except BaseException as e:  # noqa: BLE001 - raised by finish()
                    self._error = e
            self._copied_event[g].set()  # copied, or never will be (an error)

    def _stop_copier(self) -> None:
        if self._copier is not None:
            self._queue.put(None)
            self._copier.join()
            self._copier = None

    def _sync(self) -> None:
        import torch
        for dev in self._devices:
            torch.cuda.synchronize(dev)

    def ready(self) -> None:
        if self.pairs:
            self._sync()

    def finish(self) -> None:
        if not self.load or not self.pairs:
            return
        self._stop_copier()
        if self._error is not None:
            raise self._error
        for g in sorted(set(self._group) - self._copied):  # none unannounced, normally
            self._copy_group(g)
        self._sync()

    def release(self) -> None:
        self._stop_copier()
        for h in self.pinned:
            _POOL.give(h)
        self.pairs, self.pinned, self._owners, self._index, self._group = [], [], [], [], []
