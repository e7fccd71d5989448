"""shardpoint.torch: checkpoint a PyTorch model, its optimizers, schedulers, grad
scaler and RNG in a few lines, under any parallel layout.

    import shardpoint.torch as spt
    state = spt.TrainState(model, opt, schedulers=sched)     # rng=True by default
    state.save("ckpt/iter_100")                               # collective
    ...                                                       # a fresh process:
    state = spt.TrainState(model, opt, schedulers=sched)     # freshly built objects
    state.load("ckpt/iter_100")                               # no opt.step() needed

The state dict (``get_state_dict``) holds the live tensors, so ``load`` fills
them in place, and ``set_state_dict`` applies what is not a tensor
(hyperparameters, scheduler, scaler, RNG). Its keys:

* ``model.<fqn>``: parameters and buffers; a tensor shared by several names
  (tied embeddings) is stored once, under its first name; ``model_aliases``
  records the others;
* ``optim.state.<fqn>.<name>``: optimizer state keyed by parameter name, never
  by position (``optim.<i>.`` / ``optim.<name>.`` for several optimizers);
  state shaped like its parameter takes the parameter's layout, so it reshards
  with the model; ``optim.param_groups``: hyperparameters, ``params`` as names;
* ``scheduler``, ``scaler``: their state as JSON data (no pickle);
* ``rng``: one value per rank (torch CPU, CUDA if initialized, numpy, random).

A sharded model (tensor parallelism) passes ``layouts``: a ``TPPlan``
(Megatron-style name patterns), a dict fqn -> ShardedTensor, or a function
``(fqn, tensor) -> ShardedTensor | None``; keys of such layouts are prefixed
like the names above. torch itself is imported on first use only.
"""

from __future__ import annotations

import base64
import copy
import random
import re
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Union, cast

import numpy as np

from shardpoint import _shardpoint as _C
from shardpoint import sharded as _sh
from shardpoint._checkpoint import LoadResult, SaveHandle, SaveStats, ShardedObject, flatten_keys
from shardpoint._checkpoint import load as _load
from shardpoint._checkpoint import save as _save
from shardpoint._checkpoint import save_async as _save_async
from shardpoint._tensors import describe
from shardpoint._torch_names import canonical_names
from shardpoint._torch_optim import (GroupMatch, apply_param_groups, forget_state, has_state,
                                     init_optimizer_state, match_groups, optimizer_entries)
from shardpoint._torch_sched import decode_scheduler_state, load_scheduler_state, scheduler_state
from shardpoint.comm import Comm, default_comm

if TYPE_CHECKING:  # pragma: no cover
    import torch

    Layouts = Union["TPPlan", Mapping[str, _sh.ShardedTensor],
                    Callable[[str, torch.Tensor], "_sh.ShardedTensor | None"], None]
else:
    Layouts = Any

__all__ = ["TrainState", "get_state_dict", "set_state_dict", "init_optimizer_state", "TPPlan",
           "gqa", "rng_state", "set_rng_state", "scheduler_state", "load_scheduler_state"]

def _torch() -> Any:
    import torch
    return torch


# ---------------------------------------------------------------------------
# Layouts: which piece of which global tensor a rank's parameter is.

_KINDS = ("column", "row", "vocab", "qkv", "swiglu", "replicated")


