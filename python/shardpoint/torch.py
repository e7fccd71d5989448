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
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Union

import numpy as np

from shardpoint import _shardpoint as _C
from shardpoint import sharded as _sh
from shardpoint._checkpoint import LoadResult, SaveHandle, SaveStats, ShardedObject
from shardpoint._checkpoint import load as _load
from shardpoint._checkpoint import save as _save
from shardpoint._checkpoint import save_async as _save_async
from shardpoint._tensors import describe
from shardpoint.comm import Comm, default_comm

if TYPE_CHECKING:  # pragma: no cover
    import torch

    Layouts = Union["TPPlan", Mapping[str, _sh.ShardedTensor],
                    Callable[[str, torch.Tensor], "_sh.ShardedTensor | None"], None]
else:
    Layouts = Any

__all__ = ["TrainState", "get_state_dict", "set_state_dict", "init_optimizer_state", "TPPlan",
           "gqa", "rng_state", "set_rng_state", "scheduler_state", "load_scheduler_state"]

_MARK = "__shardpoint__"  # a dict {_MARK: kind, ...} stands for a value JSON cannot hold


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

    def __init__(self, rules: Iterable[tuple[str, str]], tp_rank: int, tp_size: int) -> None:
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
    st = None
    if isinstance(layouts, Mapping):
        st = layouts.get(fqn)
    elif layouts is not None:
        st = layouts(fqn, t)
    if st is None:
        st = torch_layouts.from_torch(fqn, t)  # DTensor, ShardedTensor or a whole tensor
        if isinstance(st, list):
            if len(st) != 1:
                raise _C.InvalidArgumentError(
                    f"'{fqn}': a ShardedTensor with {len(st)} local shards on this rank; "
                    "shardpoint.torch handles one local shard per parameter")
            st = st[0]
    return st


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


def init_optimizer_state(optimizer: Any, *, allow_dry_step: bool | None = False) -> None:
    """Creates the state a fresh ``optimizer`` would create on its first step, so
    that a checkpoint can be loaded into it without stepping it.

    Adam and AdamW get ``step`` 0 and zero moments, SGD with momentum a zero
    momentum buffer (of each parameter's shape, dtype and device; what their own
    lazy initialization creates, so saving right after this changes nothing).
    Parameters that already have state are left alone. Other optimizers need
    ``allow_dry_step=True``: one ``step()`` with zero gradients and learning rate
    0 creates their state (the values are then overwritten by the load);
    without it they raise InvalidArgumentError (``None``: they are left alone)."""
    torch = _torch()
    todo = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state[p]
            if state:
                continue
            if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
                special = bool(optimizer.defaults.get("capturable")) or bool(
                    optimizer.defaults.get("fused"))
                state["step"] = (torch.zeros((1,), dtype=torch.float, device=p.device) if special
                                 else torch.tensor(0.))
                for name in ("exp_avg", "exp_avg_sq") + (
                        ("max_exp_avg_sq",) if group.get("amsgrad") else ()):
                    state[name] = torch.zeros_like(p, memory_format=torch.preserve_format)
            elif isinstance(optimizer, torch.optim.SGD):
                if group.get("momentum", 0) != 0:
                    state["momentum_buffer"] = torch.zeros_like(
                        p, memory_format=torch.preserve_format)
            else:
                todo.append(p)
    if not todo or allow_dry_step is None:
        return
    if not allow_dry_step:
        raise _C.InvalidArgumentError(
            f"{type(optimizer).__name__}: shardpoint creates the state of Adam, AdamW and SGD "
            "only; pass allow_dry_step=True (a step with zero gradients and lr 0) or step the "
            "optimizer once before saving")
    grads = {p: p.grad for p in todo}
    lrs = [g.get("lr") for g in optimizer.param_groups]
    try:
        for p in todo:
            p.grad = torch.zeros_like(p)
        for g in optimizer.param_groups:
            if "lr" in g:
                g["lr"] = 0.0
            for p in g["params"]:
                if p not in grads:
                    grads[p] = p.grad
                    p.grad = None  # parameters with state: untouched by the dry step
        optimizer.step()
    finally:
        for g, lr in zip(optimizer.param_groups, lrs):
            if lr is not None:
                g["lr"] = lr
        for p, grad in grads.items():
            p.grad = grad


