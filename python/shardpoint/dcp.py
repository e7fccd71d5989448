"""shardpoint.dcp: a storage backend for PyTorch Distributed Checkpoint (DCP).

A DCP job switches to shardpoint's format, checksums and I/O by changing one
argument::

    import shardpoint.dcp as spdcp
    # torch 2.x
    dcp.save(state_dict, storage_writer=spdcp.StorageWriter("ckpt/step_100"))
    dcp.load(state_dict, storage_reader=spdcp.StorageReader("ckpt/step_100"))
    # torch 1.13 (torch.distributed._shard.checkpoint)
    save_state_dict(state_dict, storage_writer=spdcp.StorageWriter("ckpt/step_100"))
    load_state_dict(state_dict, storage_reader=spdcp.StorageReader("ckpt/step_100"))

``StorageWriter`` writes a real shardpoint checkpoint (manifest, data files,
per-block checksums, atomic commit) that ``shardpoint verify``/``inspect``,
``sp.load`` and ``sp.read`` accept: in ``write_data`` every rank hands its
items (DCP's deduplicated plan: tensor chunks, and ``BytesIO`` items) to one
collective shardpoint save over ``comm``, which commits the checkpoint once
every rank's bytes are durable. ``finish`` (the coordinator) then checks that
every item of DCP's metadata was written; nothing else is left to do, and
DCP's pickled ``.metadata`` is not written: the manifest describes the
checkpoint.

``StorageReader`` reads shardpoint checkpoints (written by ``StorageWriter``
or by ``sp.save``) and plain DCP directories (``FileSystemWriter``'s). Its
metadata comes from the manifest (a DCP directory: DCP's own ``.metadata``,
read by DCP's ``FileSystemReader``); its ``read_data`` loads every read item
of the rank's plan by one shardpoint load in this process (no collective):
only the byte ranges the items need, checksums verified (DCP directories
have none). The module imports torch's DCP (on Python 3.11 torch 1.13's with
the patch of ``shardpoint._torch_dcp``).
"""

from __future__ import annotations

import io
import json
import os
import pickle
from typing import Any

import torch

from shardpoint import _objects
from shardpoint import _shardpoint as _C
from shardpoint import _torch_dcp
from shardpoint._once import from_rank0
from shardpoint._read import metadata as _sp_metadata
from shardpoint._read import torch_dtypes
from shardpoint._storage import storage_for
from shardpoint._tensors import describe as _describe
from shardpoint.comm import Comm, default_comm, single
from shardpoint.sharded import ShardedTensor

__all__ = ["StorageWriter", "StorageReader", "WRITER_TAG"]

_D = _torch_dcp.api()
# A written checkpoint's user metadata: {"dcp": {"writer": WRITER_TAG, "torch": version}}.
WRITER_TAG = "shardpoint.dcp"


def _done(value: Any) -> torch.futures.Future:
    fut: torch.futures.Future = torch.futures.Future()
    fut.set_result(value)
    return fut


def _is_path(checkpoint_id: Any) -> bool:
    try:
        os.fspath(checkpoint_id)
    except TypeError:
        return False
    return True


