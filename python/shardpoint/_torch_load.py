"""The steps of ``TrainState.load`` that come before any byte lands.

``TrainState.load`` runs in two phases, so that a load that cannot fit
changes nothing:

1. Structure. Rank 0 reads which keys are stored (and which ranks' RNG) and
   broadcasts them (``read_stored``: one metadata read, not one per rank), and
   every rank loads the small values that say how the job was built (parameter groups, scheduler
   and scaler state, tied parameters), and checks them against its objects;
   the ranks then agree (an all-gather of each rank's error, if any), so a
   failure on one rank fails every rank, before any tensor is read.
2. Data. The tensors and values are loaded (``shardpoint.load``, whose own
   checks of keys, dtypes and shapes also run on every rank before any read),
   then applied.

Optimizer state that the template had to create (a fresh optimizer) is
removed again when the load fails.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable

from shardpoint import _shardpoint as _C
from shardpoint._checkpoint import ShardedObject, flatten_keys
from shardpoint._checkpoint import load as _load
from shardpoint._once import from_rank0
from shardpoint.comm import Comm


def nest(path: str, value: Any) -> dict:
    """``value`` under the dotted ``path`` of an otherwise empty state dict."""
    out: dict = {}
    node = out
    parts = path.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value
    return out


def state_keys(prefix: str, fqn: str, entry: dict) -> set[str]:
    """The stored keys of one parameter's optimizer state ``entry``."""
    return set(flatten_keys(nest(f"{prefix}.state.{fqn}", entry)))


def drop_state(sd: dict, prefixes: Iterable[str], drop: Callable[[set[str]], bool]) -> None:
    """Removes from the state dict the optimizer state of every parameter whose
    stored keys ``drop`` says to; ``set_state_dict`` then leaves those
    parameters without state."""
    for prefix in prefixes:
        node = sd
        for p in prefix.split("."):
            node = node[p]
        state = node["state"]
        for fqn in [f for f, e in state.items() if drop(state_keys(prefix, f, e))]:
            del state[fqn]


def read_stored(path: str, comm: Comm,
                storage_options: dict | None = None) -> tuple[set[str], set[tuple[int, ...]]]:
    """The keys checkpoint ``path`` stores and the indices of its saved ``rng``
    values (collective): rank 0 reads them and broadcasts them, or its error, which
    every rank then raises (the same class and message)."""
    from shardpoint._read import metadata

    def read() -> bytes:
        md = metadata(path, storage_options=storage_options)
        stored = sorted(set(md.tensors) | {o.key for o in md.objects})
        rng = [list(o.index) for o in md.objects if o.key == "rng"]
        return json.dumps([stored, rng]).encode()

    stored, rng = json.loads(from_rank0(comm, read))
    return set(stored), {tuple(i) for i in rng}


def read_structure(sd: dict, path: str, comm: Comm, opt_prefixes: list[str],
                   sched_prefixes: list[str], verify_checksums: bool,
                   allow_pickle: bool, storage_options: dict | None = None) -> dict:
    """A state dict with the structure values of the checkpoint (collective):
    parameter groups, schedulers, scaler, tied parameters; absent ones are None."""
    sub: dict = {"model_aliases": ShardedObject("model_aliases")}
    for prefix in opt_prefixes:
        sub.update(_merge(sub, nest(f"{prefix}.param_groups", None)))
    for prefix in sched_prefixes:
        sub.update(_merge(sub, nest(prefix, ShardedObject(prefix))))
    if "scaler" in sd:
        sub["scaler"] = ShardedObject("scaler")
    _load(sub, path, comm, allow_missing_keys=True, allow_unexpected_keys=True, common=False,
          verify_checksums=verify_checksums, allow_pickle=allow_pickle, cooperative=False,
          storage_options=storage_options)
    return sub


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(out.get(k), dict) and isinstance(v, dict) else v
    return out


def agree(comm: Comm, error: str) -> None:
    """Collective: raises InvalidArgumentError on every rank if any rank's ``error``
    is not empty, naming each such rank and its error."""
    errors = comm.all_gather(error.encode())
    bad = [f"rank {r}: {e.decode()}" for r, e in enumerate(errors) if e]
    if bad:
        raise _C.InvalidArgumentError("; ".join(bad) + " (nothing was loaded)")