def _param_names(model: Any) -> dict[int, str]:
    return {id(p): n for n, p in model.named_parameters()}


def _optimizer_entries(prefix: str, opt: Any, names: dict[int, str],
                       layouts: dict[str, _sh.ShardedTensor]) -> dict:
    state: dict[str, dict] = {}
    groups = []
    for group in opt.param_groups:
        fqns = []
        for p in group["params"]:
            fqn = names.get(id(p))
            if fqn is None:
                raise _C.InvalidArgumentError(
                    f"{prefix}: a parameter of shape {list(p.shape)} is not a parameter of the "
                    "model (shardpoint keys optimizer state by the model's parameter names)")
            fqns.append(fqn)
            entry = {}
            for name, v in opt.state[p].items():
                if _is_torch_tensor(v) and v.dim() > 0 and list(_local(v).shape) == list(
                        _local(p).shape) and fqn in layouts:
                    entry[name] = _rekey(layouts[fqn], _local(v),
                                         lambda k, n=name: f"{prefix}.state.{k}.{n}")
                else:
                    entry[name] = v  # a scalar tensor (step) whole, or a value
            state[fqn] = entry
        groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": fqns})
    return {"state": state, "param_groups": groups}


def _apply_param_groups(prefix: str, opt: Any, saved: list, names: dict[int, str]) -> None:
    live = {}
    for i, g in enumerate(opt.param_groups):
        live[frozenset(names[id(p)] for p in g["params"])] = g
    for i, g in enumerate(saved):
        key = frozenset(g["params"])
        if key not in live:
            raise _C.InvalidArgumentError(
                f"{prefix}.param_groups: stored group {i} holds parameters {sorted(key)}, which "
                "is no parameter group of the optimizer (groups must hold the same names)")
        target = live[key]
        for k, v in g.items():
            if k == "params":
                continue
            target[k] = tuple(v) if isinstance(target.get(k), tuple) and isinstance(v, list) else v


def _is_torch_tensor(x: Any) -> bool:
    torch = _torch()
    return isinstance(x, torch.Tensor)


# ---------------------------------------------------------------------------
# Schedulers: state as data; functions are rebuilt by the fresh scheduler.

def _to_data(v: Any, path: str) -> Any:
    torch = _torch()
    if isinstance(v, dict):
        return {str(k): _to_data(x, f"{path}.{k}") for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_to_data(x, f"{path}[{i}]") for i, x in enumerate(v))
    if isinstance(v, torch.Tensor):
        if v.numel() != 1:
            raise _C.InvalidArgumentError(f"'{path}': a tensor of shape {list(v.shape)} in "
                                          "scheduler state (only scalars are stored)")
        return {_MARK: "tensor", "value": v.item(), "dtype": str(v.dtype).split(".")[-1],
                "shape": list(v.shape)}
    if isinstance(v, np.generic):
        return v.item()
    if callable(v):  # a bound method or function: rebuilt by the fresh object
        return {_MARK: "function", "name": getattr(v, "__qualname__", type(v).__qualname__)}
    return v


def _from_data(v: Any, fresh: Any, path: str) -> Any:
    """Stored scheduler data back to values; functions come from ``fresh``."""
    torch = _torch()
    if isinstance(v, dict) and _MARK in v:
        if v[_MARK] == "tensor":
            return torch.tensor(v["value"], dtype=getattr(torch, v["dtype"])).reshape(v["shape"])
        name = getattr(fresh, "__qualname__", None) if callable(fresh) else None
        if name != v["name"]:
            raise _C.InvalidArgumentError(
                f"'{path}' was the function {v['name']} (functions are not stored; the fresh "
                f"scheduler supplies it) but the fresh scheduler holds "
                f"{name or type(fresh).__name__}: build it with the same arguments as the "
                "saved one")
        return fresh
    if isinstance(v, dict):
        f = fresh if isinstance(fresh, dict) else {}
        return {k: _from_data(x, f.get(k), f"{path}.{k}") for k, x in v.items()}
    if isinstance(v, list):
        f = fresh if isinstance(fresh, (list, tuple)) and len(fresh) == len(v) else [None] * len(v)
        out = [_from_data(x, y, f"{path}[{i}]") for i, (x, y) in enumerate(zip(v, f))]
        return tuple(out) if isinstance(fresh, tuple) else out
    return v


