"""TrainState.load(path, mapping=...): a checkpoint whose keys a mapping relates
to the model's HF-style names (a Megatron torch_dist checkpoint: stacked
``decoder.layers.*`` keys, fused ``linear_qkv`` / ``linear_fc1``, optimizer
state ``optimizer.state.<name>.<key>``) loaded into a torch model and its
optimizers, under the TrainState's layouts.

The mapping's pieces (``_C.place_in_hf``: what export-hf writes by) say which
box of which stored key holds which run of rows of each HF tensor. Each
target tensor (a parameter, or its optimizer state ``<name>``) is filled by
one ``shardpoint.load`` of those boxes straight into row bands of its local
tensor: only the bytes of this rank's shards are read."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from shardpoint import _shardpoint as _C
from shardpoint import sharded as _sh

_MASTER = "<fp32 master>"  # the stored state that holds a parameter's fp32 master copy
# A Megatron dp_reshardable bucket or its per_bucket_numel objects: the stored form
# of state read through its per-parameter view where the buckets were rebuilt.
_BUCKET = re.compile(r"(chained_\d+\.)?optimizer\.distributed\.dp_group_idx_\d+\.")


def _placements(path: Any, md: Any, mapping_spec: Any, variables: Any,
                storage_options: Any) -> dict:
    """{(hf name, state): [(key, key shape, hf shape, hf_offset, box offset, box shape)]}
    of checkpoint ``path`` whose manifest is ``md``."""
    from shardpoint import hf as sphf
    from shardpoint._storage import storage_for
    storage = storage_for(storage_options)
    shapes = {k: list(t.shape) for k, t in md.tensors.items()}
    out: dict = {}
    for key, state, hf, hf_shape, off, bo, bs in _C.place_in_hf(
            str(path), sphf.mapping(mapping_spec), dict(variables or {}), storage):
        out.setdefault((hf, state), []).append((key, shapes[key], hf_shape, off, bo, bs))
    return out


def _read_once(path: Any, mapping_spec: Any, variables: Any, storage_options: Any,
               comm: Any) -> tuple[dict, dict]:
    """The checkpoint's user metadata and ``_placements`` (collective): rank 0
    reads the manifest (its metadata, then place_in_hf's) and broadcasts both, so
    the storage sees one rank's metadata reads whatever the rank count (issue 41);
    a failure there is every rank's, with the same class and message."""
    from shardpoint._once import from_rank0
    from shardpoint._read import metadata

    def read() -> bytes:
        md = metadata(path, storage_options=storage_options)
        placed = _placements(path, md, mapping_spec, variables, storage_options)
        return json.dumps([md.metadata or {},
                           [[hf, state, v] for (hf, state), v in placed.items()]]).encode()

    user_md, placed = json.loads(from_rank0(comm, read))
    return user_md, {(hf, state): v for hf, state, v in placed}


def _stored_step(md: dict) -> int | None:
    """The step of a Megatron torch_dist checkpoint's optimizer (common.pt's
    optimizer param groups), if its user metadata ``md`` states one."""
    common = md.get("megatron_torch_dist", {}).get("common.pt", {})
    opt = common.get("optimizer", {}) if isinstance(common, dict) else {}
    while isinstance(opt, dict) and "param_groups" not in opt and "optimizer" in opt:
        opt = opt["optimizer"]  # a distributed optimizer's {"optimizer": {...}}
    groups = opt.get("param_groups") if isinstance(opt, dict) else None
    steps = {g.get("step") for g in groups or [] if isinstance(g, dict)}
    return steps.pop() if len(steps) == 1 and isinstance(next(iter(steps), None), int) else None


def _not_rebuilt(md: dict) -> str:
    """Why a Megatron checkpoint's dp_reshardable buckets were not rebuilt per
    parameter (docs/dcp.md), or "", from its user metadata ``md``."""
    why = md.get("megatron_torch_dist", {}).get("dp_reshardable", {}).get("not_rebuilt", "")
    return why if isinstance(why, str) else ""


def _rebuilt(md: dict) -> bool:
    """Whether a Megatron checkpoint's dp_reshardable buckets were rebuilt per
    parameter, from its user metadata ``md``."""
    return "rebuilt_tensors" in md.get("megatron_torch_dist", {}).get("dp_reshardable", {})


def _row_boxes(name: str, target: tuple, pieces: list) -> tuple[list, int]:
    """The (key, key shape, box offset, box shape, target row range) to read for
    ``target`` = (global shape, offset, local shape) of HF tensor ``name``, and
    the elements they cover. Each piece must be whole rows of the HF tensor
    whose box, leading 1s aside, has the HF tensor's trailing dims."""
    gshape, goff, lshape = target
    r = len(gshape)
    row = math.prod(gshape[1:]) if r else 1
    reads, covered = [], 0
    for key, kshape, hf_shape, off, bo, bs in pieces:
        j = len(bs) - r
        if (list(hf_shape) != list(gshape) or r == 0 or j < 0 or any(d != 1 for d in bs[:j])
                or list(bs[j + 1:]) != list(gshape[1:]) or off % row):
            raise _C.InvalidArgumentError(
                f"'{name}': the piece of '{key}' at {list(bo)} {list(bs)} (elements from {off} of "
                f"{list(hf_shape)}) is not whole rows of the model's {list(gshape)}")
        a0 = off // row
        lo, hi = max(a0, goff[0]), min(a0 + bs[j], goff[0] + lshape[0])
        if lo >= hi:
            continue
        offs = list(bo[:j]) + [bo[j] + lo - a0] + [bo[j + 1 + k] + goff[1 + k]
                                                   for k in range(r - 1)]
        shape = list(bs[:j]) + [hi - lo] + list(lshape[1:])
        reads.append((key, kshape, offs, shape, lo - goff[0], hi - goff[0]))
        covered += (hi - lo) * math.prod(lshape[1:])
    return reads, covered


def _target(v: Any) -> tuple[Any, tuple]:
    """(local torch tensor, (global shape, offset, local shape)) of a state-dict value."""
    if isinstance(v, _sh.ShardedTensor):
        lt, data = v.layout, v.data
        segs = lt.segments
        if (len(segs) != 1 or lt.flat is not None or any(segs[0].local_offset)
                or list(segs[0].global_box.shape) != list(data.shape)):
            raise _C.InvalidArgumentError(
                f"'{v.key}': a mapped load takes a tensor that is one box of its global tensor "
                "(column, row, vocab parallel), not a fused or flat layout")
        g = segs[0]
        return data, (list(g.global_shape), list(g.global_box.offset), list(data.shape))
    return v, (list(v.shape), [0] * v.dim(), list(v.shape))


def _targets(sd: dict, opts: list, master: bool) -> list:
    """(HF name, state to read, local tensor, geometry, what to call it) of every tensor
    to fill: model parameters (stored weights, or the optimizer's ``param`` if
    ``master``), then each optimizer's tensor state of each parameter."""
    from shardpoint.torch import _get, _is_torch_tensor
    out = []
    for fqn, v in sd.get("model", {}).items():
        data, geo = _target(v)
        out.append((fqn, _MASTER if master else "", data, geo, f"model.{fqn}"))
    for prefix, _ in opts:
        for fqn, entry in _get(sd, prefix)["state"].items():
            for name, v in entry.items():
                if name != "step" and (isinstance(v, _sh.ShardedTensor) or _is_torch_tensor(v)):
                    data, geo = _target(v)
                    out.append((fqn, name, data, geo, f"{prefix}.state.{fqn}.{name}"))
    return out


def _load_dict(targets: list, placed: dict, allow_missing: bool,
               why: str) -> tuple[dict, list, list]:
    """The dict for shardpoint.load (row bands of the targets, in place, or of a
    contiguous copy), the copies to make afterwards, and the missing names."""
    from shardpoint.sharded import ShardedTensor
    todo, copies, missing = {}, [], []
    for hf, state, data, geo, what in targets:
        if state == _MASTER:  # Megatron's distributed optimizer: "param"; fsms: "fp32_param"
            state = next((s for s in ("param", "fp32_param") if (hf, s) in placed), "param")
        reads, covered = _row_boxes(hf, geo, placed.get((hf, state), []))
        if covered != math.prod(geo[2]):
            if not allow_missing:
                raise _C.NotFoundError(
                    f"'{what}': the checkpoint holds {covered} of its {math.prod(geo[2])} elements "
                    f"under the mapping (as '{hf}'" + (f", state '{state}')" if state else ")")
                    + (f"; its dp_reshardable buckets are read as stored, not per parameter: "
                       f"{why}" if why and state else ""))
            missing.append(what)
            continue
        buf = data if data.is_contiguous() else data.contiguous()
        if buf is not data:
            copies.append((data, buf))
        for i, (key, kshape, offs, shape, a, b) in enumerate(reads):
            todo[f"{what}#{i}"] = ShardedTensor(key, buf[a:b].view(shape), kshape, offs)
    return todo, copies, missing


def _every_ranks_error(comm: Any, error: Exception | None) -> None:
    """Collective: if any rank's ``error`` is set, every rank raises: that rank
    its own error, the others one of its class naming the first failed rank and
    its message (a rank that failed alone must not leave the others waiting in
    the load's collectives)."""
    mine = b"" if error is None else json.dumps([type(error).__name__, str(error)]).encode()
    failed = [(r, json.loads(e)) for r, e in enumerate(comm.all_gather(mine)) if e]
    if error is not None:
        raise error
    if failed:
        r, (name, message) = failed[0]
        raise getattr(_C, name, _C.Error)(f"rank {r}: {message} (nothing was loaded)")


def load_mapped(ts: Any, path: Any, mapping_spec: Any, *, variables: Any = None,
                master_params: bool = False, step: int | None = None, **kwargs: Any) -> Any:
    """TrainState.load(mapping=...); see its docstring."""
    import torch

    from shardpoint._checkpoint import load as _load
    from shardpoint.torch import _allowed, _apply_state, _get, _named, _Structure
    from shardpoint._torch_optim import forget_state, has_state
    opts = _named(ts.optimizers, "optim")
    before = [has_state(o) for _, o in opts]
    allow_missing, _ = _allowed(kwargs)
    kwargs.setdefault("allow_unexpected_keys", True)
    kwargs.setdefault("common", False)
    kwargs.pop("strict", None)
    kwargs.pop("allow_missing_keys", None)
    try:
        sd = ts.state_dict(allow_dry_step=True, init_state=True)
        user_md, placed = _read_once(path, mapping_spec, variables,
                                     kwargs.get("storage_options"), ts.comm)
        failed = None
        try:
            todo, copies, missing = _load_dict(_targets(sd, opts, master_params), placed,
                                               allow_missing, _not_rebuilt(user_md))
        except _C.Error as e:
            failed = e
        _every_ranks_error(ts.comm, failed)
        result = _load(todo, path, ts.comm, allow_missing_keys=False, **kwargs)
    except BaseException:
        for (_, o), keep in zip(opts, before):
            forget_state(o, keep)
        raise
    step = _stored_step(user_md) if step is None else step
    with torch.no_grad():
        for dst, buf in copies:
            dst.copy_(buf)
    applied: dict = {"model": sd.get("model", {})}
    for prefix, _ in opts:
        state = _get(sd, prefix)["state"]
        for fqn in [f for f in state if any(m.startswith(f"{prefix}.state.{f}.") for m in missing)]:
            del state[fqn]  # not stored: the parameter ends without state, as after torch's load
        for entry in state.values():
            if step is not None and "step" in entry:
                s = entry["step"]
                entry["step"] = (s.fill_(step) if torch.is_tensor(s) else type(s)(step))
        node = applied
        for p in prefix.split("."):
            node = node.setdefault(p, {})
        node["state"] = state
    _apply_state(ts.model, ts.optimizers, None, None, applied, _Structure(), False)
    result.missing_keys = sorted(missing)
    if _rebuilt(user_md):  # the buckets were read through their per-parameter views
        result.unexpected_keys = [k for k in result.unexpected_keys if not _BUCKET.match(k)]
    return result
