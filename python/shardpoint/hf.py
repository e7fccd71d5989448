"""shardpoint.hf: Hugging Face safetensors models from Python.

    import shardpoint.hf as sphf
    from shardpoint.torch import TPPlan
    plan = TPPlan([(r"linear_qkv\\.weight$", "column"), (r"linear_fc1\\.weight$", "swiglu"),
                   (r"linear_(proj|fc2)\\.weight$", "row"),
                   (r"word_embeddings|output_layer", "vocab")], tp_rank, tp_size)
    sphf.load(model, "Llama-3-8B/", "llama", comm, plan=plan)     # collective
    sphf.export("ckpt/iter_100", "out-hf/", "llama")                 # one process
    sphf.describe("Llama-3-8B/", "llama")                            # keys, shapes, hints

``load`` fills a tensor- and expert-parallel torch model straight from an HF
model directory: each rank reads only the byte runs of its own shards
(``LoadFromHf``, docs/huggingface.md), fused Megatron weights included (GQA
``linear_qkv``, SwiGLU ``linear_fc1``, stacked experts). ``export`` writes a
shardpoint checkpoint (or an HF model) as an HF model, ``convert`` an HF model
as a shardpoint checkpoint, ``write_model`` a dict of tensors as an HF model.
A mapping is a shipped name (``mapping_names()``: "llama", "megatron_llama",
"qwen_moe"), a JSON file's path, JSON text, a dict, or None (HF names are the
keys).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Callable, Iterable, Mapping

from shardpoint import _shardpoint as _C
from shardpoint import sharded as _sh
from shardpoint._storage import storage_for
from shardpoint._tensors import describe as _describe_tensor
from shardpoint._tensors import is_tensor, to_dtype
from shardpoint.comm import Comm, default_comm

__all__ = ["KeyInfo", "ExportStats", "mapping", "mapping_names", "describe", "state_dict", "load",
           "export", "convert", "write_model"]

MappingLike = Any  # a shipped name, a path, JSON text, a dict, an HfMapping or None


def mapping_names() -> list[str]:
    """The shipped mappings' names (built into the library, sorted)."""
    return list(_C.shipped_hf_mapping_names())


def mapping(spec: MappingLike = None) -> _C.HfMapping:
    """The mapping ``spec`` names: None or "" = identity (HF names are the keys); a
    shipped name (``mapping_names()``; it wins over a file of that name, as in the
    CLI: write "./llama" for a local file); a dict or JSON text (starting with "{");
    else a JSON file's path. An ``HfMapping`` is returned as is. A malformed
    mapping is an ``InvalidArgumentError`` naming the source and the rule."""
    if isinstance(spec, _C.HfMapping):
        return spec
    if spec is None or spec == "":
        return _C.identity_hf_mapping()
    if isinstance(spec, Mapping):
        return _C.parse_hf_mapping(json.dumps(spec), "<dict>")
    if isinstance(spec, str) and spec in _C.shipped_hf_mapping_names():
        return _C.shipped_hf_mapping(spec)
    if isinstance(spec, str) and spec.lstrip().startswith("{"):
        return _C.parse_hf_mapping(spec, "<json>")
    if isinstance(spec, (str, os.PathLike)):
        return _C.read_hf_mapping(os.fspath(spec))
    raise _C.InvalidArgumentError(f"not a mapping: {type(spec).__name__} (a shipped name, a "
                                  "path, JSON text, a dict or None)")


@dataclasses.dataclass(frozen=True)
class KeyInfo:
    """A shardpoint key an HF model provides under a mapping: ``dtype`` (shardpoint's
    name, e.g. "BF16"), global ``shape``, the rule's layout hint ``split``
    ("replicated", "column", "row", "vocab", "swiglu", "gqa", "experts_swiglu",
    "experts_row", "experts_column"), ``heads``/``groups`` of a gqa rule and the
    ``hf`` tensors it is made of."""

    key: str
    dtype: str
    shape: tuple[int, ...]
    split: str
    heads: int
    groups: int
    hf: tuple[str, ...]