def scheduler_state(scheduler: Any, name: str = "scheduler") -> dict:
    """``scheduler.state_dict()`` as JSON data: scalar tensors and numpy scalars as
    values, functions (OneCycleLR's ``anneal_func``, a lambda) as their names
    only; ``load_scheduler_state`` takes the functions from the fresh scheduler."""
    return _to_data(scheduler.state_dict(), name)


def load_scheduler_state(scheduler: Any, data: dict, name: str = "scheduler") -> None:
    """Loads what ``scheduler_state`` returned into a freshly built ``scheduler``.
    InvalidArgumentError names an attribute whose function differs."""
    scheduler.load_state_dict(_from_data(data, scheduler.state_dict(), name))


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
    name, keys, pos, has_gauss, gauss = np.random.get_state()
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

def get_state_dict(model: Any, optimizers: Any = None, *, schedulers: Any = None,
                   scaler: Any = None, rng: bool = False, layouts: Layouts = None,
                   comm: Comm | None = None, extra: dict | None = None,
                   allow_dry_step: bool | None = None) -> dict:
    """The state dict of a model, its optimizers (one, a list, or a dict name ->
    optimizer), schedulers (likewise), a grad scaler and (``rng=True``) this
    rank's RNG, ready for ``shardpoint.save`` / ``load``: tensors are the live
    ones (a load fills them in place). Optimizers without state get it first
    (``init_optimizer_state(opt, allow_dry_step=allow_dry_step)``; the default
    None leaves parameters of other optimizers without state as they are).
    ``extra`` is added under ``extra``."""
    sd: dict[str, Any] = {}
    model_sd = model.state_dict()
    seen: dict[tuple, str] = {}
    aliases: dict[str, str] = {}
    placed: dict[str, _sh.ShardedTensor] = {}  # fqn -> layout with unprefixed keys
    entries: dict[str, Any] = {}
    for fqn, t in model_sd.items():
        if not _is_torch_tensor(t):
            entries[fqn] = t  # e.g. a module's _extra_state: a value
            continue
        local = _local(t)
        ident = (local.data_ptr(), local.dtype, tuple(local.shape), tuple(local.stride()))
        if local.numel() and ident in seen:
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
        init_optimizer_state(opt, allow_dry_step=allow_dry_step)
        _put(sd, prefix, _optimizer_entries(prefix, opt, names, placed))
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


def _get(sd: dict, prefix: str) -> Any:
    node = sd
    for p in prefix.split("."):
        if not isinstance(node, dict) or p not in node:
            raise _C.InvalidArgumentError(f"the state dict has no '{prefix}'")
        node = node[p]
    return node


def _value(x: Any) -> Any:
    return x.value if isinstance(x, ShardedObject) else x


def set_state_dict(model: Any, optimizers: Any = None, state_dict: dict | None = None, *,
                   schedulers: Any = None, scaler: Any = None, rng: bool = False) -> None:
    """Applies a loaded ``state_dict`` (from ``get_state_dict`` of these objects,
    filled by ``shardpoint.load``): tensors not already loaded in place are
    copied, then hyperparameters, schedulers, scaler and RNG are set."""
    if state_dict is None:
        raise _C.InvalidArgumentError("set_state_dict needs the loaded state_dict")
    torch = _torch()
    live = model.state_dict()
    stored_aliases = _value(state_dict.get("model_aliases")) or {}
    aliases = {}
    seen: dict[tuple, str] = {}
    for fqn, t in live.items():
        if _is_torch_tensor(t):
            local = _local(t)
            ident = (local.data_ptr(), local.dtype, tuple(local.shape), tuple(local.stride()))
            if local.numel() and ident in seen:
                aliases[fqn] = seen[ident]
            seen.setdefault(ident, fqn)
    if stored_aliases != aliases:
        raise _C.InvalidArgumentError(
            f"tied parameters differ: the checkpoint shares {stored_aliases}, the model "
            f"{aliases} (alias -> stored name)")
    model_entries = state_dict.get("model", {})
    with torch.no_grad():
        for fqn, v in model_entries.items():
            if fqn not in live:
                raise _C.InvalidArgumentError(f"the model has no '{fqn}'")
            dst = _local(live[fqn])
            src = v.data if isinstance(v, _sh.ShardedTensor) else v
            if _is_torch_tensor(src) and src.data_ptr() != dst.data_ptr():
                dst.copy_(src)
    names = _param_names(model)
    for prefix, opt in _named(optimizers, "optim"):
        saved = _get(state_dict, prefix)
        by_name = {n: p for n, p in ((names.get(id(p)), p) for g in opt.param_groups
                                     for p in g["params"])}
        for fqn, entry in saved["state"].items():
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
        _apply_param_groups(prefix, opt, saved["param_groups"], names)
    for prefix, s in _named(schedulers, "scheduler"):
        load_scheduler_state(s, _value(_get(state_dict, prefix)), prefix)
    if scaler is not None and _value(state_dict.get("scaler")):
        scaler.load_state_dict(_value(state_dict["scaler"]))
    if rng:
        set_rng_state(_value(state_dict.get("rng")))


