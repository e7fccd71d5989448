"""Optimizer state of ``shardpoint.torch``: creating it for a fresh optimizer,
its entries in the state dict (keyed by parameter name), and matching stored
parameter groups to the optimizer's by the names they hold.

A parameter without state (one that never had a gradient: a frozen layer) is
stored without state and loads back without state, as torch's own
``Optimizer.state_dict`` / ``load_state_dict`` have it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from shardpoint import _shardpoint as _C
from shardpoint import sharded as _sh


def _torch() -> Any:
    import torch
    return torch


def _zero_state(optimizer: Any, group: dict, p: Any) -> bool:
    """Gives ``p`` the state Adam, AdamW or SGD create on their first step; False
    for other optimizers."""
    torch = _torch()
    state = optimizer.state[p]
    if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        special = bool(optimizer.defaults.get("capturable")) or bool(
            optimizer.defaults.get("fused"))
        state["step"] = (torch.zeros((1,), dtype=torch.float, device=p.device) if special
                         else torch.tensor(0.))
        for name in ("exp_avg", "exp_avg_sq") + (
                ("max_exp_avg_sq",) if group.get("amsgrad") else ()):
            state[name] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return True
    if isinstance(optimizer, torch.optim.SGD):
        if group.get("momentum", 0) != 0:
            state["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        else:
            del optimizer.state[p]  # SGD without momentum keeps no state
        return True
    del optimizer.state[p]
    return False


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
    todo = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if optimizer.state.get(p):
                continue
            if not _zero_state(optimizer, group, p):
                todo.append(p)
    if not todo or allow_dry_step is None:
        return
    if not allow_dry_step:
        raise _C.InvalidArgumentError(
            f"{type(optimizer).__name__}: shardpoint creates the state of Adam, AdamW and SGD "
            "only; pass allow_dry_step=True (a step with zero gradients and lr 0) or step the "
            "optimizer once before saving")
    _dry_step(optimizer, todo)


def _dry_step(optimizer: Any, todo: list) -> None:
    """One ``step()`` with lr 0 in which only the parameters ``todo`` have a (zero)
    gradient; every gradient and learning rate is restored afterwards."""
    torch = _torch()
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


def has_state(optimizer: Any) -> set[int]:
    """The ids of the parameters of ``optimizer`` that have state now."""
    return {id(p) for g in optimizer.param_groups for p in g["params"] if optimizer.state.get(p)}


def forget_state(optimizer: Any, keep: set[int]) -> None:
    """Removes the state of every parameter whose id is not in ``keep``."""
    for g in optimizer.param_groups:
        for p in g["params"]:
            if id(p) not in keep and p in optimizer.state:
                del optimizer.state[p]


def optimizer_entries(prefix: str, opt: Any, names: dict[int, str],
                      layouts: dict[str, _sh.ShardedTensor],
                      rekey: Callable[..., _sh.ShardedTensor], local: Callable[[Any], Any]) -> dict:
    """``{"state": {fqn: {name: value}}, "param_groups": [...]}`` of ``opt``; state
    shaped like its parameter takes the parameter's layout (keys renamed to
    ``<prefix>.state.<key>.<name>``). Parameters without state have no entry."""
    torch = _torch()
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
            held = opt.state.get(p)
            if not held:
                continue  # never stepped (frozen): stored without state, as torch has it
            entry = {}
            for name, v in held.items():
                if isinstance(v, torch.Tensor) and v.dim() > 0 and list(local(v).shape) == list(
                        local(p).shape) and fqn in layouts:
                    entry[name] = rekey(layouts[fqn], local(v),
                                        lambda k, n=name: f"{prefix}.state.{k}.{n}")
                else:
                    entry[name] = v  # a scalar tensor (step) whole, or a value
            state[fqn] = entry
        groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": fqns})
    return {"state": state, "param_groups": groups}


@dataclasses.dataclass
class GroupMatch:
    """How the stored parameter groups of one optimizer map onto its groups:
    ``pairs`` (live index, stored index); ``missing`` live groups that share no
    name with a stored group (they keep their hyperparameters); ``unexpected``
    stored groups that no live group shares a name with (ignored)."""

    pairs: list[tuple[int, int]]
    missing: list[int]
    unexpected: list[int]


def match_groups(prefix: str, live: list[list[str]], stored: list[dict], allow_missing: bool,
                 allow_unexpected: bool) -> GroupMatch:
    """Matches groups by the parameter names they hold. Strict (neither allowed):
    every live group must hold exactly the names of one stored group and every
    stored group be matched. Otherwise a live group takes the hyperparameters
    of the one stored group it shares names with; a live group that shares
    none is ``missing`` (needs ``allow_missing``), a stored group that no live
    group shares a name with ``unexpected`` (needs ``allow_unexpected``).
    InvalidArgumentError names the groups that do not fit."""
    if not isinstance(stored, list) or not all(isinstance(g, dict) for g in stored):
        raise _C.InvalidArgumentError(f"{prefix}.param_groups: stored as a "
                                      f"{type(stored).__name__}, not a list of groups")
    stored_sets = [frozenset(g.get("params", ())) for g in stored]
    if not allow_missing and not allow_unexpected:
        return _match_exactly(prefix, [frozenset(n) for n in live], stored_sets)
    pairs, missing, used = [], [], set()
    for i, names in enumerate(live):
        mine = frozenset(names)
        hits = [j for j, s in enumerate(stored_sets) if s & mine]
        if len(hits) > 1:
            raise _C.InvalidArgumentError(
                f"{prefix}.param_groups: group {i} of the optimizer holds parameters of stored "
                f"groups {hits} ({[sorted(stored_sets[j] & mine) for j in hits]}), whose "
                "hyperparameters may differ: split it as they were")
        if hits:
            pairs.append((i, hits[0]))
            used.add(hits[0])
        else:
            missing.append(i)
    unexpected = [j for j in range(len(stored)) if j not in used]
    if missing and not allow_missing:
        raise _C.InvalidArgumentError(
            f"{prefix}.param_groups: group {missing[0]} of the optimizer shares no parameter "
            "with a stored group (allow_missing_keys=True keeps its hyperparameters)")
    if unexpected and not allow_unexpected:
        raise _C.InvalidArgumentError(
            f"{prefix}.param_groups: stored group {unexpected[0]} shares no parameter with a "
            "group of the optimizer (allow_unexpected_keys=True ignores it)")
    return GroupMatch(pairs, missing, unexpected)


def _match_exactly(prefix: str, live: list[frozenset], stored: list[frozenset]) -> GroupMatch:
    for j, s in enumerate(stored):
        if s not in live:
            raise _C.InvalidArgumentError(
                f"{prefix}.param_groups: stored group {j} holds parameters {sorted(s)}, which "
                "is no parameter group of the optimizer (groups must hold the same names; "
                "strict=False matches them by the names they share)")
    for i, s in enumerate(live):
        if s not in stored:
            raise _C.InvalidArgumentError(
                f"{prefix}.param_groups: group {i} of the optimizer holds parameters "
                f"{sorted(s)}, which no stored group holds (strict=False matches groups by "
                "the names they share)")
    return GroupMatch([(i, stored.index(s)) for i, s in enumerate(live)], [], [])


def apply_param_groups(opt: Any, stored: list[dict], match: GroupMatch) -> None:
    """Sets the hyperparameters of the matched live groups from the stored ones."""
    for i, j in match.pairs:
        target = opt.param_groups[i]
        for k, v in stored[j].items():
            if k == "params":
                continue
            target[k] = tuple(v) if isinstance(target.get(k), tuple) and isinstance(v, list) else v