def _variables(variables: Mapping[str, int] | None) -> dict[str, int]:
    return {str(k): int(v) for k, v in (variables or {}).items()}


def _describe(hf_dir: str | os.PathLike, mp: _C.HfMapping, variables: Any,
              storage_options: dict | None = None) -> dict[str, Any]:
    return {i.key: i for i in _C.describe_hf(os.fspath(hf_dir), mp, _variables(variables),
                                             storage_for(storage_options))}


_INFO_FIELDS = ("key", "split", "heads", "groups", "hf")


def _describe_on_rank0(hf_dir: str | os.PathLike, mp: _C.HfMapping, variables: Any,
                       comm: Comm, storage_options: dict | None = None) -> dict[str, Any]:
    """``_describe`` on rank 0 alone, broadcast to the others (one collective): N
    ranks do not read every header N times. Rank 0's error is raised on every rank."""
    if comm.size() == 1:
        return _describe(hf_dir, mp, variables, storage_options)
    payload = b""
    if comm.rank() == 0:
        try:
            infos = _describe(hf_dir, mp, variables, storage_options)
            payload = b"K" + json.dumps([
                dict({f: getattr(i, f) for f in _INFO_FIELDS}, dtype=_C.dtype_name(i.dtype),
                     shape=list(i.shape)) for i in infos.values()]).encode()
        except Exception as e:  # noqa: BLE001 - every rank raises it (below)
            name = type(e).__name__ if isinstance(e, _C.Error) else "InvalidArgumentError"
            payload = b"E" + json.dumps([name, str(e)]).encode()
    payload = comm.broadcast(payload, 0)
    if payload[:1] == b"E":
        name, message = json.loads(payload[1:])
        raise getattr(_C, name, _C.InternalError)(
            message if comm.rank() == 0 else f"rank 0: {message}")
    out = {}
    for d in json.loads(payload[1:]):
        info = _C.HfKeyInfo()
        for f in _INFO_FIELDS:
            setattr(info, f, d[f])
        info.dtype, info.shape = _C.parse_dtype(d["dtype"]), d["shape"]
        out[info.key] = info
    return out


def describe(hf_dir: str | os.PathLike, mapping_spec: MappingLike = None, *,
             variables: Mapping[str, int] | None = None,
             storage_options: dict | None = None) -> dict[str, KeyInfo]:
    """What the HF model at ``hf_dir`` provides in shardpoint keys under the mapping,
    in the model's order. ``variables`` add to or override ``config.json`` (as the
    CLI's ``--set``). Reads the headers only; one process. ``storage_options``: as
    ``sp.save``'s, for an ``s3://`` ``hf_dir`` (every function here takes it)."""
    infos = _describe(hf_dir, mapping(mapping_spec), variables, storage_options)
    return {k: KeyInfo(k, _C.dtype_name(i.dtype), tuple(i.shape), i.split, int(i.heads),
                       int(i.groups), tuple(i.hf)) for k, i in infos.items()}


# ---------------------------------------------------------------------------
# Layouts of a torch model over an HF model.

# TPPlan kinds and the mapping hints whose Megatron layout holds the same
# local memory (used where the plan stores sub-keys the mapping fuses).
_SAME_MEMORY: dict[str, set[str]] = {"swiglu": {"swiglu"}, "qkv": set()}


def _plan_kind(plan: Any, fqn: str) -> Any:
    """The kind of the plan's first rule matching ``fqn``; None if none matches."""
    for pattern, kind in getattr(plan, "rules", ()):
        if pattern.search(fqn):
            return kind
    return None


