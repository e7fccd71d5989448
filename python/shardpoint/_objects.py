"""Encoding of non-tensor values (objects, the common state).

Stored object bytes start with a one-byte tag:

* ``J`` + UTF-8 JSON text: None, bool, int, float (NaN and infinities
  included), str, and lists, tuples and str-keyed dicts of those; the default.
* ``B`` + the bytes themselves: a ``bytes`` or ``bytearray`` value.
* ``P`` + a pickle: anything else, written only with ``allow_pickle=True``
  and read back only with ``allow_pickle=True`` (unpickling runs code from
  the checkpoint: use it for checkpoints you trust).

Tuples come back as lists, except where the value being loaded into (the
template) holds a tuple at the same place.
"""

from __future__ import annotations

import json
import pickle
from typing import Any

from shardpoint import _shardpoint as _C

_JSON_SCALARS = (type(None), bool, int, float, str)


class PickleNotAllowedError(_C.InvalidArgumentError):
    """A value needs pickle (to save) or is pickled (to load) and the caller did not opt in."""


def _json_path(v: Any, path: str = "", depth: int = 0) -> str | None:
    """None if ``v`` round-trips through JSON, else where and why it does not."""
    if depth > 100:
        return f"{path or 'value'}: nested too deeply"
    t = type(v)
    if t in _JSON_SCALARS:
        return None
    if t is list or isinstance(v, tuple):  # tuples and namedtuples come back as lists
        for i, x in enumerate(v):
            bad = _json_path(x, f"{path}[{i}]", depth + 1)
            if bad:
                return bad
        return None
    if t is dict:
        for k, x in v.items():
            if type(k) is not str:
                return f"{path or 'value'}: dict key {k!r} is not a str"
            bad = _json_path(x, f"{path}[{k!r}]", depth + 1)
            if bad:
                return bad
        return None
    return f"{path or 'value'}: {t.__module__}.{t.__qualname__} is not JSON-serializable"


def encode(key: str, value: Any, allow_pickle: bool) -> bytes:
    """The stored bytes of ``value`` (the object ``key``)."""
    if isinstance(value, (bytes, bytearray)):
        return b"B" + bytes(value)
    bad = _json_path(value)
    if bad is None:
        return b"J" + json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    if not allow_pickle:
        raise PickleNotAllowedError(
            f"object '{key}' cannot be stored as JSON ({bad}); pass allow_pickle=True to "
            "store it pickled (loading it will then need allow_pickle=True too)")
    try:
        return b"P" + pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # noqa: BLE001 - any pickling failure is the caller's value
        raise _C.InvalidArgumentError(f"object '{key}' cannot be pickled: {e}") from e


def _where(key: str, checkpoint: str | None) -> str:
    what = "common state" if key == "<common>" else f"object '{key}'"
    return what + (f" of checkpoint '{checkpoint}'" if checkpoint else "")


def parse_json(data: bytes, what: str) -> Any:
    """``data`` (UTF-8 JSON text) parsed; any failure (not UTF-8, not JSON, nested
    too deeply for the parser) is a ``DataLossError`` naming ``what``."""
    try:
        return json.loads(bytes(data).decode("utf-8"))
    except UnicodeDecodeError as e:
        reason = f"not UTF-8 ({e.reason} at byte {e.start})"
    except json.JSONDecodeError as e:
        reason = f"corrupt JSON ({e})"
    except RecursionError:
        reason = "JSON nested too deeply to parse"
    except ValueError as e:  # e.g. an integer with too many digits
        reason = f"corrupt JSON ({e})"
    raise _C.DataLossError(f"{what}: {reason}") from None


def decode(key: str, data: bytes, allow_pickle: bool, like: Any = None,
           checkpoint: str | None = None) -> Any:
    """The value stored as ``data`` for object ``key``; ``like`` is the template value;
    ``checkpoint`` (its path) is named in errors."""
    where = _where(key, checkpoint)
    tag, body = data[:1], data[1:]
    if tag == b"J":
        return restore_like(parse_json(body, where), like)
    if tag == b"B":
        return bytes(body)
    if tag == b"P":
        if not allow_pickle:
            what = f"object '{key}' is pickled" + (
                f" (checkpoint '{checkpoint}')" if checkpoint else "")
            raise PickleNotAllowedError(
                f"{what}; loading it runs code from the checkpoint: pass "
                "allow_pickle=True only if you trust this checkpoint")
        return pickle.loads(body)
    raise _C.DataLossError(f"{where} was not written by the shardpoint Python package "
                           f"(unknown tag {tag!r}); read it with raw_objects=True")


def restore_like(value: Any, like: Any) -> Any:
    """``value`` with lists turned into tuples where ``like`` has tuples."""
    if isinstance(like, tuple) and isinstance(value, list) and len(like) == len(value):
        items = [restore_like(v, t) for v, t in zip(value, like)]
        try:
            return type(like)(*items) if hasattr(like, "_fields") else type(like)(items)
        except TypeError:
            return tuple(items)
    if isinstance(like, list) and isinstance(value, list) and len(like) == len(value):
        return [restore_like(v, t) for v, t in zip(value, like)]
    if isinstance(like, dict) and isinstance(value, dict):
        return {k: restore_like(v, like.get(k)) for k, v in value.items()}
    return value
