"""The host buffers behind device tensors (shardpoint._staging), checked here with
CPU tensors (the class moves any torch tensor; only CUDA tensors are sent to it by
save and load, tested in test_cuda.py): a load takes a pooled pinned buffer only
where one is free and otherwise pageable memory that it does not keep, copies the
device values in only when the load may leave some unwritten, and gives back only
pooled buffers."""

import pytest
import torch

from shardpoint import _staging


@pytest.fixture
def pool(monkeypatch):
    p = _staging._PinnedPool()
    monkeypatch.setattr(_staging, "_POOL", p)
    return p


def test_a_load_without_a_free_pooled_buffer_stages_in_memory_it_does_not_keep(pool):
    t = torch.arange(12, dtype=torch.float32).view(3, 4)
    s = _staging.DeviceStaging(load=True, keep_values=False)
    h = s.host(t)
    assert h.shape == t.shape and h.dtype == t.dtype and h.data_ptr() != t.data_ptr()
    h.fill_(7)  # what C++ reads into it
    s.finish()
    s.release()
    assert torch.equal(t, torch.full((3, 4), 7.0))
    assert pool.bytes == 0 and not any(pool._free.values())  # nothing pinned, nothing kept


def test_a_load_takes_a_free_pooled_buffer_and_gives_it_back(pool):
    t = torch.zeros(5, dtype=torch.bfloat16)
    buf = torch.empty(5, dtype=torch.bfloat16)
    pool.give(buf)  # what an earlier save of this shape left
    s = _staging.DeviceStaging(load=True, keep_values=False)
    assert s.host(t) is buf
    assert pool.take_free(t) is None  # in use
    other = s.host(torch.zeros(6, dtype=torch.bfloat16))  # no pooled buffer of that shape
    s.release()
    assert pool.take_free(t) is buf
    assert pool.take_free(other) is None  # the pageable one is not kept


def test_only_a_load_that_may_skip_keys_copies_the_device_values_in(pool):
    t = torch.arange(4, dtype=torch.int64)
    keep = _staging.DeviceStaging(load=True, keep_values=True).host(t)
    assert torch.equal(keep, t)  # allow_missing_keys: an absent key keeps these
    strict = _staging.DeviceStaging(load=True, keep_values=False)
    h = strict.host(t)
    h.copy_(torch.tensor([9, 8, 7, 6]))
    strict.finish()
    assert t.tolist() == [9, 8, 7, 6]


def test_a_save_copies_the_values_in_and_pools_its_buffers(pool, monkeypatch):
    made = []

    def take(like):  # pinned allocation needs CUDA: count the allocations instead
        buf = pool.take_free(like)
        if buf is None:
            buf = torch.empty(like.shape, dtype=like.dtype)
            made.append(buf)
        return buf

    monkeypatch.setattr(pool, "take", take)
    t = torch.arange(6, dtype=torch.float32)
    for _ in range(2):
        s = _staging.DeviceStaging(load=False)
        h = s.host(t)
        assert torch.equal(h, t)
        s.finish()  # a save's finish copies nothing back
        s.release()
    assert len(made) == 1 and pool.take_free(t) is made[0]


def test_a_load_groups_its_device_tensors_by_bytes_in_state_order(pool, monkeypatch):
    monkeypatch.setattr(_staging, "GROUP_BYTES", 100)
    s = _staging.DeviceStaging(load=True, keep_values=False)
    sizes = [40, 40, 40, 200, 10, 10]  # bytes (int8)
    ts = [torch.zeros(n, dtype=torch.int8) for n in sizes]
    for i, t in zip([1, 2, 4, 5, 6, 7], ts):  # the state's tensors 0 and 3 are host tensors
        s.host(t, i)
    # 40 + 40 fit; the third starts group 1; 200 alone; the two small ones together
    assert s.groups(8) == [0, 0, 0, 0, 1, 2, 3, 3]
    s.release()


def test_each_announced_group_is_copied_and_its_pageable_buffers_freed(pool):
    s = _staging.DeviceStaging(load=True, keep_values=False)
    ts = [torch.zeros(3, dtype=torch.float32) for _ in range(3)]
    hs = [s.host(t, i) for i, t in enumerate(ts)]
    s._group = [0, 1, 1]
    for k, h in enumerate(hs):
        h.fill_(k + 1)
    s._copy_group(1)
    assert [t.tolist() for t in ts] == [[0, 0, 0], [2, 2, 2], [3, 3, 3]]  # group 0 waits
    assert s.pairs[0] is not None and s.pairs[1] is None and s.pairs[2] is None
    s.finish()  # copies what no call announced
    assert ts[0].tolist() == [1, 1, 1]
    s.release()


def test_a_copy_that_fails_is_raised_by_finish(pool):
    s = _staging.DeviceStaging(load=True, keep_values=False)
    s.host(torch.zeros(2), 0)
    s.pairs[0] = (torch.zeros(3), s.pairs[0][1])  # a buffer the tensor cannot take
    s.groups(1)
    s.on_group_loaded(0)
    with pytest.raises(RuntimeError):
        s.finish()
    s.release()
    assert s._copier is None


def _mapped(addr):
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= addr < hi:
                return True
    return False


def test_a_large_pageable_buffer_is_a_mapping_of_its_own_unmapped_when_freed():
    del_me = torch.empty(4 << 20, dtype=torch.uint8)  # a free of 4 MiB raises glibc's mmap
    del del_me  # threshold: a torch.empty of 1.5 MiB would now stay mapped after its free
    like = torch.zeros(3, 1 << 18, dtype=torch.bfloat16)  # 1.5 MiB
    h = _staging._pageable(like)
    assert h.shape == like.shape and h.dtype == like.dtype and h.is_contiguous()
    h.fill_(2)  # writable
    addr = h.data_ptr()
    assert addr % 4096 == 0 and _mapped(addr)
    del h
    assert not _mapped(addr)  # unmapped with the tensor (heap memory would stay): the peak falls
    small = _staging._pageable(torch.zeros(10, dtype=torch.int32))
    assert small.shape == (10,) and small.dtype == torch.int32
