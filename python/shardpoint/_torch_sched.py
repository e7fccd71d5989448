"""LR scheduler state as JSON data: ``scheduler_state`` / ``load_scheduler_state``.

Functions are never stored, only their qualified names; the freshly built
scheduler supplies them, and a name that differs is an InvalidArgumentError
naming the attribute. That covers bound methods in the state dict
(OneCycleLR's ``anneal_func``) and the functions of LambdaLR and
MultiplicativeLR, which torch's own ``state_dict()`` replaces by None (a
lambda's qualified name is ``<enclosing function>.<locals>.<lambda>``: two
lambdas of one scope look the same).
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np

from shardpoint import _shardpoint as _C

MARK = "__shardpoint__"  # a dict {MARK: kind, ...} stands for a value JSON cannot hold


def _torch() -> Any:
    import torch
    return torch


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
        return {MARK: "tensor", "value": v.item(), "dtype": str(v.dtype).split(".")[-1],
                "shape": list(v.shape)}
    if isinstance(v, np.generic):
        return v.item()
    if callable(v):  # a bound method or function: rebuilt by the fresh object
        return {MARK: "function", "name": getattr(v, "__qualname__", type(v).__qualname__)}
    return v


def _from_data(v: Any, fresh: Any, path: str) -> Any:
    """Stored scheduler data back to values; functions come from ``fresh``."""
    torch = _torch()
    if isinstance(v, dict) and MARK in v:
        if v[MARK] == "tensor":
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
        fd = fresh if isinstance(fresh, dict) else {}
        return {k: _from_data(x, fd.get(k), f"{path}.{k}") for k, x in v.items()}
    if isinstance(v, list):
        fl = fresh if isinstance(fresh, (list, tuple)) and len(fresh) == len(v) else [None] * len(v)
        out = [_from_data(x, y, f"{path}[{i}]") for i, (x, y) in enumerate(zip(v, fl))]
        return tuple(out) if isinstance(fresh, tuple) else out
    return v


def _with_functions(scheduler: Any) -> dict:
    """``scheduler.state_dict()`` with the functions torch leaves out (LambdaLR's
    and MultiplicativeLR's ``lr_lambdas``, also inside SequentialLR and
    ChainedScheduler) put back, so that their names are stored and compared."""
    sd = scheduler.state_dict()
    fns = getattr(scheduler, "lr_lambdas", None)
    lams = sd.get("lr_lambdas")
    if isinstance(fns, list) and isinstance(lams, list) and len(fns) == len(lams):
        sd["lr_lambdas"] = [fn if x is None and isinstance(fn, types.FunctionType) else x
                            for fn, x in zip(fns, lams)]
    subs = getattr(scheduler, "_schedulers", None)
    if isinstance(subs, (list, tuple)) and isinstance(sd.get("_schedulers"), list) and \
            len(subs) == len(sd["_schedulers"]):
        sd["_schedulers"] = [_with_functions(s) for s in subs]
    return sd


def _without_functions(sd: Any) -> Any:
    """What torch's ``load_state_dict`` expects: functions in ``lr_lambdas`` as None."""
    if not isinstance(sd, dict):
        return sd
    out = dict(sd)
    if isinstance(out.get("lr_lambdas"), list):
        out["lr_lambdas"] = [None if isinstance(f, types.FunctionType) else f
                             for f in out["lr_lambdas"]]
    if isinstance(out.get("_schedulers"), list):
        out["_schedulers"] = [_without_functions(s) for s in out["_schedulers"]]
    return out


def scheduler_state(scheduler: Any, name: str = "scheduler") -> dict:
    """``scheduler.state_dict()`` as JSON data: scalar tensors and numpy scalars as
    values, functions (OneCycleLR's ``anneal_func``, LambdaLR's lambdas) as
    their qualified names only; ``load_scheduler_state`` takes the functions
    from the fresh scheduler and compares their names."""
    return _to_data(_with_functions(scheduler), name)


def decode_scheduler_state(scheduler: Any, data: dict, name: str = "scheduler") -> dict:
    """The state dict to give ``scheduler.load_state_dict`` for ``data``, without
    changing ``scheduler``. InvalidArgumentError names an attribute whose
    function differs, or stored keys that the scheduler's state lacks or adds
    (another kind of scheduler)."""
    fresh = _with_functions(scheduler)
    if not isinstance(data, dict):
        raise _C.InvalidArgumentError(f"'{name}': stored scheduler state is a "
                                      f"{type(data).__name__}, not a dict")
    public = {k for k in fresh if not k.startswith("_")} ^ {k for k in data
                                                            if not k.startswith("_")}
    if public:
        raise _C.InvalidArgumentError(
            f"'{name}': the stored state and {type(scheduler).__name__}'s differ in "
            f"{sorted(public)}: build the scheduler of the saved job")
    return _without_functions(_from_data(data, fresh, name))


def load_scheduler_state(scheduler: Any, data: dict, name: str = "scheduler") -> None:
    """Loads what ``scheduler_state`` returned into a freshly built ``scheduler``.
    InvalidArgumentError names an attribute whose function differs."""
    scheduler.load_state_dict(decode_scheduler_state(scheduler, data, name))
