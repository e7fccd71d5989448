"""Reading a checkpoint without a template: ``metadata``, ``read``,
``iter_tensors``, ``verify`` and ``inspect``.

All of them work in one process on any checkpoint (whatever layout saved
it), on the public C++ API ``shardpoint/verify.h`` (``DescribeCheckpoint``,
``VerifyCheckpoint``) and ``load``; they are not collective.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any, Iterator

from shardpoint import _shardpoint as _C
from shardpoint import sharded
from shardpoint._checkpoint import ShardedObject, decode_metadata, load, prefetch_bytes_option
from shardpoint._storage import storage_for
from shardpoint.comm import single

__all__ = ["ChunkInfo", "TensorInfo", "ObjectInfo", "Metadata", "Fault", "VerifyReport",
           "metadata", "read", "iter_tensors", "verify", "inspect"]


@dataclasses.dataclass(frozen=True)
class ChunkInfo:
    """One stored chunk: the box ``offset``/``shape`` of the global tensor, in ``file``
    at bytes ``[begin, end)``, with its ``checksum``."""

    offset: tuple[int, ...]
    shape: tuple[int, ...]
    file: str
    begin: int
    end: int
    checksum: int


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """A stored global tensor: ``key``, ``dtype`` (shardpoint's name, e.g. "BF16"),
    global ``shape``, its ``chunks`` and their total ``nbytes``."""

    key: str
    dtype: str
    shape: tuple[int, ...]
    chunks: tuple[ChunkInfo, ...]
    nbytes: int


@dataclasses.dataclass(frozen=True)
class ObjectInfo:
    """A stored value: ``key``, its ``index`` in a ``grid`` (empty: one value), where."""

    key: str
    index: tuple[int, ...]
    grid: tuple[int, ...]
    file: str
    nbytes: int


@dataclasses.dataclass(frozen=True)
class Metadata:
    """What a checkpoint holds (its manifest), like DCP's ``read_metadata``."""

    path: str
    format_version: int
    tensors: dict[str, TensorInfo]
    objects: tuple[ObjectInfo, ...]
    has_common: bool
    common_bytes: int
    metadata: dict | None  # the user metadata given to save
    files: tuple[str, ...]

    @property
    def nbytes(self) -> int:
        """Bytes of all tensors."""
        return sum(t.nbytes for t in self.tensors.values())


@dataclasses.dataclass(frozen=True)
class Fault:
    """One problem ``verify`` found: ``kind`` ("tiling", "file_header", "chunk",
    "object"), the ``key``, ``chunk`` (index, -1 if none), ``object_index``, ``file``,
    the byte range ``[begin, end)`` and a one-line ``message`` naming all of them."""

    kind: str
    key: str
    chunk: int
    object_index: tuple[int, ...]
    file: str
    begin: int
    end: int
    message: str


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    """What ``verify`` checked, and the faults (empty: the checkpoint is intact)."""

    path: str
    tensors: int
    chunks_checked: int
    objects_checked: int
    bytes_checked: int
    files: int
    seconds: float
    faults: tuple[Fault, ...]

    @property
    def ok(self) -> bool:
        return not self.faults


def metadata(path: str | os.PathLike, *, storage_options: dict | None = None) -> Metadata:
    """The manifest of checkpoint ``path``: tensors (dtype, global shape, chunks),
    objects, common state size, user metadata, files. Reads the manifest only.
    NotFoundError (a FileNotFoundError) if there is no checkpoint at ``path``.
    ``storage_options``: as ``save``'s, for an ``s3://`` path."""
    path = os.fspath(path)
    d = _C.describe_checkpoint(path, storage_for(storage_options))
    files = tuple(d.files)
    tensors = {}
    for t in d.tensors:
        chunks = tuple(ChunkInfo(tuple(c.box.offset), tuple(c.box.shape), files[c.file],
                                 int(c.offset), int(c.offset + c.nbytes), int(c.checksum))
                       for c in t.chunks)
        tensors[t.key] = TensorInfo(t.key, _C.dtype_name(t.dtype), tuple(t.shape), chunks,
                                    int(t.nbytes()))
    objects = tuple(ObjectInfo(o.key, tuple(o.index), tuple(o.grid), files[o.file],
                               int(o.nbytes)) for o in d.objects)
    meta = _MetaState(d.metadata_bytes)
    return Metadata(path, int(d.format_version), tensors, objects, bool(d.has_common),
                    int(d.common_bytes), decode_metadata(meta, path), files)


class _MetaState:  # what decode_metadata reads
    def __init__(self, metadata_bytes: bytes) -> None:
        self.metadata_bytes = metadata_bytes


def torch_dtypes() -> dict[str, Any]:
    """shardpoint dtype name -> torch dtype, for every dtype this torch has."""
    import torch
    dt = {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16,
          "I32": torch.int32, "I64": torch.int64, "F16": torch.float16,
          "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64}
    for name, attr in (("U16", "uint16"), ("U32", "uint32"), ("U64", "uint64"),
                       ("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2")):
        if hasattr(torch, attr):
            dt[name] = getattr(torch, attr)
    return dt


def _empty(info: TensorInfo, backend: str) -> tuple[Any, Any]:
    """(the tensor returned, the template given to load) for ``info``."""
    if backend == "torch":
        import torch
        dt = torch_dtypes()
        if info.dtype in dt:
            t = torch.empty(info.shape, dtype=dt[info.dtype])
            return t, t
        raw = {"U16": torch.int16, "U32": torch.int32, "U64": torch.int64,
               "F8_E4M3": torch.uint8, "F8_E5M2": torch.uint8}[info.dtype]
        t = torch.empty(info.shape, dtype=raw)  # the bits, under a same-size torch dtype
        return t, sharded.whole(info.key, t, dtype=info.dtype)
    import numpy as np
    nd = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16, "U16": np.uint16,
          "I32": np.int32, "U32": np.uint32, "I64": np.int64, "U64": np.uint64,
          "F16": np.float16, "F32": np.float32, "F64": np.float64}
    if info.dtype in nd:
        a = np.empty(info.shape, dtype=nd[info.dtype])
        return a, a
    a = np.empty(info.shape, dtype=np.uint16 if info.dtype == "BF16" else np.uint8)
    return a, sharded.whole(info.key, a, dtype=info.dtype)


def _backend(backend: str | None) -> str:
    if backend is None:
        try:
            import torch  # noqa: F401
            return "torch"
        except ImportError:
            return "numpy"
    if backend not in ("torch", "numpy"):
        raise _C.InvalidArgumentError(f"backend must be 'torch' or 'numpy', got {backend!r}")
    return backend


def _load_tensors(path: str, infos: list[TensorInfo], backend: str,
                  verify_checksums: bool, storage_options: dict | None) -> dict[str, Any]:
    out, template = {}, {}
    for i, info in enumerate(infos):
        t, tpl = _empty(info, backend)
        out[info.key] = t
        template[f"t{i}"] = tpl if isinstance(tpl, sharded.ShardedTensor) else \
            sharded.whole(info.key, t)
    load(template, path, single(), allow_unexpected_keys=True, common=False,
         verify_checksums=verify_checksums, cooperative=False, storage_options=storage_options)
    return out


def iter_tensors(path: str | os.PathLike, *, max_bytes: int = 1 << 30,
                 keys: list[str] | None = None, backend: str | None = None,
                 verify_checksums: bool = True,
                 storage_options: dict | None = None) -> Iterator[tuple[str, Any]]:
    """Yields ``(key, tensor)`` for every tensor of the checkpoint (or ``keys``),
    whole, in key order, loading groups of at most ``max_bytes`` at a time (a
    larger tensor is loaded alone): memory stays near ``max_bytes`` whatever
    the checkpoint's size. ``backend``: "torch" (default when torch is
    installed) or "numpy" (bfloat16 and float8 come as uint16 / uint8 bits).
    ``storage_options``: as ``save``'s, for an ``s3://`` path."""
    path = os.fspath(path)
    be = _backend(backend)
    md = metadata(path, storage_options=storage_options)
    wanted = _select(md, keys)
    group: list[TensorInfo] = []
    size = 0
    for info in wanted:
        if group and size + info.nbytes > max_bytes:
            yield from _load_tensors(path, group, be, verify_checksums,
                                     storage_options).items()
            group, size = [], 0
        group.append(info)
        size += info.nbytes
    if group:
        yield from _load_tensors(path, group, be, verify_checksums, storage_options).items()


def _select(md: Metadata, keys: list[str] | None) -> list[TensorInfo]:
    if keys is None:
        return [md.tensors[k] for k in sorted(md.tensors)]
    missing = [k for k in keys if k not in md.tensors]
    if missing:
        raise _C.NotFoundError(f"checkpoint '{md.path}' has no tensors {missing}")
    return [md.tensors[k] for k in keys]


def read(path: str | os.PathLike, *, keys: list[str] | None = None,
         max_bytes: int | None = None, objects: bool = True, allow_pickle: bool = False,
         backend: str | None = None, verify_checksums: bool = True,
         storage_options: dict | None = None) -> dict[str, Any]:
    """Every tensor of checkpoint ``path`` whole (or only ``keys``) and every value,
    in one flat dict keyed as stored (``{"model.w": tensor, "rng": {0: ..., 1:
    ...}, ...}``; a value stored per shard of a grid is a dict index -> value,
    the index an ``int`` for a one-dimensional grid (one value per rank:
    ``sd["rng"][0]``) and a tuple for a grid of more dimensions), like
    ``torch.load`` of a consolidated file, whatever layout saved it. The common
    state is under ``"<common>"`` if the checkpoint has one. ``max_bytes``:
    raise InvalidArgumentError instead of allocating more than this for the
    tensors (use ``iter_tensors`` to stream them). ``storage_options``: as
    ``save``'s, for an ``s3://`` path."""
    path = os.fspath(path)
    be = _backend(backend)
    md = metadata(path, storage_options=storage_options)
    wanted = _select(md, keys)
    total = sum(t.nbytes for t in wanted)
    if max_bytes is not None and total > max_bytes:
        raise _C.InvalidArgumentError(
            f"checkpoint '{path}' holds {total} bytes of tensors, more than max_bytes="
            f"{max_bytes}; read fewer keys or stream them with iter_tensors(max_bytes=...)")
    out: dict[str, Any] = _load_tensors(path, wanted, be, verify_checksums,
                                                     storage_options) if wanted else {}
    if objects and (md.objects or md.has_common):
        template = {f"o{i}": ShardedObject(o.key, None, o.index, o.grid)
                    for i, o in enumerate(md.objects)}
        res = load(template, path, single(), allow_unexpected_keys=True, common=md.has_common,
                   allow_pickle=allow_pickle, verify_checksums=verify_checksums,
                   cooperative=False, storage_options=storage_options)
        for o, so in zip(md.objects, template.values()):
            if len(o.grid) == 1:  # one value per rank: keyed by the rank, rng[0]
                out.setdefault(o.key, {})[o.index[0]] = so.value
            elif o.grid:
                out.setdefault(o.key, {})[o.index] = so.value
            else:
                out[o.key] = so.value
        if md.has_common:
            out["<common>"] = res.common
    return out


_KINDS = {_C.VerifyFaultKind.TILING: "tiling", _C.VerifyFaultKind.FILE_HEADER: "file_header",
          _C.VerifyFaultKind.CHUNK: "chunk", _C.VerifyFaultKind.OBJECT: "object"}


def _renamed(new_name: str, new_value: int | None, old_name: str, old_value: int | None,
             default: int) -> int:
    """The value of a keyword renamed from ``old_name`` to ``new_name``: the old
    spelling is still accepted, with a DeprecationWarning; giving both is a TypeError."""
    if old_value is not None:
        if new_value is not None:
            raise TypeError(f"pass {new_name}= only ({old_name}= is its deprecated old name)")
        warnings.warn(f"{old_name}= is deprecated; use {new_name}=", DeprecationWarning,
                      stacklevel=3)
        return int(old_value)
    return default if new_value is None else int(new_value)


def verify(path: str | os.PathLike, *, io_threads: int | None = None,
           read_slice_bytes: int | None = None, threads: int | None = None,
           slice_bytes: int | None = None, prefetch_bytes: int | None = None,
           storage_options: dict | None = None) -> VerifyReport:
    """Re-reads the whole checkpoint and checks it: the manifest, that every tensor
    is tiled by its chunks, every data file's header, every chunk and value
    checksum. Problems are ``faults`` of the report (``report.ok``); only an
    unreadable manifest raises (NotFoundError, DataLossError, IOFailureError).
    ``io_threads`` (default 4) reader threads read in slices of at most
    ``read_slice_bytes`` (default 1 MiB, as ``load``): memory is about
    ``(io_threads + 1) * read_slice_bytes``; ``prefetch_bytes`` as ``load``'s
    (default 16 MiB, 0: off). ``threads`` and ``slice_bytes`` are
    the deprecated old names of these two (accepted, with a DeprecationWarning).
    ``storage_options``: as ``save``'s, for an ``s3://`` path."""
    path = os.fspath(path)
    n = _renamed("io_threads", io_threads, "threads", threads, 4)
    defaults = _C.LoadOptions()  # one knob, one default: load's
    slice_ = _renamed("read_slice_bytes", read_slice_bytes, "slice_bytes", slice_bytes,
                      defaults.read_slice_bytes)
    ahead = (defaults.prefetch_bytes if prefetch_bytes is None
             else prefetch_bytes_option(prefetch_bytes))
    r = _C.verify_checkpoint(path, n, slice_, ahead, storage_for(storage_options))
    faults = tuple(Fault(_KINDS[f.kind], f.key, int(f.chunk), tuple(f.object_index), f.file,
                         int(f.begin), int(f.end), f.message) for f in r.faults)
    return VerifyReport(path, int(r.tensors), int(r.chunks_checked), int(r.objects_checked),
                        int(r.bytes_checked), int(r.files), float(r.seconds), faults)


def _size(nbytes: int) -> str:
    n = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{nbytes} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n}"  # pragma: no cover


def inspect(path: str | os.PathLike, *, storage_options: dict | None = None) -> str:
    """A human-readable summary of the checkpoint: one line per tensor (key, dtype,
    global shape, chunks, bytes), the values, the common state and the metadata.
    ``storage_options``: as ``save``'s, for an ``s3://`` path."""
    md = metadata(path, storage_options=storage_options)
    rows = [("key", "dtype", "shape", "chunks", "bytes")]
    for k in sorted(md.tensors):
        t = md.tensors[k]
        rows.append((k, t.dtype, "x".join(map(str, t.shape)) or "scalar", str(len(t.chunks)),
                     _size(t.nbytes)))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = [f"checkpoint {md.path} (format {md.format_version}): {len(md.tensors)} tensors, "
             f"{_size(md.nbytes)}, {len(md.objects)} values, {len(md.files)} files"]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    for o in md.objects:
        where = f"[{','.join(map(str, o.index))}] of {list(o.grid)}" if o.grid else ""
        lines.append(f"  value {o.key}{where}: {_size(o.nbytes)}")
    if md.has_common:
        lines.append(f"  common state: {_size(md.common_bytes)}")
    if md.metadata is not None:
        lines.append(f"  metadata: {md.metadata}")
    return "\n".join(lines)
