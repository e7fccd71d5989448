"""Device tensors (CUDA) through pinned host memory.

The C++ engine reads and writes host memory. A save copies each device
tensor into a pinned host buffer (all copies queued, then one stream
synchronize) and hands the buffer to C++; a load reads into pinned buffers
and copies them to the device afterwards. Buffers come from one process-wide
pool keyed by dtype and shape, so a training job that saves the same state
every N steps allocates its pinned memory once. CPU tensors never come here.
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

    def take(self, like: Any) -> Any:
        import torch
        key = (like.dtype, tuple(like.shape))
        with self._lock:
            free = self._free.get(key)
            if free:
                return free.pop()
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
    """The pinned buffers of one save or load. ``host(t)`` returns the buffer C++
    uses for device tensor ``t`` (holding a copy of it, queued); ``ready()``
    waits for the queued device-to-host copies; ``finish()`` (load) copies the
    buffers to the devices; ``release()`` returns the buffers to the pool."""

    def __init__(self, load: bool) -> None:
        self.load = load
        self.pairs: list[tuple[Any, Any]] = []

    def host(self, t: Any) -> Any:
        h = _POOL.take(t)
        # a load copies too: a key the checkpoint lacks (allow_missing_keys) keeps its values
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
        for h, _ in self.pairs:
            _POOL.give(h)
        self.pairs = []
