"""A value one rank computes and every rank of a Comm receives: metadata read
once per job, not once per rank."""

from __future__ import annotations

import json
from typing import Callable

from shardpoint import _shardpoint as _C
from shardpoint.comm import Comm


def from_rank0(comm: Comm, compute: Callable[[], bytes]) -> bytes:
    """``compute()`` on rank 0, broadcast to every rank (collective). If it raises,
    every rank raises: rank 0 its own exception, the others a shardpoint error of
    the same class (``InternalError`` for any other) with the same message."""
    payload, error = b"", None
    if comm.rank() == 0:
        try:
            payload = b"V" + compute()
        except Exception as e:  # noqa: BLE001 - every rank raises it after the broadcast
            error = e
            name = type(e).__name__ if isinstance(e, _C.Error) else "InternalError"
            payload = b"E" + json.dumps([name, str(e)]).encode()
    payload = comm.broadcast(payload, 0)
    if error is not None:
        raise error
    if payload[:1] == b"E":
        name, message = json.loads(payload[1:])
        raise getattr(_C, name, _C.Error)(message)
    return payload[1:]