def _renamed(st: _sh.ShardedTensor, fqn: str, key: str, data: Any) -> _sh.ShardedTensor:
    """``st`` (keys ``fqn`` or ``fqn.<part>``) under ``key`` (``key.<part>``)."""
    lt = st.layout
    segs = lt.segments
    for s in segs:
        s.key = key + s.key[len(fqn):] if s.key.startswith(fqn) else s.key
    lt.segments = segs
    return _sh.ShardedTensor.from_layout(lt, data)


def _hf_layout(fqn: str, info: Any, t: Any, tp: tuple[int, int],
               ep: tuple[int, int]) -> _sh.ShardedTensor:
    """The Megatron-style layout of ``t`` for the mapping's hint (``HfShard``)."""
    dtype = _describe_tensor(t, device_ok=True).dtype
    lt = _C.hf_shard(info, dtype, 0, tp[0], tp[1], ep[0], ep[1])
    if list(lt.shape) != list(t.shape):
        raise _C.InvalidArgumentError(
            f"'{fqn}': the HF key '{info.key}' (global {list(info.shape)}, split "
            f"'{info.split}') gives a local shape {list(lt.shape)} at TP {tp[0]}/{tp[1]}, EP "
            f"{ep[0]}/{ep[1]}; the parameter has {list(t.shape)}")
    return _sh.ShardedTensor.from_layout(lt, t)


def _layout(fqn: str, key: str, t: Any, plan: Any, infos: dict, ep: tuple[int, int]
            ) -> _sh.ShardedTensor:
    kind = _plan_kind(plan, fqn)
    info = infos.get(key)
    tp = (int(plan.tp_rank), int(plan.tp_size)) if plan is not None else (0, 1)
    if kind is not None and info is not None and not callable(kind) and kind in _SAME_MEMORY:
        # the plan stores parts (<key>.w / .v, .q / .k / .v) that the mapping fuses into key
        if info.split not in _SAME_MEMORY[kind]:
            raise _C.InvalidArgumentError(
                f"'{fqn}': the TPPlan kind '{kind}' stores parts that the mapping fuses into "
                f"'{key}' with split '{info.split}', whose Megatron layout is another local "
                "memory order (use 'column' for a GQA-interleaved linear_qkv, or "
                "gqa(heads, groups, head_dim))")
        return _hf_layout(fqn, info, t, tp, ep)
    if kind is not None:
        st = _renamed(plan(fqn, t), fqn, key, t)
        if info is None or all(k in infos for k in st.keys):
            return st
        return _hf_layout(fqn, info, t, tp, ep)  # a function kind whose parts the mapping fuses
    if info is not None and (plan is None or info.split.startswith("experts")):
        return _hf_layout(fqn, info, t, tp, ep)
    return _sh.whole(key, t)


def _named_tensors(model: Any) -> list[tuple[str, Any]]:
    """(fqn, tensor) of a module's state dict (parameters and persistent buffers) or
    of a dict (torch tensors or numpy arrays); values that are not tensors
    (``_extra_state``) are left out."""
    sd = model.state_dict() if hasattr(model, "state_dict") and callable(model.state_dict) \
        else model
    if not isinstance(sd, Mapping):
        raise _C.InvalidArgumentError(f"expected a torch module or a dict of tensors, got "
                                      f"{type(model).__name__}")
    return [(str(k), v) for k, v in sd.items() if is_tensor(v)]


def _key_of(prefix: str, keys: Callable[[str], str | None] | None) -> Callable[[str], Any]:
    def key(fqn: str) -> str | None:
        if keys is not None:
            return keys(fqn)
        return fqn[len(prefix):] if prefix and fqn.startswith(prefix) else fqn
    return key