class TrainState:
    """A model with its optimizers, schedulers, grad scaler and RNG, saved and loaded
    as one checkpoint. Same arguments as ``get_state_dict``; ``comm`` is used by
    ``save``/``load`` (default: ``default_comm()``).

    ``load`` builds the state dict of the (fresh) objects, loads the checkpoint
    into it under this rank's layout and applies it; a fresh optimizer needs no
    step first. Keyword arguments of ``save``/``save_async``/``load`` go to
    ``shardpoint.save``/``save_async``/``load``."""

    def __init__(self, model: Any, optimizers: Any = None, *, schedulers: Any = None,
                 scaler: Any = None, rng: bool = True, layouts: Layouts = None,
                 comm: Comm | None = None, extra: dict | None = None) -> None:
        self.model, self.optimizers, self.schedulers = model, optimizers, schedulers
        self.scaler, self.rng, self.layouts = scaler, rng, layouts
        self.comm = comm if comm is not None else default_comm()
        self.extra = extra

    def state_dict(self, *, allow_dry_step: bool | None = None) -> dict:
        return get_state_dict(self.model, self.optimizers, schedulers=self.schedulers,
                              scaler=self.scaler, rng=self.rng, layouts=self.layouts,
                              comm=self.comm, extra=self.extra, allow_dry_step=allow_dry_step)

    def load_state_dict(self, state_dict: dict) -> None:
        set_state_dict(self.model, self.optimizers, state_dict, schedulers=self.schedulers,
                       scaler=self.scaler, rng=self.rng)
        if self.extra is not None and "extra" in state_dict:
            self.extra = state_dict["extra"]

    def save(self, path: Any, **kwargs: Any) -> SaveStats:
        return _save(self.state_dict(), path, self.comm, **kwargs)

    def save_async(self, path: Any, **kwargs: Any) -> SaveHandle:
        return _save_async(self.state_dict(), path, self.comm, **kwargs)

    def load(self, path: Any, **kwargs: Any) -> LoadResult:
        """Loads checkpoint ``path`` into the objects. Under another world size, rank r
        restores the RNG saved by rank r; a rank the saving job did not have keeps
        its RNG (a RuntimeWarning says so)."""
        sd = self.state_dict(allow_dry_step=True)
        restore_rng = self.rng
        if self.rng:
            from shardpoint._read import metadata
            saved = {o.index for o in metadata(path).objects if o.key == "rng"}
            if (self.comm.rank(),) not in saved:
                import warnings
                warnings.warn(f"rank {self.comm.rank()}: checkpoint '{path}' holds the RNG of "
                              f"{len(saved)} ranks, none for this one: its RNG is not restored",
                              RuntimeWarning, stacklevel=2)
                del sd["rng"]
                restore_rng = False
        result = _load(sd, path, self.comm, **kwargs)
        set_state_dict(self.model, self.optimizers, sd, schedulers=self.schedulers,
                       scaler=self.scaler, rng=restore_rng)
        if self.extra is not None and "extra" in sd:
            self.extra = sd["extra"]
        return result
