"""ShardedTensor and the layout builders.

A ShardedTensor is this rank's local tensor (``data``: a numpy array or a torch
CPU tensor) plus its layout: which boxes of which global tensors it holds
(a C++ ``LocalTensor`` whose address is filled in at save/load time). The
builders below compute layouts in the vocabulary of the field (Megatron TP,
DTensor placements, fused weights, flat buffers); they are thin wrappers of
the C++ builders, whose errors they raise as ``InvalidArgumentError``.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

from shardpoint import _shardpoint as _C
from shardpoint._tensors import Array, DTypeLike, describe, to_dtype

__all__ = [
    "ShardedTensor", "Shard", "Replicate", "StridedShard", "whole", "chunk", "split",
    "column_parallel", "row_parallel", "vocab_parallel", "dtensor", "shard_local", "flat_shard",
    "concat", "fused", "FusedPart", "swiglu_fc1", "gqa_qkv", "GqaDims", "flat_buffer",
    "padded_vocab_size", "chunk_sizes", "PipelineLayout", "stage_layers", "global_layer",
    "layer_key", "ExpertParallel", "per_expert_weights", "stacked_experts",
    "fused_gate_up_experts", "GdnDims", "gdn_in_proj", "gdn_conv1d",
]

FusedPart = _C.FusedPart
GqaDims = _C.GqaDims
padded_vocab_size = _C.padded_vocab_size
chunk_sizes = _C.chunk_sizes
PipelineLayout = _C.PipelineLayout  # (num_layers, pp_size=1, vp_size=1, chunk_layers=[])
stage_layers = _C.stage_layers  # (layout, pp_rank, vp_stage=0) -> global layer numbers
global_layer = _C.global_layer  # (layout, pp_rank, vp_stage, local_index) -> global layer
layer_key = _C.layer_key  # ("decoder.layers", 5, "mlp.fc1.weight") -> "decoder.layers.5.mlp..."
ExpertParallel = _C.ExpertParallel  # (num_experts, ep_rank=0, ep_size=1)
GdnDims = _C.GdnDims  # (key_heads, key_dim, value_heads, value_dim)


def _shape(x: Sequence[int]) -> list[int]:
    return [int(d) for d in x]


class ShardedTensor:
    """This rank's piece of one or more global tensors.

    ``ShardedTensor(key, data, global_shape, global_offset)`` says that
    ``data`` is the box of global tensor ``key`` starting at ``global_offset``
    (default: all zeros) with ``data``'s shape. With ``flat_range=(begin,
    end)``, ``data`` holds only those row-major elements of a local box of
    ``local_shape`` (an FSDP / distributed-optimizer shard; ``data`` must be
    contiguous). ``replica_id`` is informational: ranks that hold the same box
    are replicas and one of them writes it. ``dtype`` reinterprets the
    elements (a uint16 array as "bf16", uint8 as "f8_e4m3").

    ``data`` may be None for a layout only (a part of ``concat`` or
    ``flat_buffer``); then ``dtype`` is required.
    """

    def __init__(self, key: str, data: Array | None, global_shape: Sequence[int] | None = None,
                 global_offset: Sequence[int] | None = None, *,
                 flat_range: tuple[int, int] | None = None,
                 local_shape: Sequence[int] | None = None, replica_id: int = 0,
                 dtype: DTypeLike | None = None) -> None:
        desc = describe(data, dtype, device_ok=True) if data is not None else None
        dt = desc.dtype if desc is not None else to_dtype(dtype if dtype is not None else "f32")
        if flat_range is None:
            if local_shape is not None:
                local = _shape(local_shape)
            elif desc is not None:
                local = _shape(desc.shape)
            else:
                raise _C.InvalidArgumentError(f"'{key}': a layout without data needs local_shape")
        else:
            if local_shape is None:
                raise _C.InvalidArgumentError(f"'{key}': flat_range needs local_shape (the shape "
                                              "of the box the range is taken from)")
            local = _shape(local_shape)
        gshape = _shape(global_shape) if global_shape is not None else list(local)
        offset = _shape(global_offset) if global_offset is not None else [0] * len(gshape)
        lt = _C.LocalTensor()
        lt.dtype = dt
        lt.shape = local
        lt.segments = [_C.Segment(key, gshape, _C.Box(offset, local), [0] * len(local))]
        _C.validate_local_tensor(lt)
        if flat_range is not None:
            lt = _C.flat_shard(lt, _C.FlatRange(int(flat_range[0]), int(flat_range[1])), 0)
        self._init(lt, data, dtype, replica_id)

    def _init(self, layout, data, dtype, replica_id=0):
        self.layout = layout
        self.data = data
        self.dtype = dtype
        self.replica_id = replica_id
        if data is not None:
            self._check(describe(data, dtype, device_ok=True))
        return self

    @classmethod
    def from_layout(cls, layout: _C.LocalTensor, data: Array | None = None, *,
                    dtype: DTypeLike | None = None, replica_id: int = 0) -> ShardedTensor:
        """Wraps a C++ LocalTensor layout (its address is ignored) and the memory for it."""
        return cls.__new__(cls)._init(layout, data, dtype, replica_id)

    @classmethod
    def from_rank_offsets(cls, key: str, data: Array, *rank_offsets: tuple[int, int, int],
                          replica_id: int = 0, flattened_range: Any = None) -> ShardedTensor:
        """Megatron's constructor: each (axis, rank, fragments) says ``data`` is piece
        ``rank`` of ``fragments`` equal pieces along ``axis``."""
        shape = _shape(data.shape)
        gshape, offset = list(shape), [0] * len(shape)
        for axis, rank, fragments in rank_offsets:
            gshape[axis] = shape[axis] * fragments
            offset[axis] = shape[axis] * rank
        if flattened_range is not None:
            raise _C.InvalidArgumentError("from_rank_offsets with flattened_range: use "
                                          "ShardedTensor(..., flat_range=, local_shape=)")
        return cls(key, data, gshape, offset, replica_id=replica_id)

    @property
    def keys(self) -> list[str]:
        """The global keys this local tensor holds (one unless fused)."""
        return [s.key for s in self.layout.segments]

    @property
    def key(self) -> str | None:
        return self.layout.segments[0].key if self.layout.segments else None

    def like(self, data: Array, *, prefix: str = "", dtype: DTypeLike | None = None
             ) -> ShardedTensor:
        """The same layout over other memory, every key prefixed: optimizer state
        (``st.like(exp_avg, prefix="optim.exp_avg.")``)."""
        lt = copy.copy(self.layout)
        segs = lt.segments
        for s in segs:
            s.key = prefix + s.key
        lt.segments = segs
        return ShardedTensor.from_layout(lt, data, dtype=dtype)

    def _check(self, d):
        lt = self.layout
        if d.dtype != lt.dtype:
            raise _C.InvalidArgumentError(
                f"'{self.key}': data has dtype {_C.dtype_name(d.dtype)}, the layout "
                f"{_C.dtype_name(lt.dtype)}")
        if lt.flat is not None:
            if d.numel != lt.flat.size():
                raise _C.InvalidArgumentError(f"'{self.key}': data has {d.numel} elements, the "
                                              f"flat range {lt.flat} needs {lt.flat.size()}")
            if not d.contiguous:
                raise _C.InvalidArgumentError(f"'{self.key}': a flat range needs contiguous data")
        elif d.shape != list(lt.shape):
            raise _C.InvalidArgumentError(
                f"'{self.key}': data has shape {d.shape}, the layout {list(lt.shape)}")

    def bind(self, *, writable: bool = False, data: Array | None = None
             ) -> tuple[_C.LocalTensor, Any]:
        """The C++ LocalTensor over the memory of ``data`` (default self.data), and the
        Python object that must stay alive while C++ uses it."""
        data = self.data if data is None else data
        if data is None:
            raise _C.InvalidArgumentError(f"'{self.key}': no data (a layout only)")
        d = describe(data, self.dtype, writable=writable)
        self._check(d)
        lt = copy.copy(self.layout)
        lt.data = d.address
        lt.strides = [] if (d.contiguous or lt.flat is not None) else d.strides
        return lt, d.owner

    def __repr__(self) -> str:
        segs = ", ".join(f"{s.key}{list(s.global_shape)}@{s.global_box}" for s in
                         self.layout.segments)
        flat = f" flat={self.layout.flat}" if self.layout.flat is not None else ""
        return f"ShardedTensor(local {list(self.layout.shape)}: {segs}{flat})"


def _dt(data, dtype):
    if data is not None:
        return describe(data, dtype, device_ok=True).dtype
    if dtype is None:
        raise _C.InvalidArgumentError("a layout without data needs a dtype")
    return to_dtype(dtype)


def _wrap(layout, data, dtype):
    return ShardedTensor.from_layout(layout, data, dtype=dtype)


def whole(key: str, data: Array | None, *, dtype: DTypeLike | None = None,
          shape: Sequence[int] | None = None) -> ShardedTensor:
    """A full replica of tensor ``key``."""
    if shape is not None:
        shp = _shape(shape)
    elif data is not None:
        shp = _shape(data.shape)
    else:
        raise _C.InvalidArgumentError(f"'{key}': whole() without data needs shape=")
    return _wrap(_C.whole_tensor(key, _dt(data, dtype), 0, shp), data, dtype)


def chunk(key: str, data: Array | None, global_shape: Sequence[int], dim: int, index: int,
          count: int, *, dtype: DTypeLike | None = None) -> ShardedTensor:
    """Piece ``index`` of ``torch.chunk(global, count, dim)`` (uneven sizes as torch)."""
    return _wrap(_C.split_tensor(key, _dt(data, dtype), 0, _shape(global_shape), dim, index,
                                 count), data, dtype)


def split(key: str, data: Array | None, global_shape: Sequence[int], dim: int,
          sizes: Sequence[int], index: int, *, dtype: DTypeLike | None = None) -> ShardedTensor:
    """Piece ``index`` of ``torch.split(global, sizes, dim)``."""
    return _wrap(_C.split_tensor_sizes(key, _dt(data, dtype), 0, _shape(global_shape), dim,
                                       _shape(sizes), index), data, dtype)


def column_parallel(key: str, data: Array | None, global_shape: Sequence[int], tp_rank: int,
                    tp_size: int, *, dtype: DTypeLike | None = None) -> ShardedTensor:
    """Megatron column-parallel (split on dim 0): fc1, QKV, column biases."""
    return _wrap(_C.column_parallel(key, _dt(data, dtype), 0, _shape(global_shape), tp_rank,
                                    tp_size), data, dtype)


def row_parallel(key: str, data: Array | None, global_shape: Sequence[int], tp_rank: int,
                 tp_size: int, *, dtype: DTypeLike | None = None) -> ShardedTensor:
    """Megatron row-parallel (split on dim 1): fc2, attention output projection."""
    return _wrap(_C.row_parallel(key, _dt(data, dtype), 0, _shape(global_shape), tp_rank,
                                 tp_size), data, dtype)


def vocab_parallel(key: str, data: Array | None, padded_vocab: int, hidden: int, tp_rank: int,
                   tp_size: int, *, dtype: DTypeLike | None = None) -> ShardedTensor:
    """A vocab-parallel embedding / output layer of [padded_vocab, hidden]."""
    return _wrap(_C.vocab_parallel(key, _dt(data, dtype), 0, padded_vocab, hidden, tp_rank,
                                   tp_size), data, dtype)


def Shard(dim: int) -> _C.Placement:  # noqa: N802 (DTensor's spelling)
    """DTensor's ``Shard(dim)`` placement."""
    return _C.Placement.shard(dim)


