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