def state_dict(model: Any, hf_dir: str | os.PathLike, mapping_spec: MappingLike = None, *,
               plan: Any = None, ep: tuple[int, int] = (0, 1), prefix: str = "",
               keys: Callable[[str], str | None] | None = None,
               variables: Mapping[str, int] | None = None,
               storage_options: dict | None = None) -> dict[str, _sh.ShardedTensor]:
    """The tensors of ``model`` (a torch module or a dict of tensors) as ShardedTensors
    in the mapping's keys: what ``load`` fills, and what ``sp.save`` stores so that
    ``export`` writes the HF model back. One process (reads the HF headers).

    A parameter's key is its name without ``prefix`` (or ``keys(fqn)``; None leaves
    it out). Its layout: where a rule of ``plan`` (a ``shardpoint.torch.TPPlan``)
    matches, the plan's (its keys renamed), except where the plan stores parts the
    mapping fuses into the key itself (TPPlan ``"swiglu"``'s ``.w``/``.v``,
    ``gqa(...)``'s ``.q``/``.k``/``.v``): then Megatron's layout for the rule's
    split hint at the plan's TP coordinates. Where no rule matches: replicated
    (the TPPlan's meaning), except keys with an ``experts_*`` hint, which take
    Megatron's expert-parallel layout at ``ep=(ep_rank, ep_size)``; without a plan
    every key the HF model provides takes its hint's layout at TP 1."""
    return _layouts(model, _describe(hf_dir, mapping(mapping_spec), variables, storage_options),
                    plan, ep, prefix, keys)


def _layouts(model: Any, infos: dict[str, Any], plan: Any, ep: tuple[int, int], prefix: str,
             keys: Callable[[str], str | None] | None) -> dict[str, _sh.ShardedTensor]:
    key_of = _key_of(prefix, keys)
    ep_pair = (int(ep[0]), int(ep[1]))
    out: dict[str, _sh.ShardedTensor] = {}
    for fqn, t in _named_tensors(model):
        key = key_of(fqn)
        if key is not None:
            out[fqn] = _layout(fqn, key, t, plan, infos, ep_pair)
    return out


def _load_options(strict: bool, allow_missing_keys: bool | None,
                  allow_unexpected_keys: bool | None, allow_dtype_conversion: bool,
                  allow_shape_mismatch: bool, cooperative: bool, io_threads: int | None,
                  read_gap_bytes: int | None) -> Any:
    o = _C.hf_default_load_options()
    o.allow_missing_keys = (not strict) if allow_missing_keys is None else bool(allow_missing_keys)
    o.allow_unexpected_keys = ((not strict) if allow_unexpected_keys is None
                               else bool(allow_unexpected_keys))
    o.allow_dtype_conversion = bool(allow_dtype_conversion)
    o.allow_shape_mismatch = bool(allow_shape_mismatch)
    o.cooperative = bool(cooperative)
    if io_threads is not None:
        o.io_threads = int(io_threads)
    if read_gap_bytes is not None:
        if int(read_gap_bytes) < 0:
            raise ValueError(f"read_gap_bytes must be >= 0, got {read_gap_bytes}")
        o.read_gap_bytes = int(read_gap_bytes)
    return o


def _bind(sd: dict[str, _sh.ShardedTensor]) -> tuple[Any, list, list]:
    """A C++ State over ``sd``'s memory; device tensors load through host copies."""
    st = _C.State()
    tensors, owners, device = [], [], []
    for sharded in sd.values():
        data = sharded.data
        if getattr(getattr(data, "device", None), "type", "cpu") != "cpu":
            host = data.new_empty(data.shape, device="cpu")
            device.append((data, host))
            data = host
        lt, owner = sharded.bind(writable=True, data=data)
        tensors.append(lt)
        owners.append(owner)
    st.tensors = tensors
    return st, owners, device


def _agree(comm: Comm, failure: BaseException | None) -> None:
    """Raises on every rank if any rank failed (one all-gather): the lowest failing
    rank's error, by its shardpoint type, prefixed ``rank R:`` on the other ranks."""
    mine = b""
    if failure is not None:
        name = type(failure).__name__ if isinstance(failure, _C.Error) else "InvalidArgumentError"
        mine = json.dumps([name, str(failure)]).encode()
    if comm.size() > 1:
        msgs = comm.all_gather(mine)
    else:
        msgs = [mine]
    for r, m in enumerate(msgs):
        if not m:
            continue
        if r == comm.rank() and failure is not None:
            raise failure
        name, message = json.loads(m)
        raise getattr(_C, name, _C.InternalError)(f"rank {r}: {message}")