def Replicate() -> _C.Placement:  # noqa: N802
    """DTensor's ``Replicate()`` placement."""
    return _C.Placement.replicate()


def StridedShard(dim: int, split_factor: int) -> _C.Placement:  # noqa: N802
    """DTensor's ``_StridedShard(dim, split_factor)`` placement (FSDP2 over TP)."""
    return _C.Placement.strided_shard(dim, split_factor)


def dtensor(key: str, data: Array | None, global_shape: Sequence[int],
            mesh_shape: Sequence[int], coordinate: Sequence[int],
            placements: Sequence[_C.Placement], *, dtype: DTypeLike | None = None) -> ShardedTensor:
    """A DTensor's local shard: device mesh ``mesh_shape``, this rank's ``coordinate``
    in it and one placement (Shard(d), Replicate(), StridedShard(d, sf)) per mesh dim."""
    return _wrap(_C.dtensor_shard(key, _dt(data, dtype), 0, _shape(global_shape),
                                  _shape(mesh_shape), _shape(coordinate), list(placements)),
                 data, dtype)


def shard_local(st: ShardedTensor, dim: int, index: int, count: int, data: Array | None, *,
                dtype: DTypeLike | None = None) -> ShardedTensor:
    """Shard(dim) over ``count`` ranks applied to an existing layout (FSDP2 over TP)."""
    return _wrap(_C.shard_local(st.layout, dim, index, count, 0), data, dtype)


