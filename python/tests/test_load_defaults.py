"""sp.load's and sp.save's defaults (issue 38): O_DIRECT reads for a local
shardpoint checkpoint, buffered reads for the other kinds (a DCP checkpoint's
default stays buffered: test_dcp.py::test_reads_only_the_needed_bytes)."""

import os

import pytest
import torch

import shardpoint as sp


def _takes_o_direct(path):
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
    except OSError:
        return False
    return True


def test_a_shardpoint_checkpoint_loads_with_direct_reads_by_default(tmp_path):
    # 4 MiB of f32 in one chunk whose bytes start after the file's header, so
    # an unverified column strip's requests are unaligned: a direct read widens
    # each to 4096-aligned bounds (reads more than planned), a buffered one
    # reads exactly what was planned.
    gen = torch.Generator().manual_seed(38)
    g = torch.randn(1024, 1024, generator=gen)
    sp.save({"w": g}, tmp_path / "c")
    if not _takes_o_direct(tmp_path / "c" / "manifest"):
        pytest.skip("the filesystem under tmp_path refuses O_DIRECT")
    planned = 4 * (255 * 4096 + 1024)

    def strip(**kw):
        cols = torch.zeros(1024, 256)
        r = sp.load({"w": sp.chunk("w", cols, [1024, 1024], 1, 1, 4)}, tmp_path / "c",
                    verify_checksums=False, **kw)
        assert torch.equal(cols, g[:, 256:512])
        return r.bytes_read

    assert strip(direct_io=False) == planned
    by_default = strip()
    assert planned < by_default <= planned + 4 * 8192, by_default
    assert strip(direct_io=True) == by_default
    whole = torch.zeros(1024, 1024)  # a verified whole load: bit for bit as well
    assert sp.load({"w": whole}, tmp_path / "c").bytes_read == 4 << 20
    assert torch.equal(whole, g)


def test_direct_default_is_off_where_it_cannot_help(tmp_path):
    # an object store path, and a directory that is no checkpoint (the load
    # then fails with its own error, not one from the kind probe)
    from shardpoint._checkpoint import _direct_by_default
    assert _direct_by_default("s3://bucket/ckpt", None) is False
    assert _direct_by_default(str(tmp_path), {"endpoint": "http://x"}) is False
    assert _direct_by_default(str(tmp_path / "absent"), None) is False
    with pytest.raises(sp.NotFoundError):
        sp.load({"w": torch.zeros(2)}, tmp_path / "absent")


def test_python_saves_stage_through_2_mib_buffers(tmp_path):
    # the default measured fastest in bench/peers_bench.py's restart order
    # (docs/performance.md, *Tuning*); an explicit value still wins, and the
    # checkpoint loads back bit for bit either way
    from shardpoint._checkpoint import _save_options
    assert _save_options(False, None, None, None, True, None).staging_bytes == 2 << 20
    assert _save_options(False, None, 1 << 20, None, True, None).staging_bytes == 1 << 20
    gen = torch.Generator().manual_seed(38)
    g = torch.randn(700, 1500, generator=gen)  # 4.2 MB: three 2 MiB buffers and a part
    sp.save({"g": g}, tmp_path / "c")
    out = torch.zeros_like(g)
    sp.load({"g": out}, tmp_path / "c")
    assert torch.equal(out, g)