class TPPlan:
    """Megatron-style tensor parallelism as name patterns: ``rules`` is a list of
    ``(regex, kind)`` (first ``re.search`` match wins, no match: replicated) with kind

    * ``"column"``: split on dim 0 (fc1, QKV as one tensor, column biases);
    * ``"row"``: split on dim 1 (attention output projection, fc2);
    * ``"vocab"``: vocab-parallel embedding / output layer (dim 0);
    * ``"qkv"``: fused ``[q_i; k_i; v_i]`` of three equal parts, stored as
      ``<fqn>.q``, ``<fqn>.k``, ``<fqn>.v``, each column-parallel;
    * ``"swiglu"``: fused ``[W_i; V_i]`` (SwiGLU fc1), stored as ``<fqn>.w`` and ``<fqn>.v``;
    * ``"replicated"``: every TP rank holds it whole;
    * a function ``(fqn, local, tp_rank, tp_size) -> ShardedTensor`` for anything
      else, e.g. ``gqa(heads, groups, head_dim)`` (Megatron's interleaved GQA QKV).

    The global shape is the local one times ``tp_size`` on the split dim. The
    stored keys do not depend on the TP size, so a checkpoint written under
    one plan loads under another TP size (and its optimizer state with it)."""

    def __init__(self, rules: Iterable[tuple[str, str | Callable[..., Any]]], tp_rank: int,
                 tp_size: int) -> None:
        self.rules = [(re.compile(p), k) for p, k in rules]
        for p, k in self.rules:
            if not callable(k) and k not in _KINDS:
                raise _C.InvalidArgumentError(f"TPPlan rule {p.pattern!r}: unknown kind {k!r} "
                                              f"(one of {', '.join(_KINDS)})")
        self.tp_rank, self.tp_size = int(tp_rank), int(tp_size)

    def kind(self, fqn: str) -> str | Callable:
        """The kind of parameter ``fqn`` (the first matching rule's)."""
        for p, k in self.rules:
            if p.search(fqn):
                return k
        return "replicated"

    def __call__(self, fqn: str, t: Any) -> _sh.ShardedTensor:
        k, r, n = self.kind(fqn), self.tp_rank, self.tp_size
        if callable(k):
            return k(fqn, t, r, n)
        shape = list(t.shape)
        if k == "replicated" or n == 1 and k not in ("qkv", "swiglu"):
            return _sh.whole(fqn, t)
        if k in ("column", "vocab", "qkv", "swiglu") and not shape:
            raise _C.InvalidArgumentError(f"'{fqn}': a {k} parameter needs a dim 0")
        if k == "row" and len(shape) < 2:
            raise _C.InvalidArgumentError(f"'{fqn}': a row-parallel parameter needs a dim 1 "
                                          f"(shape {shape}); biases of row-parallel layers "
                                          "are replicated")
        if k in ("column", "vocab"):
            return _sh.column_parallel(fqn, t, [shape[0] * n] + shape[1:], r, n)
        if k == "row":
            return _sh.row_parallel(fqn, t, [shape[0], shape[1] * n] + shape[2:], r, n)
        if k == "qkv":
            if shape[0] % 3:
                raise _C.InvalidArgumentError(f"'{fqn}': fused qkv needs dim 0 divisible by 3, "
                                              f"got shape {shape}")
            g = [shape[0] // 3 * n] + shape[1:]
            return _sh.fused([_C.FusedPart(f"{fqn}.{c}", g) for c in "qkv"], t, 0, r, n)
        if shape[0] % 2:  # swiglu
            raise _C.InvalidArgumentError(f"'{fqn}': fused swiglu needs an even dim 0, got "
                                          f"shape {shape}")
        return _sh.swiglu_fc1(f"{fqn}.w", f"{fqn}.v", t, shape[0] // 2 * n, shape[1:], r, n)


def gqa(heads: int, groups: int, head_dim: int) -> Callable:
    """A TPPlan kind: Megatron's interleaved GQA QKV (per local query group its query
    heads, then its key and value head), stored as ``<fqn>.q``, ``<fqn>.k``,
    ``<fqn>.v`` whatever the TP size."""
    dims = _C.GqaDims(heads, groups, head_dim)

    def layout(fqn: str, t: Any, tp_rank: int, tp_size: int) -> _sh.ShardedTensor:
        return _sh.gqa_qkv(f"{fqn}.q", f"{fqn}.k", f"{fqn}.v", t, dims, list(t.shape[1:]),
                           tp_rank, tp_size)
    return layout


def _layout(layouts: Layouts, fqn: str, t: Any) -> _sh.ShardedTensor:
    """The ShardedTensor of ``t`` (keys not yet prefixed)."""
    from shardpoint import torch_layouts
    st: _sh.ShardedTensor | None = None
    if isinstance(layouts, Mapping):
        st = layouts.get(fqn)
    elif layouts is not None:
        st = layouts(fqn, t)
    if st is not None:
        return st
    found = torch_layouts.from_torch(fqn, t)  # DTensor, ShardedTensor or a whole tensor
    if not isinstance(found, list):
        return found
    if len(found) != 1:
        raise _C.InvalidArgumentError(
            f"'{fqn}': a ShardedTensor with {len(found)} local shards on this rank; "
            "shardpoint.torch handles one local shard per parameter")
    return found[0]


def _rekey(st: _sh.ShardedTensor, data: Any, key: Callable[[str], str]) -> _sh.ShardedTensor:
    """Layout ``st`` over ``data`` (same shape, any dtype) with every key renamed."""
    lt = copy.copy(st.layout)
    segs = lt.segments
    for s in segs:
        s.key = key(s.key)
    lt.segments = segs
    lt.dtype = describe(data, device_ok=True).dtype
    return _sh.ShardedTensor.from_layout(lt, data)


def _local(t: Any) -> Any:
    """The memory that holds ``t`` on this rank (a DTensor's or ShardedTensor's local tensor)."""
    from shardpoint import torch_layouts
    return torch_layouts.local_tensor(t)


# ---------------------------------------------------------------------------
# Optimizers.

def _named(objs: Any, base: str) -> list[tuple[str, Any]]:
    """(key prefix, object) for one object, a list of them or a dict name -> object."""
    if objs is None:
        return []
    if isinstance(objs, Mapping):
        return [(f"{base}.{k}", v) for k, v in objs.items()]
    if isinstance(objs, (list, tuple)):
        return [(base, objs[0])] if len(objs) == 1 else [(f"{base}.{i}", o)
                                                        for i, o in enumerate(objs)]
    return [(base, objs)]


def _is_torch_tensor(x: Any) -> bool:
    torch = _torch()
    return isinstance(x, torch.Tensor)


# ---------------------------------------------------------------------------
# RNG: one value per rank.

def rng_state() -> dict:
    """This process's random generators as JSON data: torch CPU, torch CUDA (every
    device, if CUDA is initialized), numpy's global generator, ``random``."""
    torch = _torch()
    out: dict[str, Any] = {"torch": base64.b64encode(torch.get_rng_state().numpy().tobytes())
                           .decode()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = [base64.b64encode(s.numpy().tobytes()).decode()
                       for s in torch.cuda.get_rng_state_all()]
    name, keys, pos, has_gauss, gauss = cast(tuple, np.random.get_state())
    out["numpy"] = [name, keys.tolist(), int(pos), int(has_gauss), float(gauss)]
    version, internal, gauss_next = random.getstate()
    out["random"] = [version, list(internal), gauss_next]
    return out


def set_rng_state(state: dict) -> None:
    """Restores what ``rng_state`` returned."""
    torch = _torch()

    def tensor(b64: str) -> Any:
        return torch.frombuffer(bytearray(base64.b64decode(b64)), dtype=torch.uint8)

    torch.set_rng_state(tensor(state["torch"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([tensor(s) for s in state["cuda"]])
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))
    version, internal, gauss_next = state["random"]
    random.setstate((version, tuple(internal), gauss_next))




# ---------------------------------------------------------------------------
# The state dict.

def _model_tensors(model: Any) -> dict[str, Any]:
    """``model.state_dict()`` under canonical names (no wrapper prefixes)."""
    sd = model.state_dict()
    canon = canonical_names(model, list(sd))
    return {canon[k]: v for k, v in sd.items()}


def _param_names(model: Any) -> dict[int, str]:
    """id(parameter) -> its canonical name."""
    named = list(model.named_parameters())
    canon = canonical_names(model, [n for n, _ in named])
    return {id(p): canon[n] for n, p in named}


def _ident(t: Any) -> tuple:
    local = _local(t)
    return (local.data_ptr(), local.dtype, tuple(local.shape), tuple(local.stride()))


def _aliases(live: dict[str, Any]) -> dict[str, str]:
    """{alias: first name} of the tensors shared by several names (tied weights)."""
    aliases: dict[str, str] = {}
    seen: dict[tuple, str] = {}
    for fqn, t in live.items():
        if _is_torch_tensor(t):
            ident = _ident(t)
            if _local(t).numel() and ident in seen:
                aliases[fqn] = seen[ident]
            seen.setdefault(ident, fqn)
    return aliases


def get_state_dict(model: Any, optimizers: Any = None, *, schedulers: Any = None,
                   scaler: Any = None, rng: bool = False, layouts: Layouts = None,
                   comm: Comm | None = None, extra: dict[str, Any] | None = None,
                   allow_dry_step: bool | None = None,
                   init_state: bool | None = None) -> dict[str, Any]:
    """The state dict of a model, its optimizers (one, a list, or a dict name ->
    optimizer), schedulers (likewise), a grad scaler and (``rng=True``) this
    rank's RNG, ready for ``shardpoint.save`` / ``load``: tensors are the live
    ones (a load fills them in place). Names are canonical: the prefixes of
    DDP, torch.compile, FSDP1 and activation checkpointing are dropped.

    ``init_state``: None (default, torch DCP's rule) creates the state of an
    optimizer that has none at all (``init_optimizer_state(opt,
    allow_dry_step=allow_dry_step)``; the default None leaves parameters of
    other optimizers without state as they are), so the dict can be a load
    template; an optimizer with state is left as it is (a frozen parameter
    stays without state). True creates it for every parameter without state,
    False never (what ``TrainState.save`` uses: saving changes nothing).
    ``extra`` is added under ``extra``."""
    sd: dict[str, Any] = {}
    seen: dict[tuple, str] = {}
    aliases: dict[str, str] = {}
    placed: dict[str, _sh.ShardedTensor] = {}  # fqn -> layout with unprefixed keys
    entries: dict[str, Any] = {}
    for fqn, t in _model_tensors(model).items():
        if not _is_torch_tensor(t):
            entries[fqn] = t  # e.g. a module's _extra_state: a value
            continue
        ident = _ident(t)
        if _local(t).numel() and ident in seen:
            aliases[fqn] = seen[ident]
            continue
        seen[ident] = fqn
        st = _layout(layouts, fqn, t)
        placed[fqn] = st
        entries[fqn] = _rekey(st, st.data, lambda k: f"model.{k}")
    sd["model"] = entries
    # values whose structure varies over a run are single objects, not dicts of keys
    sd["model_aliases"] = ShardedObject("model_aliases", aliases)
    names = _param_names(model)
    for prefix, opt in _named(optimizers, "optim"):
        if init_state or (init_state is None and not has_state(opt)):
            init_optimizer_state(opt, allow_dry_step=allow_dry_step)
        _put(sd, prefix, optimizer_entries(prefix, opt, names, placed, _rekey, _local))
    for prefix, s in _named(schedulers, "scheduler"):
        _put(sd, prefix, ShardedObject(prefix, scheduler_state(s, prefix)))
    if scaler is not None:
        sd["scaler"] = ShardedObject("scaler", scaler.state_dict())
    if rng:
        c = comm if comm is not None else default_comm()
        sd["rng"] = ShardedObject("rng", rng_state(), index=(c.rank(),), grid=(c.size(),))
    if extra is not None:
        sd["extra"] = extra
    return sd


def _put(sd: dict, prefix: str, value: Any) -> None:
    node = sd
    parts = prefix.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value


def _get(sd: dict, prefix: str, default: Any = _C) -> Any:
    node: Any = sd
    for p in prefix.split("."):
        if not isinstance(node, dict) or p not in node:
            if default is not _C:
                return default
            raise _C.InvalidArgumentError(f"the state dict has no '{prefix}'")
        node = node[p]
    return node


def _value(x: Any) -> Any:
    return x.value if isinstance(x, ShardedObject) else x


class _Structure:
    """What ``check_structure`` found applicable: the parameter-group match of
    each optimizer and the decoded state of each scheduler."""

    def __init__(self) -> None:
        self.groups: dict[str, GroupMatch] = {}
        self.schedulers: dict[str, dict] = {}


def _check_structure(model: Any, optimizers: Any, schedulers: Any, scaler: Any, stored: dict,
                     allow_missing: bool, allow_unexpected: bool) -> _Structure:
    """Checks the values of ``stored`` (a state dict whose objects are loaded; an
    absent or None value is not checked) against the live objects, changing
    nothing: tied parameters, parameter groups, scheduler and scaler state.
    InvalidArgumentError says what does not fit."""
    out = _Structure()
    stored_aliases = _value(stored.get("model_aliases"))
    if stored_aliases is not None:
        aliases = _aliases(_model_tensors(model))
        if stored_aliases != aliases:
            raise _C.InvalidArgumentError(
                f"tied parameters differ: the checkpoint shares {stored_aliases}, the model "
                f"{aliases} (alias -> stored name)")
    names = _param_names(model)
    for prefix, opt in _named(optimizers, "optim"):
        groups = _get(stored, f"{prefix}.param_groups", None)
        if groups is not None:
            live = [[names[id(p)] for p in g["params"]] for g in opt.param_groups]
            out.groups[prefix] = match_groups(prefix, live, groups, allow_missing,
                                              allow_unexpected)
    for prefix, s in _named(schedulers, "scheduler"):
        data = _value(_get(stored, prefix, None))
        if data is not None:
            out.schedulers[prefix] = decode_scheduler_state(s, data, prefix)
    held = _value(stored.get("scaler"))
    if scaler is not None and held:
        live_keys, held_keys = set(scaler.state_dict()), set(held)
        if live_keys and live_keys != held_keys:
            raise _C.InvalidArgumentError(
                f"'scaler': the stored state holds {sorted(held_keys)}, the grad scaler "
                f"{sorted(live_keys)}")
    return out


def set_state_dict(model: Any, optimizers: Any = None, state_dict: dict | None = None, *,
                   schedulers: Any = None, scaler: Any = None, rng: bool = False,
                   strict: bool = True) -> None:
    """Applies a loaded ``state_dict`` (from ``get_state_dict`` of these objects,
    filled by ``shardpoint.load``): first checks tied parameters, parameter
    groups, scheduler and scaler state (InvalidArgumentError, nothing
    changed), then copies tensors not already loaded in place and sets
    optimizer state, hyperparameters, schedulers, scaler and RNG. A parameter
    without stored state ends without state, as torch's ``load_state_dict``
    leaves it. ``strict=False``: parameter groups are matched by the names
    they share (a group sharing none keeps its hyperparameters)."""
    if state_dict is None:
        raise _C.InvalidArgumentError("set_state_dict needs the loaded state_dict")
    plan = _check_structure(model, optimizers, schedulers, scaler, state_dict,
                            not strict, not strict)
    _apply_state(model, optimizers, schedulers, scaler, state_dict, plan, rng)


def _apply_state(model: Any, optimizers: Any, schedulers: Any, scaler: Any, sd: dict,
                 plan: _Structure, rng: bool) -> None:
    """Applies a loaded ``sd`` whose structure ``_check_structure`` accepted as ``plan``."""
    torch = _torch()
    live = _model_tensors(model)
    with torch.no_grad():
        for fqn, v in sd.get("model", {}).items():
            if fqn not in live:
                raise _C.InvalidArgumentError(f"the model has no '{fqn}'")
            dst = _local(live[fqn])
            src = v.data if isinstance(v, _sh.ShardedTensor) else v
            if _is_torch_tensor(src) and src.data_ptr() != dst.data_ptr():
                dst.copy_(src)
    names = _param_names(model)
    for prefix, opt in _named(optimizers, "optim"):
        saved = _get(sd, prefix)
        _set_optimizer_state(prefix, opt, saved["state"], names)
        if prefix in plan.groups:
            apply_param_groups(opt, saved["param_groups"], plan.groups[prefix])
    for prefix, s in _named(schedulers, "scheduler"):
        if prefix in plan.schedulers:
            s.load_state_dict(plan.schedulers[prefix])
    if scaler is not None and _value(sd.get("scaler")):
        scaler.load_state_dict(_value(sd["scaler"]))
    if rng:
        set_rng_state(_value(sd.get("rng")))


def _set_optimizer_state(prefix: str, opt: Any, saved: dict, names: dict[int, str]) -> None:
    torch = _torch()
    by_name = {names.get(id(p)): p for g in opt.param_groups for p in g["params"]}
    for fqn, entry in saved.items():
        p = by_name.get(fqn)
        if p is None:
            raise _C.InvalidArgumentError(f"{prefix}: state for '{fqn}', which the "
                                          "optimizer does not hold")
        state = opt.state[p]
        for name, v in entry.items():
            src = v.data if isinstance(v, _sh.ShardedTensor) else v
            cur = state.get(name)
            if _is_torch_tensor(src) and _is_torch_tensor(cur):
                dst = _local(cur)  # a DTensor's (FSDP2) local tensor: src is one too
                if src.data_ptr() != dst.data_ptr():
                    with torch.no_grad():
                        dst.copy_(src)
            else:
                state[name] = src
    forget_state(opt, {id(by_name[f]) for f in saved if f in by_name})


def _allowed(kwargs: dict) -> tuple[bool, bool]:
    """(allow_missing_keys, allow_unexpected_keys) as ``shardpoint.load`` reads them."""
    strict = kwargs.get("strict", True)
    missing, unexpected = kwargs.get("allow_missing_keys"), kwargs.get("allow_unexpected_keys")
    return (not strict if missing is None else bool(missing),
            not strict if unexpected is None else bool(unexpected))


class TrainState:
    """A model with its optimizers, schedulers, grad scaler and RNG, saved and loaded
    as one checkpoint. Same arguments as ``get_state_dict``; ``comm`` is used by
    ``save``/``load`` (default: ``default_comm()``).

    ``extra`` (a dict, default empty) is saved with the state and replaced by
    the loaded one: ``TrainState(..., extra={"step": 0})`` then
    ``state.extra["step"]`` after ``load`` (a load template needs the same
    keys as the saved dict).

    ``save`` stores what the objects hold and changes none of them (a
    parameter without optimizer state is stored without it). ``load`` builds
    the state dict of the (fresh) objects, checks it against the checkpoint on
    every rank before any byte lands, loads it under this rank's layout and
    applies it; a fresh optimizer needs no step first. Keyword arguments of
    ``save``/``save_async``/``load`` go to ``shardpoint.save``/``save_async``/
    ``load``."""

    def __init__(self, model: Any, optimizers: Any = None, *, schedulers: Any = None,
                 scaler: Any = None, rng: bool = True, layouts: Layouts = None,
                 comm: Comm | None = None, extra: dict[str, Any] | None = None) -> None:
        self.model, self.optimizers, self.schedulers = model, optimizers, schedulers
        self.scaler, self.rng, self.layouts = scaler, rng, layouts
        self.comm: Comm = comm if comm is not None else default_comm()
        self.extra: dict[str, Any] = extra if extra is not None else {}

    def state_dict(self, *, allow_dry_step: bool | None = None,
                   init_state: bool | None = None) -> dict[str, Any]:
        """``get_state_dict`` of the objects (a template for ``CheckpointManager.resume``
        as well: a fresh optimizer gets its state)."""
        return get_state_dict(self.model, self.optimizers, schedulers=self.schedulers,
                              scaler=self.scaler, rng=self.rng, layouts=self.layouts,
                              comm=self.comm, extra=self.extra, allow_dry_step=allow_dry_step,
                              init_state=init_state)

    def load_state_dict(self, state_dict: dict[str, Any], *, strict: bool = True) -> None:
        set_state_dict(self.model, self.optimizers, state_dict, schedulers=self.schedulers,
                       scaler=self.scaler, rng=self.rng, strict=strict)
        if "extra" in state_dict:
            self.extra = state_dict["extra"]

    def save(self, path: Any, **kwargs: Any) -> SaveStats:
        return _save(self.state_dict(init_state=False), path, self.comm, **kwargs)

    def save_async(self, path: Any, **kwargs: Any) -> SaveHandle:
        return _save_async(self.state_dict(init_state=False), path, self.comm, **kwargs)

    def load(self, path: Any, *, mapping: Any = None, **kwargs: Any) -> LoadResult:
        """Loads checkpoint ``path`` into the objects (collective). Under another world
        size, rank r restores the RNG saved by rank r; a rank the saving job did
        not have keeps its RNG (a RuntimeWarning says so).

        Nothing changes when the load fails before reading data: stored keys,
        dtypes, shapes, parameter groups, scheduler, scaler and tied parameters
        are checked first, on every rank. ``strict=False`` (or
        ``allow_missing_keys`` / ``allow_unexpected_keys``) also applies to
        optimizer state and parameter groups; the result lists what was
        skipped (a parameter group as ``optim.param_groups[i]``: in
        ``missing_keys`` the optimizer's group i, in ``unexpected_keys`` the
        stored group i). ``all_or_nothing=True`` (of ``shardpoint.load``)
        also keeps everything as it was when reading the data fails.

        ``mapping`` (an ``shardpoint.hf`` mapping: "megatron_llama", ...): the
        checkpoint's keys are the mapping's shardpoint keys and the model's
        parameter names its HF names (a Megatron torch_dist checkpoint into a
        Llama-named torch model). Loads the parameters and each optimizer's
        tensor state (``optimizer.state.<name>.<key>`` into state ``<name>``,
        Megatron's exp_avg / exp_avg_sq, dp_reshardable buckets included) in
        this rank's layout, reading only its rows of each stored key; nothing
        else (param groups, schedulers, RNG, extra keep their values).
        ``variables``: the mapping's (over a Megatron checkpoint's args);
        ``master_params=True``: parameters from the stored fp32 master
        (``optimizer.state.param.*``) instead of the model weights; ``step``:
        the optimizer step to set in each parameter's state (Megatron keeps it
        in its param groups). Every element of every target must be stored
        (``NotFoundError`` naming it) unless ``allow_missing_keys``; the
        result's ``missing_keys`` then lists the skipped targets (docs/dcp.md)."""
        if mapping is not None:
            from shardpoint._torch_mapped import load_mapped
            return load_mapped(self, path, mapping, **kwargs)
        from shardpoint import _torch_load as tl
        stored, saved_rng = tl.read_stored(  # read once, broadcast
            str(path), self.comm, kwargs.get("storage_options"))
        allow = _allowed(kwargs)
        opts = _named(self.optimizers, "optim")
        before = [has_state(o) for _, o in opts]
        try:
            sd = self.state_dict(allow_dry_step=True, init_state=True)
            restore_rng = self._rng_to_restore(sd, saved_rng, path)
            tl.drop_state(sd, [p for p, _ in opts], lambda keys: not keys & stored)
            plan = self._checked(sd, path, stored, allow, kwargs)
            result = _load(sd, path, self.comm, **kwargs)
        except BaseException:
            for (_, o), keep in zip(opts, before):
                forget_state(o, keep)  # a fresh optimizer is fresh again
            raise
        missing = set(result.missing_keys)
        tl.drop_state(sd, [p for p, _ in opts], lambda keys: keys <= missing)
        if plan is None:  # not checked before: shardpoint.load accepted the keys
            plan = _check_structure(self.model, self.optimizers, self.schedulers, self.scaler,
                                    sd, *allow)
        _apply_state(self.model, self.optimizers, self.schedulers, self.scaler, sd, plan,
                     restore_rng)
        self.extra = sd["extra"]
        for prefix, m in plan.groups.items():
            result.missing_keys += [f"{prefix}.param_groups[{i}]" for i in m.missing]
            result.unexpected_keys += [f"{prefix}.param_groups[{j}]" for j in m.unexpected]
        result.missing_keys.sort()
        result.unexpected_keys.sort()
        return result

    def resume(self, manager: Any, **kwargs: Any) -> tuple[int, LoadResult] | tuple[None, None]:
        """``load`` of the newest complete checkpoint of ``manager`` (a
        ``CheckpointManager``; rank 0 chooses it). Returns ``(iteration,
        LoadResult)``, or ``(None, None)`` when there is none. Collective. With a
        local tier (``manager.tiered``): the newest checkpoint complete in either
        tier, applied to the objects like ``load_state_dict``."""
        if getattr(manager, "tiered", False):
            sd = self.state_dict()
            it, result = manager.resume(sd, **kwargs)
            if it is not None:
                self.load_state_dict(sd)
            return it, result
        it = manager.agree_on_latest()
        if it is None:
            return None, None
        with_options = getattr(manager, "_with", None)  # its storage_options
        return it, self.load(manager.path_for(it),
                             **(with_options(kwargs) if with_options else kwargs))

    def _checked(self, sd: dict, path: Any, stored: set[str], allow: tuple[bool, bool],
                 load_kwargs: dict) -> _Structure | None:
        """Reads the structure values of checkpoint ``path`` and checks them against
        the objects; the ranks agree (InvalidArgumentError on every rank). None
        where a strict load lacks keys: shardpoint.load then names them, before
        any byte lands."""
        from shardpoint import _torch_load as tl
        structure = tl.read_structure(
            sd, path, self.comm, [p for p, _ in _named(self.optimizers, "optim")],
            [p for p, _ in _named(self.schedulers, "scheduler")],
            load_kwargs.get("verify_checksums", True), load_kwargs.get("allow_pickle", False),
            load_kwargs.get("storage_options"))
        error, plan = "", None
        if allow[0] or not set(flatten_keys(sd)) - stored:
            try:
                plan = _check_structure(self.model, self.optimizers, self.schedulers,
                                        self.scaler, structure, *allow)
            except Exception as e:  # noqa: BLE001 - every rank must learn of it
                error = str(e) if isinstance(e, _C.Error) else f"{type(e).__name__}: {e}"
        tl.agree(self.comm, error)
        return plan

    def _rng_to_restore(self, sd: dict, saved: set[tuple[int, ...]], path: Any) -> bool:
        if not self.rng:
            return False
        if (self.comm.rank(),) in saved:
            return True
        import warnings
        warnings.warn(f"rank {self.comm.rank()}: checkpoint '{path}' holds the RNG of "
                      f"{len(saved)} ranks, none for this one: its RNG is not restored",
                      RuntimeWarning, stacklevel=3)
        del sd["rng"]
        return False
