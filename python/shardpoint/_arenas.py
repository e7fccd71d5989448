"""Two host memory arenas that the tensor groups of a staged load take turns in.

A load of device tensors reads each group of about ``GROUP_BYTES`` into host
buffers, then copies the group to the device while the next group is read
(``_staging.DeviceStaging``). Fresh buffers cost a page fault per 4 KiB the
first time the reader writes them, and on a virtual machine page faults are
slow (1.3 GB/s for four processes on the GPU machine: bench/results/history.md,
"On a GPU").
Here group g's pageable buffers are views into arena g % 2, so from the third
group on a load writes pages already faulted in: a rank faults in two arenas
instead of its whole share. The caller must not let group g + 2 be written
before group g has been copied out (DeviceStaging waits for it in
``on_group_loaded``, and the engine reads nothing of group g + 1 before that
call for group g returns).
"""

from __future__ import annotations

from typing import Any

ALIGN = 4096  # each buffer starts on a page of its own
SLACK = 1 << 20  # room for the alignment of a group's buffers
MAX_ARENA = 256 << 20  # no arenas for larger groups (GROUP_BYTES raised)


class GroupArenas:
    def __init__(self, group_bytes: int) -> None:
        self.capacity = group_bytes + SLACK
        self._maps: list[Any] = [None, None]
        self._group = -1
        self._offset = 0

    @property
    def mapped_bytes(self) -> int:
        """Bytes of the arenas mapped so far (at most two capacities)."""
        return sum(len(m) for m in self._maps if m is not None)

    def take(self, like: Any, group: int) -> Any:
        """A buffer like ``like`` in group ``group``'s arena, or None where the
        group's buffers do not fit (the caller then maps a fresh one). Groups
        come in ascending order."""
        import mmap

        import torch
        n = like.numel() * like.element_size()
        if group != self._group:
            self._group, self._offset = group, 0
        start = -(-self._offset // ALIGN) * ALIGN
        if n == 0 or start + n > self.capacity:
            return None
        m = self._maps[group % 2]
        if m is None:
            m = self._maps[group % 2] = mmap.mmap(
                -1, self.capacity, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._offset = start + n
        raw = torch.frombuffer(m, dtype=torch.uint8, count=n, offset=start)
        return raw.view(like.dtype).view(like.shape)