class StorageWriter(_D.StorageWriter):  # type: ignore[misc, name-defined]
    """Writes DCP's items as a shardpoint checkpoint at ``path`` (or the
    ``checkpoint_id`` torch 2.x passes).

    ``comm``: the shardpoint Comm over the ranks that save (default
    ``default_comm()``: over torch.distributed's default group, on its own gloo
    group, created here: constructing the first writer is collective, so an
    ``async_save`` later talks on it from its thread safely). ``overwrite``:
    replace a checkpoint at ``path`` (DCP's FileSystemWriter overwrites files
    in place; shardpoint refuses unless asked). ``io_threads``,
    ``staging_bytes``, ``direct_io``, ``storage_options`` (an ``s3://`` path): as
    ``sp.save``. The save plan is cached between saves of the same structure."""

    def __init__(self, path: str | os.PathLike | None = None, comm: Comm | None = None, *,
                 overwrite: bool = False, io_threads: int | None = None,
                 staging_bytes: int | None = None, direct_io: bool | None = None,
                 storage_options: dict | None = None) -> None:
        super().__init__()
        self.path = os.fspath(path) if path is not None else None
        self.comm = comm if comm is not None else default_comm()
        self.is_coordinator = False
        self._options = _C.SaveOptions()
        self._options.overwrite = bool(overwrite)
        self._options.verify_replicas = False  # DCP's plan writes every item once
        if io_threads is not None:
            self._options.io_threads = int(io_threads)
        if staging_bytes is not None:
            self._options.staging_bytes = int(staging_bytes)
        if direct_io is not None:
            self._options.direct_io = bool(direct_io)
        self._options.plan_cache = _C.SavePlanCache()
        storage = storage_for(storage_options)
        if storage is not None:
            self._options.set_storage(storage)

    # -- torch 2.x ------------------------------------------------------------
    def reset(self, checkpoint_id: Any = None) -> None:
        if checkpoint_id is not None:
            self.path = os.fspath(checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
        return _is_path(checkpoint_id)

    def storage_meta(self) -> Any:
        return _D.StorageMeta(checkpoint_id=self.path) if _D.StorageMeta else None

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.is_coordinator = bool(is_coordinator)

    # -- torch 1.13 -----------------------------------------------------------
    def init(self, is_coordinator: bool) -> None:
        self.set_up_storage_writer(is_coordinator)

    # -- both -----------------------------------------------------------------
    def prepare_local_plan(self, plan: Any) -> Any:
        return plan

    def prepare_global_plan(self, plans: list) -> list:
        return plans

    def _state(self, plan: Any, planner: Any) -> tuple[Any, list, list]:
        """A C++ State of this rank's items, the objects keeping its memory alive,
        and DCP's WriteResults."""
        st, tensors, objects, owners, results = _C.State(), [], [], [], []
        for item in plan.items:
            fqn = item.index.fqn
            data = planner.resolve_data(item)
            if item.type == _D.WriteItemType.BYTE_IO:
                raw = data.getvalue()
                objects.append(_C.Object(fqn, _objects.encode(fqn, raw, False)))
                results.append(_D.WriteResult(item.index, len(raw), {"key": fqn}))
                continue
            t = data.detach()
            if t.device.type != "cpu":
                t = t.cpu()
            chunk = item.tensor_data.chunk
            sharded = ShardedTensor(fqn, t, list(item.tensor_data.size), list(chunk.offsets))
            lt, owner = sharded.bind()
            tensors.append(lt)
            owners.append(owner)
            results.append(_D.WriteResult(item.index, t.numel() * t.element_size(),
                                          {"key": fqn, "offset": list(chunk.offsets)}))
        st.tensors = tensors
        st.objects = objects
        st.common = None
        st.metadata_json = json.dumps({"dcp": {"writer": WRITER_TAG, "torch": torch.__version__}})
        return st, owners, results

    def _agree(self, error: str) -> None:
        """Raises on every rank if any rank failed to prepare its items (so none
        is left waiting in the collective save)."""
        msgs = [m.decode() for m in self.comm.all_gather(error.encode())]
        bad = [m for m in msgs if m]
        if bad:
            raise _C.FailedPreconditionError(f"DCP save to '{self.path}': " + "; ".join(bad))

    def write_data(self, plan: Any, planner: Any) -> torch.futures.Future:
        if self.path is None:
            raise _C.InvalidArgumentError("shardpoint.dcp.StorageWriter: no path (give one, or "
                                          "a checkpoint_id to torch's save)")
        try:
            st, owners, results = self._state(plan, planner)
            error = ""
        except Exception as e:  # noqa: BLE001 - every rank must learn of it (below)
            error = f"rank {self.comm.rank()}: {type(e).__name__}: {e}"
        self._agree(error)
        _C.save(st, self.path, self.comm, self._options)
        del owners
        return _done(results)

    def finish(self, metadata: Any, results: list) -> None:
        written = {r.index.fqn for rank in results for r in rank}
        lost = sorted(set(metadata.state_dict_metadata) - written)
        if lost:
            raise _C.InternalError(f"DCP save to '{self.path}': no rank wrote {lost}")


# ---------------------------------------------------------------------------
# Reading.

_TORCH_DTYPES = torch_dtypes()


def _manifest_metadata(md: Any) -> Any:
    """DCP Metadata of a shardpoint checkpoint: each tensor with its stored chunks,
    each unsharded object as a bytes item (sharded objects and common state have no
    DCP equivalent and are left out)."""
    sdm: dict[str, Any] = {}
    for key, t in md.tensors.items():
        if t.dtype not in _TORCH_DTYPES:
            raise _C.FailedPreconditionError(f"'{key}' in '{md.path}': dtype {t.dtype} has no "
                                             f"torch {torch.__version__} dtype")
        chunks = [_D.ChunkStorageMetadata(offsets=torch.Size(c.offset), sizes=torch.Size(c.shape))
                  for c in t.chunks]
        sdm[key] = _D.TensorStorageMetadata(
            properties=_D.TensorProperties(dtype=_TORCH_DTYPES[t.dtype]),
            size=torch.Size(t.shape), chunks=chunks)
    for o in md.objects:
        if not o.index:
            sdm[o.key] = _D.BytesStorageMetadata()
    return _D.Metadata(state_dict_metadata=sdm)


def _read_md(path: str, storage_options: dict | None) -> tuple[Any, str]:
    """(DCP Metadata, how its byte items are stored) of the checkpoint at ``path``."""
    # a plain DCP directory: its .metadata is a pickle (torch's FileSystemReader
    # reads a local one; on an object store it comes through shardpoint's storage)
    storage = storage_for(storage_options)
    if _C.checkpoint_kind(path, storage) == "pytorch_dcp":
        if not path.startswith("s3://"):
            return _D.FileSystemReader(path).read_metadata(), "dcp"
        return pickle.loads(_C.read_file(path.rstrip("/") + "/.metadata", storage)), "dcp"
    md = _sp_metadata(path, storage_options=storage_options)
    written = isinstance(md.metadata, dict) and isinstance(md.metadata.get("dcp"), dict) \
        and md.metadata["dcp"].get("writer") == WRITER_TAG
    return _manifest_metadata(md), "written" if written else "values"


class StorageReader(_D.StorageReader):  # type: ignore[misc, name-defined]
    """Reads a shardpoint checkpoint or a plain DCP directory at ``path`` (or the
    ``checkpoint_id`` torch 2.x passes) for DCP's load.

    ``verify_checksums`` (default True), ``io_threads``, ``read_gap_bytes``,
    ``storage_options`` (an ``s3://`` path): as ``sp.load``. Values a shardpoint
    checkpoint stores as JSON are handed to DCP as ``torch.save`` archives of the
    value; ``allow_pickle`` unpickles pickled ones (trusted checkpoints only).
    ``comm`` (default ``default_comm()``): rank 0 reads the metadata and
    broadcasts it to the others."""

    def __init__(self, path: str | os.PathLike | None = None, *, verify_checksums: bool = True,
                 io_threads: int | None = None, read_gap_bytes: int | None = None,
                 allow_pickle: bool = False, storage_options: dict | None = None,
                 comm: Comm | None = None) -> None:
        super().__init__()
        self.path = os.fspath(path) if path is not None else None
        self.comm = comm
        self.allow_pickle = bool(allow_pickle)
        self._options = _C.LoadOptions()
        self._options.verify_checksums = bool(verify_checksums)
        self._options.allow_unexpected_keys = True  # a plan reads some of the keys
        self._options.allow_dtype_conversion = True  # DCP copies into the target's dtype
        self._options.cooperative = False
        self._options.common_optional = True
        if io_threads is not None:
            self._options.io_threads = int(io_threads)
        if read_gap_bytes is not None:
            self._options.read_gap_bytes = int(read_gap_bytes)
        self._storage_options = storage_options
        storage = storage_for(storage_options)
        if storage is not None:
            self._options.set_storage(storage)
        self.metadata: Any = None
        self._objects = "dcp"  # "dcp": torch.save bytes; "written": same, tagged; "values"

    # -- torch 2.x ------------------------------------------------------------
    def reset(self, checkpoint_id: Any = None) -> None:
        if checkpoint_id is not None:
            self.path = os.fspath(checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Any) -> bool:
        if not _is_path(checkpoint_id):
            return False
        path = os.fspath(checkpoint_id)  # an object-store prefix has no local directory
        return str(path).startswith("s3://") or os.path.isdir(path)

    def set_up_storage_reader(self, metadata: Any, is_coordinator: bool, *args: Any,
                              **kwargs: Any) -> None:
        self.metadata = metadata

    # -- torch 1.13 -----------------------------------------------------------
    def init(self, metadata: Any, is_coordinator: bool) -> None:
        self.set_up_storage_reader(metadata, is_coordinator)

    # -- both -----------------------------------------------------------------
    def _where(self) -> str:
        if self.path is None:
            raise _C.InvalidArgumentError("shardpoint.dcp.StorageReader: no path (give one, or "
                                          "a checkpoint_id to torch's load)")
        return self.path

    def read_metadata(self) -> Any:
        """DCP's metadata of the checkpoint (collective over ``comm``: every rank of a
        DCP load calls it): rank 0 reads it and broadcasts it, or its error."""
        path = self._where()
        comm = self.comm if self.comm is not None else default_comm()
        opts = self._storage_options
        md, self._objects = pickle.loads(
            from_rank0(comm, lambda: pickle.dumps(_read_md(path, opts))))
        return md

    def prepare_local_plan(self, plan: Any) -> Any:
        return plan

    def prepare_global_plan(self, plans: list) -> list:
        return plans

    def _request(self, item: Any, planner: Any) -> tuple[Any, Any, Any, Any]:
        """(target, buffer or None, C++ LocalTensor, owner) of a tensor read item."""
        target = planner.resolve_tensor(item).detach()
        fqn = item.storage_index.fqn
        size = list(self.metadata.state_dict_metadata[fqn].size)
        offset = [int(a) + int(b) for a, b in zip(item.storage_index.offset,
                                                  item.storage_offsets)]
        buf = None
        try:
            if target.device.type != "cpu":
                raise _C.InvalidArgumentError("device")
            _describe(target, writable=True)
            into = target
        except _C.InvalidArgumentError:  # a device, dtype or strides C++ cannot fill
            stored = self.metadata.state_dict_metadata[fqn].properties.dtype
            buf = torch.empty(list(item.lengths), dtype=stored)
            into = buf
        lt, owner = ShardedTensor(fqn, into, size, offset).bind(writable=True)
        return target, buf, lt, owner

    def _bytes(self, key: str, data: bytes) -> io.BytesIO:
        if self._objects == "dcp":
            return io.BytesIO(data)
        value = _objects.decode(key, data, self.allow_pickle, None, self.path)
        if self._objects == "written":
            return io.BytesIO(value)
        out = io.BytesIO()
        torch.save(value, out)
        out.seek(0)
        return out

    def read_data(self, plan: Any, planner: Any) -> torch.futures.Future:
        st, tensors, owners, reads, byte_items = _C.State(), [], [], [], []
        for item in plan.items:
            if item.type == _D.LoadItemType.BYTE_IO:
                byte_items.append(item)
                continue
            target, buf, lt, owner = self._request(item, planner)
            tensors.append(lt)
            owners.append(owner)
            reads.append((item, target, buf))
        st.tensors = tensors
        st.objects = [_C.Object(i.storage_index.fqn) for i in byte_items]
        st.common = None
        _C.load(st, self._where(), single(), self._options)
        for item, target, buf in reads:
            if buf is not None:
                target.copy_(buf)
            planner.commit_tensor(item, target)
        for item, ob in zip(byte_items, st.objects):
            planner.load_bytes(item, self._bytes(ob.key, ob.bytes))
        del owners
        return _done(None)
