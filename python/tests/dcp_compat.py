"""Imports torch 1.13's distributed checkpoint (DCP) on Python 3.11.

torch 1.13 ships DCP as ``torch.distributed._shard.checkpoint``. On Python
3.11 its import fails: ``ShardedTensorMetadata.tensor_properties`` defaults to
a ``TensorProperties()`` instance, and 3.11's dataclasses reject instances of
unhashable classes as mutable defaults. While importing, this module lets
``dataclasses.field(default=<dataclass instance>)`` become
``field(default_factory=...)`` (a deep copy per object), which is what the
default means; nothing else changes. Tests and benchmarks use it to run the
real DCP as a peer: ``dcp = import_dcp()``.
"""

import copy
import dataclasses
import importlib


def import_dcp():
    """Returns the ``torch.distributed._shard.checkpoint`` module (patched import)."""
    original = dataclasses.field

    def field(*args, **kwargs):
        default = kwargs.get("default", dataclasses.MISSING)
        if default is not dataclasses.MISSING and dataclasses.is_dataclass(default):
            del kwargs["default"]
            kwargs["default_factory"] = lambda d=default: copy.deepcopy(d)
        return original(*args, **kwargs)

    dataclasses.field = field
    try:
        return importlib.import_module("torch.distributed._shard.checkpoint")
    finally:
        dataclasses.field = original