def flat_shard(st: ShardedTensor, begin: int, end: int, data: Array | None, *,
               dtype: DTypeLike | None = None) -> ShardedTensor:
    """Layout ``st`` held only as its row-major elements [begin, end) in ``data``."""
    return _wrap(_C.flat_shard(st.layout, _C.FlatRange(begin, end), 0), data, dtype)


def concat(parts: Sequence[ShardedTensor], dim: int, data: Array | None, *,
           dtype: DTypeLike | None = None) -> ShardedTensor:
    """Parts (layouts) concatenated along ``dim`` in ``data``: a fused weight."""
    return _wrap(_C.concat([p.layout for p in parts], dim, 0), data, dtype)


def fused(parts: Sequence[_C.FusedPart], data: Array | None, dim: int, tp_rank: int,
          tp_size: int, *, dtype: DTypeLike | None = None) -> ShardedTensor:
    """TP shard of every FusedPart, concatenated along ``dim`` (layout_fused.h)."""
    return _wrap(_C.fused_shard(_dt(data, dtype), 0, list(parts), dim, tp_rank, tp_size), data,
                 dtype)


def swiglu_fc1(w_key: str, v_key: str, data: Array | None, ffn: int, trailing: Sequence[int],
               tp_rank: int, tp_size: int, *, dtype: DTypeLike | None = None) -> ShardedTensor:
    """SwiGLU fc1 = [W_i; V_i] (one [2F, H] key if w_key == v_key)."""
    return _wrap(_C.swiglu_fc1(w_key, v_key, _dt(data, dtype), 0, ffn, _shape(trailing), tp_rank,
                               tp_size), data, dtype)


