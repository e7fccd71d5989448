"""The peers: how each one saves this rank's state and loads it into a template.

Every peer gets the same state (`Rank.state`: key -> this rank's local tensor)
and loads into the same templates (key -> local tensor under the target
layout, zero-filled and faulted in beforehand). Every save ends with its files
on disk (fsync of files and directories), as shardpoint's commit does.
"""

import os

import numpy as np
import torch

from peers import state as S
from peers.measure import fsync_path


class Rank:
    """This rank: its place in the job, the model and (during saves) its state."""

    def __init__(self, rank, world, specs, comm, dcp):
        self.rank, self.world, self.specs, self.comm, self.dcp = rank, world, specs, comm, dcp
        # TP groups of the tp_dp layout ({0..W/2-1}, {W/2..W-1}): DCP's ShardedTensors need them
        half = world // 2
        self.tp_groups = ([torch.distributed.new_group(list(range(d * half, (d + 1) * half)))
                           for d in range(2)] if world % 2 == 0 else None)
        self.state = self.sharded_state = None

    def make_state(self):
        """Allocates this rank's state (zeros): key -> tensor, and key -> DCP value."""
        self.state = self.sharded_state = None
        self.state, self.sharded_state = make_tensors(self, "same")

    def fill(self, spec, t):
        """Fills this rank's piece of `spec` under the saved layout."""
        S.fill(spec, "same", self.rank, self.world, t)

    def check(self, spec, layout, t):
        S.check(spec, layout, self.rank, self.world, t)