def load(model: Any, hf_dir: str | os.PathLike, mapping_spec: MappingLike = None,
         comm: Comm | None = None, *, plan: Any = None, ep: tuple[int, int] = (0, 1),
         prefix: str = "", keys: Callable[[str], str | None] | None = None,
         variables: Mapping[str, int] | None = None, strict: bool = True,
         allow_missing_keys: bool | None = None, allow_unexpected_keys: bool | None = None,
         allow_dtype_conversion: bool = False, allow_shape_mismatch: bool = False,
         cooperative: bool = False, io_threads: int | None = None,
         read_gap_bytes: int | None = None, storage_options: dict | None = None) -> Any:
    """Fills ``model``'s tensors in place from the HF model at ``hf_dir``. Collective.

    Layouts as ``state_dict`` says (``plan``, ``ep``, ``prefix``, ``keys``).
    Rank 0 reads the headers and broadcasts what they describe (and again inside
    ``LoadFromHf``; each is one collective); each rank then reads only the
    byte runs of its own shards (``cooperative=True``: each needed byte once in
    all, sent to the ranks that need it; ``read_gap_bytes``: bridge gaps up to
    that size, worth it on network filesystems). ``strict`` (default): a key the
    model asks for that the HF model lacks, or one it provides that no rank asks
    for, raises (``allow_missing_keys`` / ``allow_unexpected_keys`` choose
    separately); so do dtype and shape mismatches unless allowed
    (``allow_shape_mismatch``: a padded vocabulary, padding rows zeroed). HF files
    carry no checksums. CUDA tensors are loaded through host copies. Returns a
    ``shardpoint.LoadResult`` (missing and unexpected keys, bytes read)."""
    from shardpoint._checkpoint import LoadResult
    comm = comm if comm is not None else default_comm()
    mp = mapping(mapping_spec)
    infos = _describe_on_rank0(hf_dir, mp, variables, comm, storage_options)
    try:
        st, owners, device = _bind(_layouts(model, infos, plan, ep, prefix, keys))
        failure: BaseException | None = None
    except Exception as e:  # noqa: BLE001 - every rank learns of it before the collective load
        failure = e
    _agree(comm, failure)
    opts = _load_options(strict, allow_missing_keys, allow_unexpected_keys,
                         allow_dtype_conversion, allow_shape_mismatch, cooperative, io_threads,
                         read_gap_bytes)
    storage = storage_for(storage_options)
    if storage is not None:
        opts.set_storage(storage)
    r = _C.load_from_hf(st, os.fspath(hf_dir), mp, comm, opts, _variables(variables))
    for target, host in device:
        target.copy_(host)
    del owners
    return LoadResult(missing_keys=list(r.missing_keys), unexpected_keys=list(r.unexpected_keys),
                      bytes_read=r.bytes_read, bytes_received=r.bytes_received,
                      requests=r.requests, bytes_needed=r.bytes_needed, seconds=r.seconds)


# ---------------------------------------------------------------------------
# Offline conversions (one process).

@dataclasses.dataclass(frozen=True)
class ExportStats:
    """What an export or conversion wrote: ``files``, ``tensors``, ``bytes``, ``seconds``."""

    files: int
    tensors: int
    bytes: int
    seconds: float


def _stats(s: Any) -> ExportStats:
    return ExportStats(int(s.files), int(s.tensors), int(s.bytes), float(s.seconds))


def _dtype_option(dtype: Any) -> Any:
    return None if dtype is None else to_dtype(dtype)