def gqa_qkv(q_key: str, k_key: str, v_key: str, data: Array | None, dims: _C.GqaDims,
            trailing: Sequence[int], tp_rank: int, tp_size: int, *,
            dtype: DTypeLike | None = None) -> ShardedTensor:
    """Megatron's interleaved GQA QKV, stored as separate q, k, v tensors."""
    return _wrap(_C.gqa_qkv(q_key, k_key, v_key, _dt(data, dtype), 0, dims, _shape(trailing),
                            tp_rank, tp_size), data, dtype)


def flat_buffer(params: Sequence[ShardedTensor], dp_rank: int, dp_size: int, shard_data: Array,
                *, align: int = 1, dtype: DTypeLike | None = None
                ) -> tuple[list[ShardedTensor], _C.FlatBufferLayout]:
    """Parameters (layouts) back to back in one buffer split over DP ranks; this
    rank holds ``shard_data`` (1-D, ``shard_size`` elements). Returns one
    ShardedTensor per parameter, each a zero-copy view into ``shard_data``,
    and the FlatBufferLayout."""
    layouts = [p.layout for p in params]
    plan = _C.plan_flat_buffer(layouts, align, dp_size)
    d = describe(shard_data, dtype)
    if d.numel != plan.shard_size or not d.contiguous:
        raise _C.InvalidArgumentError(f"flat buffer shard needs {plan.shard_size} contiguous "
                                      f"elements, got shape {d.shape}")
    pieces = _C.flat_buffer_shard(layouts, plan, dp_rank, d.address)
    size = _C.dtype_size(d.dtype)
    flat = shard_data.reshape(-1)
    out = []
    for lt in pieces:
        if lt.flat is None:  # every piece of a flat buffer holds a flat range
            raise _C.InternalError(f"'{lt.segments[0].key}': a flat buffer piece without a "
                                   "flat range")
        n = lt.flat.size()
        off = (lt.data - d.address) // size if n else 0
        out.append(_wrap(lt, flat[off:off + n], dtype))
    return out, plan