def make_tensors(ctx, layout):
    """Zeroed local tensors of every key under `layout`: (key -> tensor, key ->
    DCP value). Sharded keys are torch ShardedTensors with a ChunkShardingSpec
    (the plain tensors are their local shards); replicated keys plain tensors."""
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec
    tensors, dcp_values = {}, {}
    tp = S.tp_size(layout, ctx.world)
    placements = [f"rank:{r}/cpu" for r in range(tp)]
    group = ctx.tp_groups[ctx.rank // tp] if tp != ctx.world else None
    for s in ctx.specs:
        d = s.dims[layout]
        if d is None:
            t = torch.zeros(s.shape, dtype=s.dtype)
            dcp_values[s.key] = t
        else:
            st = sharded_tensor.empty(ChunkShardingSpec(dim=d, placements=placements), *s.shape,
                                      dtype=s.dtype, process_group=group)
            t = st.local_shards()[0].tensor
            assert tuple(t.shape) == s.local_shape(layout, ctx.world), (s.key, t.shape)
            t.zero_()
            dcp_values[s.key] = st
        tensors[s.key] = t
    return tensors, dcp_values


def _as_numpy(t):
    """A numpy view of a tensor's memory (bf16 as int16: numpy has no bfloat16)."""
    return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy()


class Shardpoint:
    name = "shardpoint"
    cooperative = None  # the default: off for Python comms such as TorchDistributedComm

    def _sd(self, ctx, tensors, layout):
        import shardpoint as sp
        out, tp = {}, S.tp_size(layout, ctx.world)
        for s in ctx.specs:
            d = s.dims[layout]
            out[s.key] = (sp.whole(s.key, tensors[s.key]) if d is None else
                          sp.chunk(s.key, tensors[s.key], list(s.shape), d, ctx.rank % tp, tp))
        return out

    writes = {}  # save options beyond the defaults

    def save(self, ctx, path):
        import shardpoint as sp
        sp.save(self._sd(ctx, ctx.state, "same"), path, ctx.comm, **self.writes)

    reads = {}  # load options beyond the defaults

    def load(self, ctx, path, layout, tensors, dcp_values):
        """Returns this rank's split of the call: the engine's seconds (plan, reads,
        verification, placing) and the whole call's (CUDA: + host staging, copies)."""
        import time

        import shardpoint as sp
        t0 = time.perf_counter()
        prof = os.environ.get("PEERS_PROFILE")  # a directory: cProfile of each rank's load
        if prof:
            import cProfile
            pr = cProfile.Profile()
            pr.enable()
        r = sp.load(self._sd(ctx, tensors, layout), path, ctx.comm, cooperative=self.cooperative,
                    **self.reads)
        if prof:
            pr.disable()
            pr.dump_stats(os.path.join(prof, f"{layout}_rank{ctx.rank}.prof"))
        return {"rank": {"engine_seconds": r.seconds, "call_seconds": time.perf_counter() - t0}}


class ShardpointCooperative(Shardpoint):
    """shardpoint with `cooperative=True`: bytes several ranks need are read by one
    rank and sent to the others over the (Python) comm."""
    name = "shardpoint, cooperative on"
    cooperative = True


class ShardpointLargeReads(Shardpoint):
    """shardpoint reading as it did before 1 MiB reads and read-ahead hints: 16 MiB
    requests, no prefetch (the same code, other options: a before/after in one run)."""
    name = "shardpoint, 16 MiB reads"
    reads = {"read_slice_bytes": 16 << 20, "prefetch_bytes": 0}


class ShardpointNoHints(Shardpoint):
    """shardpoint's 1 MiB reads without the read-ahead hints (prefetch_bytes 0): with
    "16 MiB reads", tells the request size's share from the hints'."""
    name = "shardpoint, no prefetch hints"
    reads = {"prefetch_bytes": 0}


class ShardpointOneThread(Shardpoint):
    """shardpoint with one I/O thread per rank (io_threads=1): one request in flight
    per rank, as torch.load reads its file."""
    name = "shardpoint, io_threads 1"
    reads = {"io_threads": 1}


class ShardpointOneStream(Shardpoint):
    """shardpoint read as torch.load reads its file: one I/O thread per rank, 64 MiB
    requests, no read-ahead hints (the kernel's own read-ahead only)."""
    name = "shardpoint, one stream"
    reads = {"io_threads": 1, "read_slice_bytes": 64 << 20, "prefetch_bytes": 0}


class ShardpointNoVerify(Shardpoint):
    """shardpoint's loads with checksums off (verify_checksums=False): what verifying
    every byte costs; a resharded load still reads whole blocks."""
    name = "shardpoint, no verify"
    reads = {"verify_checksums": False}


class ShardpointBuffered(Shardpoint):
    """shardpoint's loads through the page cache (direct_io=False), the exchange
    as by default."""
    name = "shardpoint, buffered"
    reads = {"direct_io": False}


class ShardpointDirect(Shardpoint):
    """shardpoint's loads with O_DIRECT reads (direct_io=True), the exchange as
    by default."""
    name = "shardpoint, direct reads"
    reads = {"direct_io": True}


class ShardpointDirectCooperative(Shardpoint):
    """shardpoint with O_DIRECT reads and the block exchange (direct_io=True,
    cooperative=True)."""
    name = "shardpoint, direct + cooperative"
    cooperative = True
    reads = {"direct_io": True}


class ShardpointExchange16(Shardpoint):
    """shardpoint with the block exchange in rounds of 16 MiB (all ranks) and
    O_DIRECT reads (cooperative=True, cooperative_round_bytes=16 MiB)."""
    name = "shardpoint, exchange 16 MiB rounds"
    cooperative = True
    reads = {"direct_io": True, "cooperative_round_bytes": 16 << 20}


class ShardpointAlone(Shardpoint):
    """shardpoint without the block exchange (cooperative=False), reads as by default."""
    name = "shardpoint, no exchange"
    cooperative = False


class ShardpointBufferedIndependent(Shardpoint):
    """shardpoint as it loaded before direct reads and the exchange were its
    defaults over Python comms: buffered, each rank reads what it needs."""
    name = "shardpoint, buffered, no exchange"
    cooperative = False
    reads = {"direct_io": False}


class ShardpointStaging1(Shardpoint):
    """shardpoint's saves through 1 MiB staging buffers (staging_bytes)."""
    name = "shardpoint, 1 MiB staging"
    writes = {"staging_bytes": 1 << 20}


class ShardpointStaging2(Shardpoint):
    """shardpoint's saves through 2 MiB staging buffers (staging_bytes)."""
    name = "shardpoint, 2 MiB staging"
    writes = {"staging_bytes": 2 << 20}


class ShardpointStaging8(Shardpoint):
    """shardpoint's saves through 8 MiB staging buffers (the C++ default)."""
    name = "shardpoint, 8 MiB staging"
    writes = {"staging_bytes": 8 << 20}


class ShardpointBufferedSave(Shardpoint):
    """shardpoint's saves written through the page cache and one fsync per file
    (direct_io=False)."""
    name = "shardpoint, buffered save"
    writes = {"direct_io": False}


class TorchSave:
    """torch.save of a dict of this rank's tensors into rank<r>.pt (CPU or CUDA)."""
    name = "torch.save"

    def save(self, ctx, path):
        f_path = os.path.join(path, f"rank{ctx.rank}.pt")
        with open(f_path, "wb") as f:
            torch.save(ctx.state, f)
            f.flush()
            os.fsync(f.fileno())
        fsync_path(path)

    def load(self, ctx, path, layout, tensors, dcp_values):
        for src in range(ctx.world):
            wanted = _wanted(ctx, layout, src)
            if not wanted:
                continue
            saved = torch.load(os.path.join(path, f"rank{src}.pt"),  # CUDA: onto this rank's GPU
                               map_location=getattr(ctx, "device", None))
            for spec, part, within in wanted:
                box = spec.box(layout, ctx.rank, ctx.world)
                src_part = saved[spec.key][S.slices(part, within)]
                tensors[spec.key][S.slices(part, box)].copy_(src_part)
            del saved


def _wanted(ctx, layout, src):
    """[(spec, overlap box, box saved by src)] that this rank reads from rank src's
    files: the overlap of its piece with src's; replicated tensors from its own."""
    out = []
    for s in ctx.specs:
        if s.dims["same"] is None and src != ctx.rank:
            continue
        saved = s.box("same", src, ctx.world)
        part = S.overlap(saved, s.box(layout, ctx.rank, ctx.world))
        if part is not None:
            out.append((s, part, saved))
    return out


class Numpy:
    """One .npy per tensor per rank (rank<r>/<key>.npy), loaded through mmap."""
    name = "numpy .npy"

    def save(self, ctx, path):
        d = os.path.join(path, f"rank{ctx.rank}")
        os.mkdir(d)
        for key, t in ctx.state.items():
            with open(os.path.join(d, key + ".npy"), "wb") as f:
                np.save(f, _as_numpy(t))
                f.flush()
                os.fsync(f.fileno())
        fsync_path(d)
        fsync_path(path)

    def load(self, ctx, path, layout, tensors, dcp_values):
        for src in range(ctx.world):
            for spec, part, within in _wanted(ctx, layout, src):
                saved = np.load(os.path.join(path, f"rank{src}", spec.key + ".npy"), mmap_mode="r")
                box = spec.box(layout, ctx.rank, ctx.world)
                np.copyto(_as_numpy(tensors[spec.key])[S.slices(part, box)],
                          saved[S.slices(part, within)])
                del saved


class Dcp:
    """PyTorch DCP (torch 1.13: torch.distributed._shard.checkpoint), FileSystemWriter/Reader."""
    name = "PyTorch DCP"

    def save(self, ctx, path):
        ctx.dcp.save_state_dict(ctx.sharded_state, ctx.dcp.FileSystemWriter(path))

    def load(self, ctx, path, layout, tensors, dcp_values):
        ctx.dcp.load_state_dict(dcp_values, ctx.dcp.FileSystemReader(path))


PEERS = {p.name: p for p in (Shardpoint(), ShardpointCooperative(), ShardpointLargeReads(),
                             ShardpointNoHints(), ShardpointOneThread(), ShardpointOneStream(),
                             ShardpointNoVerify(), ShardpointBuffered(), ShardpointDirect(),
                             ShardpointDirectCooperative(), ShardpointExchange16(), ShardpointAlone(),
                             ShardpointBufferedIndependent(),
                             ShardpointStaging1(), ShardpointStaging2(), ShardpointStaging8(),
                             ShardpointBufferedSave(),
                             TorchSave(), Numpy(),
                             Dcp())}
