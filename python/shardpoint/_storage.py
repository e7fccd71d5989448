"""``storage_options=``: per-call object-store settings for ``s3://`` paths.

Every call that takes a path also takes ``storage_options``, a dict with any
of the keys below (boto3's names); what it leaves out comes from the AWS
environment variables and profiles, as without it (docs/object-store.md).
Local paths ignore it. The storage made for one set of options is kept for
the life of the process and shared by every call given the same options,
so connections are reused and an async save or a manager never outlives it.
"""

from __future__ import annotations

import threading
from typing import Any, Mapping

from shardpoint import _shardpoint as _C

# storage_options key -> keyword of _C.object_store_storage
_KEYS = {
    "endpoint_url": "endpoint",
    "region_name": "region",
    "addressing_style": "addressing",  # "path", "virtual" or "auto"
    "profile_name": "profile",
    "aws_access_key_id": "access_key_id",
    "aws_secret_access_key": "secret_access_key",
    "aws_session_token": "session_token",
    "ca_bundle": "ca_bundle",  # an https endpoint's CA file (botocore's AWS_CA_BUNDLE)
    # Throughput, boto3's TransferConfig / botocore Config names (integers):
    "multipart_chunksize": "part_size",  # bytes per uploaded part, 5 MiB to 5 GiB
    "max_concurrency": "parts_in_flight",  # parts of one file uploading at once
    "max_pool_connections": "max_connections",  # connections, requests in flight
}
_INTS = {"multipart_chunksize", "max_concurrency", "max_pool_connections"}

_storages: dict[tuple, Any] = {}
_lock = threading.Lock()


def storage_for(options: Mapping[str, Any] | None) -> Any:
    """The C++ Storage for ``options`` (None: None, the default storage).
    InvalidArgumentError naming an unknown key or a bad value."""
    if options is None:
        return None
    if not isinstance(options, Mapping):
        raise _C.InvalidArgumentError(
            f"storage_options must be a dict, got {type(options).__name__}")
    unknown = sorted(set(options) - set(_KEYS))
    if unknown:
        raise _C.InvalidArgumentError(f"storage_options: unknown key(s) {unknown}; known: "
                                      f"{sorted(_KEYS)}")
    for k in _INTS & set(options):
        v = options[k]
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise _C.InvalidArgumentError(
                f"storage_options[{k!r}] must be a positive int, got {v!r}")
    given = {k: v for k, v in options.items() if v is not None}
    key = tuple(sorted((k, str(v)) for k, v in given.items()))
    with _lock:
        storage = _storages.get(key)
        if storage is None:
            storage = _C.object_store_storage(**{_KEYS[k]: v for k, v in given.items()})
            _storages[key] = storage
    return storage
