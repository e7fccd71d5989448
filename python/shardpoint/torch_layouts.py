"""Layouts from torch's own sharded types: ``torch.distributed._shard``'s
ShardedTensor (torch 1.13 and later) and DTensor (torch >= 2.4), mapped onto the
layout builders of ``shardpoint.sharded``. ``save``/``load`` call
``from_torch`` for every such tensor in a state dict, so they need no
hand-written layout. Nothing here imports torch: the types are recognised by
their class."""

from __future__ import annotations

from typing import Any

from shardpoint import _shardpoint as _C
from shardpoint import sharded as _sh

__all__ = ["is_torch_sharded", "from_torch", "local_tensor"]


def _kind(t: Any) -> str | None:
    for cls in type(t).__mro__:
        mod = cls.__module__ or ""
        if cls.__name__ == "ShardedTensor" and mod.startswith("torch.distributed._shard"):
            return "sharded"
        if cls.__name__ == "DTensor" and mod.startswith("torch.distributed"):
            return "dtensor"
    return None


def is_torch_sharded(t: Any) -> bool:
    """True for a torch ShardedTensor or DTensor."""
    return _kind(t) is not None


def local_tensor(t: Any) -> Any:
    """The tensor holding this rank's data: a DTensor's local tensor, the single
    local shard of a ShardedTensor, else ``t``."""
    k = _kind(t)
    if k == "dtensor":
        return t._local_tensor
    if k == "sharded":
        shards = t.local_shards()
        if len(shards) != 1:
            raise _C.InvalidArgumentError(f"a ShardedTensor with {len(shards)} local shards on "
                                          "this rank has no single local tensor")
        return shards[0].tensor
    return t


def _sharded_tensor(key: str, t: Any) -> list[_sh.ShardedTensor]:
    gshape = [int(d) for d in t.size()]
    out = []
    for shard in t.local_shards():
        md = shard.metadata
        if [int(d) for d in md.shard_sizes] != list(shard.tensor.shape):
            raise _C.InvalidArgumentError(
                f"'{key}': local shard of shape {list(shard.tensor.shape)} but its metadata "
                f"says {list(md.shard_sizes)}")
        out.append(_sh.ShardedTensor(key, shard.tensor, gshape,
                                     [int(o) for o in md.shard_offsets]))
    return out


def _placement(key: str, p: Any) -> _C.Placement:
    name = type(p).__name__
    if name == "_StridedShard":
        return _sh.StridedShard(int(p.dim), int(p.split_factor))
    if name == "Shard" or (hasattr(p, "is_shard") and p.is_shard()):
        return _sh.Shard(int(p.dim))
    if name == "Replicate" or (hasattr(p, "is_replicate") and p.is_replicate()):
        return _sh.Replicate()
    raise _C.InvalidArgumentError(
        f"'{key}': DTensor placement {p!r} cannot be saved (a Partial sum is not a value yet: "
        "redistribute it to Replicate or Shard first)")


def _dtensor(key: str, t: Any) -> _sh.ShardedTensor:
    mesh = t.device_mesh
    coord = mesh.get_coordinate()
    if coord is None:
        raise _C.InvalidArgumentError(f"'{key}': this rank is not in the DTensor's device mesh")
    placements = [_placement(key, p) for p in t.placements]
    return _sh.dtensor(key, t._local_tensor, [int(d) for d in t.shape],
                       [int(d) for d in mesh.mesh.shape], [int(c) for c in coord], placements)


def from_torch(key: str, t: Any) -> _sh.ShardedTensor | list[_sh.ShardedTensor]:
    """The layout of ``t`` under global name ``key``: a list of ShardedTensors (one per
    local shard) for a torch ShardedTensor, one for a DTensor, a whole tensor else."""
    k = _kind(t)
    if k == "sharded":
        return _sharded_tensor(key, t)
    if k == "dtensor":
        return _dtensor(key, t)
    return _sh.whole(key, t)