def test_ranks_reading_strips_alone_read_buffered(tmp_path):
    # Two ranks without the block exchange, unverified (requests as needed,
    # 4000-byte rows: unaligned). A rank whose pieces are strips of the saved
    # chunk (columns) reads the blocks around them, which the other rank
    # reads too: those go through the page cache even with direct_io=True
    # (the bytes a buffered load reads, none widened); rows are one run of
    # the chunk each and are read direct (widened to 4096-aligned bounds).
    from conftest import run_ranks
    gen = torch.Generator().manual_seed(38)
    g = torch.randn(1000, 1000, generator=gen)
    sp.save({"w": g}, tmp_path / "c")
    if not _takes_o_direct(tmp_path / "c" / "manifest"):
        pytest.skip("the filesystem under tmp_path refuses O_DIRECT")

    def load(dim, direct):
        def body(r, comm):
            # one element into its storage: no destination lines up with the
            # file's 4096-byte blocks, so a direct read goes through the
            # aligned staging (a destination that lines up by chance takes
            # the bytes in place, unwidened: allocator-dependent)
            shape = [1000, 500] if dim == 1 else [500, 1000]
            t = torch.zeros(500001)[1:].view(shape)
            res = sp.load({"w": sp.chunk("w", t, [1000, 1000], dim, r, 2)}, tmp_path / "c", comm,
                          cooperative=False, direct_io=direct, verify_checksums=False)
            want = g[:, 500 * r:500 * (r + 1)] if dim == 1 else g[500 * r:500 * (r + 1)]
            assert torch.equal(t, want)
            return res.bytes_read
        return run_ranks(2, body)

    assert load(1, True) == load(1, False)
    assert load(0, False) == [2000000, 2000000]
    rows = load(0, True)
    assert all(2000000 < b <= 2000000 + 8192 for b in rows), rows


def test_python_comms_exchange_blocks_in_small_rounds(tmp_path):
    # Over a comm written in Python the block exchange is on by default (its
    # same-node bytes move through shared memory: test_shm_exchange.py) and
    # moves its blocks in rounds of at most 16 MiB (fresh memory per round in
    # a new process); the C++ comms keep C++'s 256 MiB rounds; an explicit
    # value wins everywhere.
    from conftest import run_ranks
    from test_comm_conformance import PyThreadBufferComm
    from test_comm import PyThreadGroup
    gen = torch.Generator().manual_seed(38)
    g = torch.randn(1024, 1024, generator=gen)  # 4 MiB: four verified 1 MiB blocks
    sp.save({"w": g}, tmp_path / "c")

    def options(comm, **kw):
        seen = []

        def native(st, path, c, o):
            seen.append((o.cooperative, o.cooperative_round_bytes))
            return sp._shardpoint.load(st, path, c, o)
        out = torch.zeros(1024, 1024)
        sp.load({"w": out}, tmp_path / "c", comm, _native=native, **kw)
        assert torch.equal(out, g)
        return seen[0]

    python_comm = PyThreadBufferComm(PyThreadGroup(1), 0)
    assert options(python_comm) == (True, 16 << 20)
    assert options(sp.single()) == (True, 256 << 20)
    assert options(python_comm, cooperative_round_bytes=1 << 20) == (True, 1 << 20)
    with pytest.raises(ValueError, match="cooperative_round_bytes"):
        options(python_comm, cooperative_round_bytes=-1)

    # Four ranks loading column strips (every rank needs a part of every
    # block) with the exchange over the Python comm, in rounds of 1 MiB: bit
    # for bit, each block read once (bytes read per needed byte 1.00; 4.00
    # without the exchange), in several exchanges of at most a round each.
    group = PyThreadGroup(4)
    sizes = []

    class Sized(PyThreadBufferComm):
        def all_to_all_buffer(self, send, counts):
            sizes.append(len(send))
            return super().all_to_all_buffer(send, counts)

    comms = [Sized(group, r) for r in range(4)]

    def body(r, comm):
        t = torch.zeros(1024, 256)
        res = sp.load({"w": sp.chunk("w", t, [1024, 1024], 1, r, 4)}, tmp_path / "c", comm,
                      cooperative=True, cooperative_round_bytes=1 << 20)
        assert torch.equal(t, g[:, 256 * r:256 * (r + 1)])
        return res.bytes_read

    read = run_ranks(4, body, comms)
    assert sum(read) == 4 << 20, read  # needed: 4 x 1 MiB of strips
    assert group.calls.count("all_to_all_buffer") >= 4 * 4, group.calls
    assert max(sizes) <= (1 << 20) + 64, max(sizes)
