"""Canonical parameter names, whatever wraps the model.

Wrappers insert a module between the user's model and its parameters, and
with it a component into every name: DDP and DataParallel ``module.``,
torch.compile ``_orig_mod.``, FSDP1 ``_fsdp_wrapped_module.``, activation
checkpointing ``_checkpoint_wrapped_module.``. ``shardpoint.torch`` stores
names without them (as torch DCP's state-dict helpers do), so a checkpoint
saved wrapped loads unwrapped and the other way round.

A component is dropped only where it names the wrapped module of a wrapper:
``module`` only under a DDP / DataParallel instance (a user's own submodule
called ``module`` keeps its name), the other three by their names, which only
those wrappers use.
"""

from __future__ import annotations

from typing import Any

from shardpoint import _shardpoint as _C

_WRAPPED = ("_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module")


def _is_wrapper_part(owner: Any, part: str) -> bool:
    if part in _WRAPPED:
        return True
    if part != "module":
        return False
    import torch
    wrappers = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    return isinstance(owner, wrappers)


def canonical(model: Any, fqn: str) -> str:
    """``fqn`` (a name in ``model.state_dict()`` or ``named_parameters()``) without
    the components that wrappers insert."""
    parts = fqn.split(".")
    out = []
    node = model
    for i, part in enumerate(parts):
        if node is not None and i < len(parts) - 1 and _is_wrapper_part(node, part):
            node = getattr(node, part, None)
            continue
        if part == "_flat_param":
            raise _C.InvalidArgumentError(
                f"'{fqn}': an FSDP1 flat parameter (use_orig_params=False) holds many "
                "parameters under one name; wrap with use_orig_params=True so that "
                "shardpoint sees each parameter under its own name")
        out.append(part)
        modules = getattr(node, "_modules", None)
        node = modules.get(part) if isinstance(modules, dict) else None
    return ".".join(out)


def canonical_names(model: Any, names: list[str]) -> dict[str, str]:
    """{name: canonical name} for ``names`` of ``model``; two names that become one
    are an InvalidArgumentError."""
    out: dict[str, str] = {}
    seen: dict[str, str] = {}
    for n in names:
        c = canonical(model, n)
        if c in seen and seen[c] != n:
            raise _C.InvalidArgumentError(
                f"'{seen[c]}' and '{n}' both become '{c}' once wrapper prefixes are dropped")
        seen[c] = n
        out[n] = c
    return out
