"""The PyTorch Distributed Checkpoint (DCP) API of the installed torch, for
``shardpoint.dcp``: torch 2.x's ``torch.distributed.checkpoint`` or torch
1.13's ``torch.distributed._shard.checkpoint``, as one namespace.

torch 1.13's DCP does not import on Python 3.11: its
``ShardedTensorMetadata.tensor_properties`` defaults to a ``TensorProperties()``
instance, which 3.11's dataclasses reject as a mutable default. ``api()``
imports it with ``dataclasses.field(default=<dataclass instance>)`` read as
``field(default_factory=<a deep copy>)`` during the import (what the default
means; the same patch as python/tests/dcp_compat.py), and nothing else.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import threading
import types
from typing import Any

_lock = threading.Lock()
_api: types.SimpleNamespace | None = None


def torch_major() -> int:
    import torch
    return int(torch.__version__.split(".")[0])


def _import_patched(name: str) -> Any:
    original = dataclasses.field

    def field(*args: Any, **kwargs: Any) -> Any:
        default = kwargs.get("default", dataclasses.MISSING)
        if default is not dataclasses.MISSING and dataclasses.is_dataclass(default):
            del kwargs["default"]
            kwargs["default_factory"] = lambda d=default: copy.deepcopy(d)
        return original(*args, **kwargs)

    dataclasses.field = field  # type: ignore[assignment]
    try:
        return importlib.import_module(name)
    finally:
        dataclasses.field = original  # type: ignore[assignment]


def _load() -> types.SimpleNamespace:
    if torch_major() >= 2:
        base = "torch.distributed.checkpoint"
        dcp = importlib.import_module(base)
        md = importlib.import_module(base + ".metadata")
        properties = md.TensorProperties
        storage_meta = getattr(md, "StorageMeta", None)  # torch >= 2.4
    else:
        base = "torch.distributed._shard.checkpoint"
        dcp = _import_patched(base)
        md = importlib.import_module(base + ".metadata")
        properties = importlib.import_module(
            "torch.distributed._shard.sharded_tensor.metadata").TensorProperties
        storage_meta = None
    storage = importlib.import_module(base + ".storage")
    planner = importlib.import_module(base + ".planner")
    return types.SimpleNamespace(
        module=dcp, base=base, StorageWriter=storage.StorageWriter,
        StorageReader=storage.StorageReader, WriteResult=storage.WriteResult,
        Metadata=md.Metadata, MetadataIndex=md.MetadataIndex,
        TensorStorageMetadata=md.TensorStorageMetadata,
        ChunkStorageMetadata=md.ChunkStorageMetadata,
        BytesStorageMetadata=md.BytesStorageMetadata, TensorProperties=properties,
        StorageMeta=storage_meta, LoadItemType=planner.LoadItemType,
        WriteItemType=planner.WriteItemType, FileSystemReader=dcp.FileSystemReader,
        FileSystemWriter=dcp.FileSystemWriter)


def api() -> types.SimpleNamespace:
    """The DCP classes of this torch (imported once)."""
    global _api
    with _lock:
        if _api is None:
            _api = _load()
        return _api
