"""The peers with CUDA tensors (`peers_bench.py --device cuda`): every rank's
state lives on the GPU, and each peer saves from and loads into GPU memory.

The DCP peer is torch 2.x's `torch.distributed.checkpoint` with DTensors
(sharded keys: `DTensor.from_local` over a device mesh of the ranks, `Shard(d)`
for TP=W, `[Replicate(), Shard(d)]` on a 2 x W/2 mesh for TP=W/2 x DP=2;
replicated keys: plain tensors), which reshards on load as shardpoint does.
shardpoint stages through its pinned host pool; torch.save copies each tensor
to the host and `torch.load(map_location=<this rank's device>)` puts it back
(formats.TorchSave, as on the CPU).

Ranks may share one GPU (this project's GPU machines have one): the process
group is gloo (NCCL refuses two ranks on one device), which DCP uses only for
its planning (objects), never for tensor data.
"""

import torch

from peers import state as S


class CudaRank:
    """This rank on the GPU: its place in the job, the model, its state, the device meshes."""

    def __init__(self, rank, world, specs, comm):
        from torch.distributed.device_mesh import init_device_mesh
        self.rank, self.world, self.specs, self.comm = rank, world, specs, comm
        self.device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(self.device)
        self.mesh_tp = init_device_mesh("cuda", (world,))
        self.mesh_tp_dp = (init_device_mesh("cuda", (2, world // 2), mesh_dim_names=("dp", "tp"))
                           if world % 2 == 0 else None)
        self.state = self.sharded_state = None

    def make_state(self):
        self.state = self.sharded_state = None
        self.state, self.sharded_state = make_cuda_tensors(self, "same")

    def fill(self, spec, t):
        """Fills this rank's piece of `spec` (the same layout) on the device."""
        host = torch.empty(t.shape, dtype=t.dtype)
        S.fill(spec, "same", self.rank, self.world, host)
        t.copy_(host)

    def check(self, spec, layout, t):
        S.check(spec, layout, self.rank, self.world, t.cpu())


def make_cuda_tensors(ctx, layout):
    """Zeroed local CUDA tensors of every key under `layout`: (key -> tensor,
    key -> DCP value). Sharded keys are DTensors whose local tensor is the
    plain tensor; replicated keys plain tensors."""
    from torch.distributed.tensor import DTensor, Replicate, Shard
    tensors, dcp_values = {}, {}
    tp = S.tp_size(layout, ctx.world)
    for s in ctx.specs:
        d = s.dims[layout]
        if d is None:
            t = torch.zeros(s.shape, dtype=s.dtype, device=ctx.device)
            dcp_values[s.key] = t
        else:
            local = torch.zeros(s.local_shape(layout, ctx.world), dtype=s.dtype,
                                device=ctx.device)
            mesh, placements = ((ctx.mesh_tp, [Shard(d)]) if tp == ctx.world else
                                (ctx.mesh_tp_dp, [Replicate(), Shard(d)]))
            dt = DTensor.from_local(local, mesh, placements, run_check=False,
                                    shape=torch.Size(s.shape), stride=_strides(s.shape))
            t = dt.to_local()
            assert t.data_ptr() == local.data_ptr(), s.key  # DCP fills `t` in place
            dcp_values[s.key] = dt
        tensors[s.key] = t
    return tensors, dcp_values


def _strides(shape):
    out, n = [], 1
    for d in reversed(shape):
        out.append(n)
        n *= d
    return tuple(reversed(out))


class Dcp2:
    """torch 2.x DCP (`torch.distributed.checkpoint.save` / `load`,
    FileSystemWriter/Reader with their defaults) of DTensors."""
    name = "PyTorch DCP"

    def save(self, ctx, path):
        import torch.distributed.checkpoint as dcp
        dcp.save(ctx.sharded_state, storage_writer=dcp.FileSystemWriter(path))

    def load(self, ctx, path, layout, tensors, dcp_values):
        import torch.distributed.checkpoint as dcp
        dcp.load(dcp_values, storage_reader=dcp.FileSystemReader(path))


def cuda_peers():
    from peers.formats import (Shardpoint, ShardpointCooperative, ShardpointLargeReads,
                               ShardpointNoHints, ShardpointNoVerify, ShardpointOneStream,
                               ShardpointOneThread, TorchSave)

    from shardpoint import _staging

    class PinningPool(_staging._PinnedPool):
        def take_free(self, like):  # a load's buffer: pinned when none is free
            buf = super().take_free(like)
            return self.new(like) if buf is None else buf

    class ShardpointPinnedLoads(Shardpoint):
        """shardpoint's loads as before 2026-11-27: into pinned buffers, allocated
        (and kept) per shape. Its own pool, so that the default's loads never
        find the buffers this one pinned."""
        name = "shardpoint, pinned loads"
        pool = None

        def load(self, ctx, path, layout, tensors, dcp_values):
            self.pool = self.pool or PinningPool()
            saved, _staging._POOL = _staging._POOL, self.pool
            try:
                return super().load(ctx, path, layout, tensors, dcp_values)
            finally:
                _staging._POOL = saved

    class ShardpointOneGroup(Shardpoint):
        """shardpoint's loads as before 2026-11-27 (afternoon): every device tensor
        read first, then copied to the device (one tensor group)."""
        name = "shardpoint, one group"

        def load(self, ctx, path, layout, tensors, dcp_values):
            saved, _staging.GROUP_BYTES = _staging.GROUP_BYTES, 1 << 62
            try:
                return super().load(ctx, path, layout, tensors, dcp_values)
            finally:
                _staging.GROUP_BYTES = saved

    class ShardpointFreshPages(Shardpoint):
        """shardpoint's loads as before 2026-11-27 (evening): a fresh pageable
        buffer for every tensor, each page faulted in by the reader, where the
        groups now take turns in two arenas."""
        name = "shardpoint, fresh staging pages"

        def load(self, ctx, path, layout, tensors, dcp_values):
            saved, _staging.ARENAS = _staging.ARENAS, False
            try:
                return super().load(ctx, path, layout, tensors, dcp_values)
            finally:
                _staging.ARENAS = saved

    return {p.name: p for p in (Shardpoint(), ShardpointCooperative(), ShardpointLargeReads(),
                                ShardpointNoHints(), ShardpointOneThread(), ShardpointOneStream(),
                                ShardpointNoVerify(), ShardpointPinnedLoads(),
                                ShardpointOneGroup(), ShardpointFreshPages(), TorchSave(),
                                Dcp2())}


def host_copy(ctx, buf, to_buffer):
    """memcpy's CUDA row: every state tensor to (or from) one pinned host buffer."""
    off = 0
    for t in ctx.state.values():
        b = t.view(-1).view(torch.uint8)
        if to_buffer:
            buf[off:off + b.numel()].copy_(b, non_blocking=True)
        else:
            b.copy_(buf[off:off + b.numel()], non_blocking=True)
        off += b.numel()
    torch.cuda.synchronize()
