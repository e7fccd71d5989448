"""All-or-nothing loads: ``load(..., all_or_nothing=True)``.

A load writes each block into its destination as it is read and verified, so a
load that fails while reading (a checksum mismatch, an I/O error on some rank)
leaves the tensors read before the failure overwritten. With
``all_or_nothing`` the load reads into a twin of the template (fresh memory of
the same shapes, dtypes, strides and devices, with the same layouts) and only
once every rank has read and verified all of it copies the twin into the
template's tensors: a failure then leaves every tensor and value as it was.
It costs the memory of the tensors loaded, once more, and one copy of them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardpoint._tensors import is_tensor
from shardpoint.sharded import ShardedTensor
from shardpoint.torch_layouts import from_torch, is_torch_sharded


def _fresh(t: Any, keep_values: bool) -> Any:
    """Memory like ``t`` (its values copied when ``keep_values``: a key the
    checkpoint lacks keeps them)."""
    if isinstance(t, np.ndarray):
        return t.copy() if keep_values else np.empty_like(t)
    import torch
    if keep_values:
        return t.clone(memory_format=torch.preserve_format)
    return torch.empty_like(t, memory_format=torch.preserve_format)


def _twin_sharded(st: ShardedTensor, keep_values: bool, pairs: list) -> ShardedTensor:
    if st.data is None:
        return st
    data = _fresh(st.data, keep_values)
    pairs.append((st.data, data))
    return ShardedTensor.from_layout(st.layout, data, dtype=st.dtype, replica_id=st.replica_id)


def twin(node: Any, path: str, keep_values: bool, pairs: list) -> Any:
    """``node`` with every tensor replaced by fresh memory of its kind; appends
    (template tensor, twin tensor) to ``pairs``. Dicts and lists are new;
    values and ShardedObjects are the template's own (``load`` fills those only
    after every byte is read)."""
    if isinstance(node, ShardedTensor):
        return _twin_sharded(node, keep_values, pairs)
    if is_torch_sharded(node):  # a torch ShardedTensor / DTensor: its layout, over its memory
        sts = from_torch(path, node)
        return [_twin_sharded(s, keep_values, pairs) for s in
                (sts if isinstance(sts, list) else [sts])]
    if is_tensor(node):
        data = _fresh(node, keep_values)
        pairs.append((node, data))
        return data
    if isinstance(node, dict):
        return {k: twin(v, f"{path}.{k}" if path else str(k), keep_values, pairs)
                for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [twin(v, f"{path}.{i}" if path else str(i), keep_values, pairs)
                for i, v in enumerate(node)]
    return node


def copy_back(pairs: list) -> None:
    """Copies every twin into its template tensor."""
    for dst, src in pairs:
        if isinstance(dst, np.ndarray):
            np.copyto(dst, src)
        else:
            import torch
            with torch.no_grad():
                dst.copy_(src)