def export(checkpoint: str | os.PathLike, out_dir: str | os.PathLike,
           mapping_spec: MappingLike = None, *, max_shard_size: int = 5_000_000_000,
           dtype: Any = None, io_threads: int = 4, block_bytes: int = 64 << 20,
           variables: Mapping[str, int] | None = None, overwrite: bool = False,
           storage_options: dict | None = None) -> ExportStats:
    """Writes the checkpoint at ``checkpoint`` (shardpoint, DCP or an HF model) as an
    HF model at ``out_dir``, as ``shardpoint export-hf`` does: streaming in blocks of
    ``block_bytes`` with ``io_threads`` in flight, files of at most
    ``max_shard_size`` bytes, floating tensors converted to ``dtype`` if given,
    ``config.json`` from the checkpoint's stored HF config (``convert``) with
    ``variables`` over it (``vocab_size`` cuts a padded vocabulary). One process.

    Written into ``<out_dir>.partial`` and renamed to ``out_dir`` once complete: a
    killed export leaves ``out_dir`` as it was. An existing ``out_dir`` that is not an
    empty directory raises ``FailedPreconditionError`` naming it unless
    ``overwrite=True``, which replaces it whole, atomically."""
    return _stats(_C.export_hf(os.fspath(checkpoint), os.fspath(out_dir), mapping(mapping_spec),
                               int(max_shard_size), _dtype_option(dtype), int(io_threads),
                               int(block_bytes), _variables(variables), bool(overwrite),
                               storage_for(storage_options)))


def convert(hf_dir: str | os.PathLike, checkpoint: str | os.PathLike,
            mapping_spec: MappingLike = None, *, dtype: Any = None, io_threads: int = 4,
            block_bytes: int = 64 << 20,
            variables: Mapping[str, int] | None = None, overwrite: bool = False,
            storage_options: dict | None = None) -> ExportStats:
    """Writes the HF model at ``hf_dir`` as a shardpoint checkpoint at ``checkpoint``
    (``shardpoint convert``): mapped keys, checksums, ``config.json`` kept in its
    metadata. One process. Committed as ``export`` is; ``overwrite`` as there."""
    return _stats(_C.convert_hf_to_shardpoint(
        os.fspath(hf_dir), os.fspath(checkpoint), mapping(mapping_spec), _dtype_option(dtype),
        int(io_threads), int(block_bytes), _variables(variables), bool(overwrite),
        storage_for(storage_options)))


def _tensor_bytes(name: str, t: Any) -> tuple[str, Any, list[int], bytes]:
    d = _describe_tensor(t)
    if hasattr(t, "detach"):  # torch: through a byte view (bfloat16 has no numpy dtype)
        import torch
        raw = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    else:
        import numpy as np
        raw = np.ascontiguousarray(t).tobytes()
    return name, d.dtype, list(d.shape), raw


def write_model(out_dir: str | os.PathLike, tensors: Mapping[str, Any] | Iterable[tuple[str, Any]],
                *, config: Mapping[str, Any] | None = None,
                max_shard_size: int = 5_000_000_000,
                metadata: Mapping[str, str] | None = None,
                storage_options: dict | None = None) -> None:
    """Writes ``tensors`` (name -> torch CPU tensor or numpy array) as an HF
    safetensors model at ``out_dir``: ``model.safetensors``, or shards of at most
    ``max_shard_size`` bytes with ``model.safetensors.index.json``, plus
    ``config.json`` from ``config``. Tensors are copied once in memory: for small
    models, tests and fixtures (``export`` streams large ones). One process."""
    items = tensors.items() if isinstance(tensors, Mapping) else tensors
    meta = {"format": "pt"} if metadata is None else {str(k): str(v) for k, v in metadata.items()}
    _C.write_hf_model(os.fspath(out_dir), [_tensor_bytes(str(n), t) for n, t in items],
                      int(max_shard_size), meta, json.dumps(dict(config)) if config else "",
                      storage_for(storage_options))
