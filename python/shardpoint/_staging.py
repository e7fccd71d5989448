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
an export) does not pin what it will not reuse; its first save pins. CPU
tensors never come here.
"""

from __future__ import annotations

import threading
from typing import Any

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


class DeviceStaging:
    """The host buffers of one save or load. ``host(t)`` returns the buffer C++
    uses for device tensor ``t`` (a save's holds a copy of it, queued);
    ``ready()`` waits for the queued device-to-host copies; ``finish()`` (load)
    copies the buffers to the devices; ``release()`` returns the pinned ones to
    the pool. ``keep_values`` (load): copy each tensor into its buffer first,
    for loads that may leave some of it unwritten (``allow_missing_keys``: a
    key the checkpoint lacks keeps its values); a strict load writes all of
    every buffer, so it skips that copy."""

    def __init__(self, load: bool, keep_values: bool = True) -> None:
        self.load = load
        self.copy_in = not load or keep_values
        self.pairs: list[tuple[Any, Any]] = []
        self.pinned: list[Any] = []

    def host(self, t: Any) -> Any:
        if self.load:
            import torch
            h = _POOL.take_free(t)
            if h is None:
                h = torch.empty(t.shape, dtype=t.dtype)  # pageable: see the module's doc
            else:
                self.pinned.append(h)
        else:
            h = _POOL.take(t)
            self.pinned.append(h)
        if self.copy_in:
            h.copy_(t.detach(), non_blocking=True)
        self.pairs.append((h, t))
        return h

    def _sync(self) -> None:
        import torch
        for dev in {t.device for _, t in self.pairs if t.device.type == "cuda"}:
            torch.cuda.synchronize(dev)

    def ready(self) -> None:
        if self.pairs:
            self._sync()

    def finish(self) -> None:
        if not self.load or not self.pairs:
            return
        import torch
        with torch.no_grad():
            for h, t in self.pairs:
                t.copy_(h, non_blocking=True)
        self._sync()

    def release(self) -> None:
        for h in self.pinned:
            _POOL.give(h)
        self.pairs, self.pinned = [], []