def per_expert_weights(key_of: Callable[[int], str], data: Array | None,
                       expert_shape: Sequence[int], tp_dim: int, ep: _C.ExpertParallel,
                       tp_rank: int = 0, tp_size: int = 1, *,
                       dtype: DTypeLike | None = None) -> ShardedTensor:
    """This EP rank's experts as one grouped local tensor [local_experts, ...], stored
    per expert under ``key_of(global_expert_index)``; ``tp_dim`` of ``expert_shape`` is
    split over expert-TP ranks (-1: replicated)."""
    return _wrap(_C.per_expert_weights(key_of, _dt(data, dtype), 0, _shape(expert_shape),
                                       tp_dim, ep, tp_rank, tp_size), data, dtype)


def stacked_experts(key: str, data: Array | None, expert_shape: Sequence[int], tp_dim: int,
                    ep: _C.ExpertParallel, tp_rank: int = 0, tp_size: int = 1, *,
                    dtype: DTypeLike | None = None) -> ShardedTensor:
    """The same local memory stored as one tensor ``key`` of [num_experts, ...]."""
    return _wrap(_C.stacked_experts(key, _dt(data, dtype), 0, _shape(expert_shape), tp_dim, ep,
                                    tp_rank, tp_size), data, dtype)


def fused_gate_up_experts(key: str, data: Array | None, inter: int, hidden: int,
                          ep: _C.ExpertParallel, tp_rank: int = 0, tp_size: int = 1, *,
                          dtype: DTypeLike | None = None) -> ShardedTensor:
    """Fused gate/up experts: stored [E, 2I, H]; local [local_experts, 2 * I / tp, H]."""
    return _wrap(_C.fused_gate_up_experts(key, _dt(data, dtype), 0, inter, hidden, ep, tp_rank,
                                          tp_size), data, dtype)


def gdn_in_proj(key: str, data: Array | None, dims: _C.GdnDims, hidden: int, tp_rank: int,
                tp_size: int, *, dtype: DTypeLike | None = None) -> ShardedTensor:
    """Gated DeltaNet in_proj [q; k; v; z; beta; alpha], each component TP-split."""
    return _wrap(_C.gdn_in_proj(key, _dt(data, dtype), 0, dims, hidden, tp_rank, tp_size), data,
                 dtype)


def gdn_conv1d(key: str, data: Array | None, dims: _C.GdnDims, trailing: Sequence[int],
               tp_rank: int, tp_size: int, *, dtype: DTypeLike | None = None) -> ShardedTensor:
    """Gated DeltaNet conv1d over q, k, v."""
    return _wrap(_C.gdn_conv1d(key, _dt(data, dtype), 0, dims, _shape(trailing), tp_rank,
                               tp_size), data, dtype)
