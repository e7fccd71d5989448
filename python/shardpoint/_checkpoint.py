"""save, save_async and load of nested state dicts.

A state dict is a dict whose values are

* torch CPU tensors or numpy arrays: a whole tensor (replicated on every rank
  that has it) whose key is the dotted path (``"model.layer.0.weight"``);
* ``ShardedTensor``: this rank's piece of one or more global tensors, under
  the keys of its layout (the path is ignored);
* ``ShardedObject``: a value under its own key, one shard of a grid
  (per-rank RNG state);
* dicts (always traversed), lists and tuples (traversed if they contain
  any of the above, else stored as one value);
* anything else: a value (an "object") whose key is the dotted path, stored
  as JSON (or raw bytes for ``bytes``); other values need ``allow_pickle=True``.

``load`` takes the same structure as a template: tensors are filled in place,
values and ``ShardedObject.value`` are replaced by the stored ones.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import threading
import time
import warnings
import weakref
from typing import Any, Callable, Iterable, Sequence

from shardpoint import _shardpoint as _C
from shardpoint import _objects, _twin
from shardpoint._staging import DeviceStaging, is_device_tensor
from shardpoint._storage import storage_for
from shardpoint._tensors import is_tensor
from shardpoint.comm import Comm, default_comm
from shardpoint.sharded import ShardedTensor, whole
from shardpoint.torch_layouts import from_torch, is_torch_sharded

__all__ = ["ShardedObject", "save", "save_async", "load", "AsyncSaver", "SaveHandle",
           "LoadResult", "SaveStats", "flatten_keys"]



class ShardedObject:
    """A value under key ``key``, shard ``index`` of a grid of shape ``grid``.

    ``ShardedObject("rng", state, index=(rank,), grid=(world,))`` stores one
    value per rank; ranks that give the same (key, index) are replicas. With
    empty index and grid it is one value shared by all ranks. On load,
    ``value`` is replaced by the stored value."""

    __slots__ = ("key", "value", "index", "grid")

    def __init__(self, key: str, value: Any = None, index: Iterable[int] = (),
                 grid: Iterable[int] = ()) -> None:
        self.key = key
        self.value = value
        self.index = [int(i) for i in index]
        self.grid = [int(g) for g in grid]

    def __repr__(self) -> str:
        return f"ShardedObject({self.key!r}, index={self.index}, grid={self.grid})"


def _is_leaf(x):
    return isinstance(x, (ShardedTensor, ShardedObject)) or is_tensor(x)


def _contains_leaf(x, depth=0):
    if _is_leaf(x):
        return True
    if depth > 100:
        return False
    if isinstance(x, dict):
        return any(_contains_leaf(v, depth + 1) for v in x.values())
    if isinstance(x, (list, tuple)):
        return any(_contains_leaf(v, depth + 1) for v in x)
    return False


def _join(path, k):
    k = str(k)
    return f"{path}.{k}" if path else k


def _walk(node, path, out):
    if isinstance(node, ShardedTensor):
        out.append(("sharded", path, node))
    elif isinstance(node, ShardedObject):
        out.append(("sobject", node.key, node))
    elif is_torch_sharded(node):  # torch's ShardedTensor / DTensor: its own layout
        sts = from_torch(path, node)
        for st in sts if isinstance(sts, list) else [sts]:
            out.append(("sharded", path, st))
    elif is_tensor(node):
        out.append(("tensor", path, node))
    elif isinstance(node, dict):
        for k, v in node.items():
            _walk(v, _join(path, k), out)
    elif isinstance(node, (list, tuple)) and _contains_leaf(node):
        for i, v in enumerate(node):
            _walk(v, _join(path, i), out)
    else:
        out.append(("object", path, node))


def _flatten(state_dict):
    if not isinstance(state_dict, dict):
        raise _C.InvalidArgumentError(
            f"a state dict must be a dict, got {type(state_dict).__name__}")
    out = []
    _walk(state_dict, "", out)
    seen = {}
    for kind, key, node in out:
        if kind == "sharded":
            continue
        ident = (key, tuple(node.index)) if kind == "sobject" else (key, ())
        if ident in seen:
            raise _C.InvalidArgumentError(f"key '{key}' appears twice in the state dict (as "
                                          f"{seen[ident]} and as {kind})")
        seen[ident] = kind
    return out


def flatten_keys(state_dict: dict) -> dict[str, str]:
    """The keys a state dict is stored under: {key: "tensor" | "object"}."""
    keys = {}
    for kind, key, node in _flatten(state_dict):
        if kind == "sharded":
            for k in node.keys:
                keys[k] = "tensor"
        else:
            keys[key] = "tensor" if kind == "tensor" else "object"
    return keys


def _build(state_dict, *, load, allow_pickle, common=None, metadata=None, raw_objects=False,
           staging=None):
    """A C++ State over the state dict's memory, the objects keeping it alive,
    and the flattened entries."""
    entries = _flatten(state_dict)
    st = _C.State()
    tensors, objects, owners = [], [], []
    for kind, key, node in entries:
        if kind in ("sharded", "tensor"):
            sharded = node if kind == "sharded" else whole(key, node)
            if is_device_tensor(sharded.data):  # CUDA: through pinned host memory
                if staging is None:
                    raise _C.InvalidArgumentError(f"'{key}': a tensor on {sharded.data.device}")
                lt, owner = sharded.bind(writable=load,
                                        data=staging.host(sharded.data, len(tensors)))
                staging.hold(owner)  # freed with its buffer (a load: once copied)
                owner = None
            else:
                lt, owner = sharded.bind(writable=load)
            tensors.append(lt)
            owners.append(owner)
        else:
            index, grid = (node.index, node.grid) if kind == "sobject" else ([], [])
            if load:
                data = b""
            else:
                value = node.value if kind == "sobject" else node
                data = value if raw_objects and isinstance(value, bytes) else \
                    _objects.encode(key, value, allow_pickle)
            objects.append(_C.Object(key, data, index, grid))
    if staging is not None:
        staging.ready()  # the device-to-host copies of a save are done
    st.tensors = tensors
    st.objects = objects
    if load:
        st.common = b"" if common else None
    else:
        st.common = _objects.encode("<common>", common, allow_pickle)
        if metadata is not None:
            bad = _objects._json_path(metadata)
            if bad:
                raise _C.InvalidArgumentError(f"metadata must be JSON: {bad}")
            st.metadata_json = json.dumps(metadata)
    return st, owners, entries


def _safe_log(log):
    def call(line):
        try:
            log(line)
        except Exception:  # noqa: BLE001 - a logging failure must not unwind through C++
            pass
    return call


# The staging buffers' size of Python's saves (the C++ SaveOptions keep 8 MiB):
# 2 MiB measured fastest and cheapest in the restart order of
# bench/peers_bench.py (docs/performance.md, *Tuning*).
SAVE_STAGING_BYTES = 2 << 20

# A cooperative load over a comm written in Python (torch.distributed, mpi4py)
# moves its blocks in rounds of at most this many bytes (all ranks), not the
# C++ default of 256 MiB: each round's send and receive memory is fresh in a
# new process (page faults, seconds of system CPU per GiB on a VM that took
# freed pages back), so small rounds cost less CPU and peak memory
# (docs/performance.md, *The block exchange over Python comms*).
PYTHON_COMM_ROUND_BYTES = 16 << 20


def _save_options(overwrite, io_threads, staging_bytes, direct_io, verify_replicas,
                  plan_cache, log=None, storage_options=None):
    o = _C.SaveOptions()
    storage = storage_for(storage_options)
    if storage is not None:
        o.set_storage(storage)
    if log is not None:
        o.log = _safe_log(log)
    o.overwrite = bool(overwrite)
    if io_threads is not None:
        o.io_threads = int(io_threads)
    o.staging_bytes = SAVE_STAGING_BYTES if staging_bytes is None else int(staging_bytes)
    if direct_io is not None:
        o.direct_io = bool(direct_io)
    o.verify_replicas = bool(verify_replicas)
    if plan_cache is not None:
        o.plan_cache = plan_cache
    return o


def _wait_until_comm_idle(comm, skip=None):
    """Waits for an async save in flight on ``comm`` (by any AsyncSaver but ``skip``):
    two collectives must never interleave on one Comm. The save's outcome stays
    with its handle."""
    for saver in list(_live_savers):
        if saver is skip:
            continue
        last = saver._last
        if last is not None and last._comm is comm and not last.done():
            try:
                last._handle.wait()
            except Exception:  # noqa: BLE001 - reported by the handle's wait()
                pass


def save(state_dict: dict, path: str | os.PathLike, comm: Comm | None = None, *,
         common: Any = None, metadata: dict | None = None, allow_pickle: bool = False,
         overwrite: bool = False, io_threads: int | None = None,
         staging_bytes: int | None = None, direct_io: bool | None = None,
         verify_replicas: bool = True, plan_cache: _C.SavePlanCache | None = None,
         log: Callable[[str], Any] | None = None,
         storage_options: dict | None = None) -> SaveStats:
    """Saves every rank's ``state_dict`` into checkpoint directory ``path``. Collective.

    ``common``: one value for the whole job (rank 0's is stored: iteration,
    scheduler, config), JSON unless ``allow_pickle``. ``metadata``: a JSON
    dict stored in the manifest. ``overwrite``: replace an existing
    checkpoint. ``verify_replicas`` (default True; the same on every rank): fail
    if replicas of a tensor differ.
    ``plan_cache``: a ``SavePlanCache`` reused between saves of this rank.
    ``staging_bytes``: the size of each staging buffer (3 per data file;
    default 2 MiB, where the C++ API keeps 8 MiB: docs/performance.md).
    ``log``: called on rank 0 with one line when the save committed or failed.
    ``storage_options``: endpoint, region, addressing and credentials for an
    ``s3://`` path (``endpoint_url``, ``region_name``, ``addressing_style``,
    ``profile_name``, ``aws_access_key_id``, ``aws_secret_access_key``,
    ``aws_session_token``, ``ca_bundle``; default: the AWS environment and profiles).
    Returns the ``SaveStats``. The GIL is released while it runs.
    """
    comm = comm if comm is not None else default_comm()
    _wait_until_comm_idle(comm)
    staging = DeviceStaging(load=False)
    try:
        st, owners, _ = _build(state_dict, load=False, allow_pickle=allow_pickle, common=common,
                               metadata=metadata, staging=staging)
        opts = _save_options(overwrite, io_threads, staging_bytes, direct_io, verify_replicas,
                             plan_cache, log, storage_options)
        stats = _C.save(st, os.fspath(path), comm, opts)
        del owners
    finally:
        staging.release()
    return SaveStats.from_cpp(stats)


class SaveHandle:
    """The outcome of ``save_async``: ``wait()`` returns the SaveStats or raises the
    save's error (the same on every call); ``done()`` is True once it committed or failed."""

    def __init__(self, handle: Any, comm: Comm, path: str) -> None:
        self._handle = handle
        self._comm = comm  # the background save uses it: keep it alive
        self.path = path

    def done(self) -> bool:
        return self._handle.done()

    def wait(self, timeout: float | None = None) -> SaveStats:
        if timeout is not None:
            deadline = time.monotonic() + timeout
            while not self._handle.done():
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"save of {self.path} still running after {timeout} s")
                time.sleep(0.005)
        return SaveStats.from_cpp(self._handle.wait())

    @property
    def stall_seconds(self) -> float:
        """How long save_async blocked the caller (previous save, then the copy)."""
        return self._handle.stall_seconds

    @property
    def staged_bytes(self) -> int:
        return self._handle.staged_bytes

    @property
    def pool_grew(self) -> bool:
        """Whether this save had to create or grow the staging pool (its stall
        then includes faulting in the new pages)."""
        return self._handle.pool_grew


_live_savers: weakref.WeakSet[AsyncSaver] = weakref.WeakSet()
_COMMON = "<common>"  # how the C++ library names the common blob in key lists


class AsyncSaver:
    """Saves in the background. ``save`` copies the state into a staging pool
    (the only time training stalls) and returns a SaveHandle; the caller may
    change its tensors right away. At most one save is in flight: ``save``
    first waits for the previous one. The pool is kept between saves (bounded
    by ``max_staging_bytes``, 0 = unbounded), and so is the save plan while the
    state's structure does not change. Collective: every rank uses its own
    AsyncSaver in the same order.

    The first save creates the pool and pays for faulting in its pages (its
    stall is several times a later one's). ``reserve`` (or ``reserve=`` here)
    creates and faults in the pool ahead of the first save; ``huge_pages``
    asks the kernel for transparent huge pages for it (off by default: see
    the tuning table of docs/performance.md). A state larger than
    ``max_staging_bytes`` fails its save (``FailedPreconditionError`` at
    ``wait()``, on every rank) and leaves the pool as it was."""

    def __init__(self, max_staging_bytes: int = 0, *, reserve: Any = None,
                 huge_pages: bool = False) -> None:
        self._saver = _C.AsyncSaver(int(max_staging_bytes), bool(huge_pages))
        self._plan_cache = _C.SavePlanCache()
        self._last: SaveHandle | None = None
        _live_savers.add(self)
        if reserve is not None:
            self.reserve(reserve)

    def reserve(self, size_or_state_dict: Any) -> int:
        """Creates the staging pool now, every page faulted in: ``size`` bytes,
        or what ``save`` of this state dict (or any with the same tensor shapes
        and dtypes) needs. Waits for the save in flight first; a pool already
        that large is kept. Raises ``FailedPreconditionError`` beyond
        ``max_staging_bytes``. Returns the pool's size in bytes. Local: no
        other rank takes part. A state dict with CUDA tensors also gets their
        pinned host buffers, in the process-wide pool that ``save`` and
        ``save_async`` take from: the first save then pins nothing."""
        if isinstance(size_or_state_dict, int):
            self._saver.reserve(size_or_state_dict)
            return self._saver.pool_bytes
        staging = DeviceStaging(load=False)
        try:
            # objects are not staged in the pool: encoding them only sizes nothing
            st, owners, _ = _build(size_or_state_dict, load=False, allow_pickle=True,
                                   staging=staging)
            self._saver.reserve_state(st)
            del owners
        finally:
            staging.release()
        return self._saver.pool_bytes

    def save(self, state_dict: dict, path: str | os.PathLike, comm: Comm | None = None,
             **kwargs: Any) -> SaveHandle:
        """Stages ``state_dict`` and saves it into ``path`` in the background; same
        keyword arguments as ``save`` (no plan_cache: the saver keeps one)."""
        path = os.fspath(path)
        return self._submit(state_dict, path, comm,
                            lambda st, c, opts: self._saver.save(st, path, c, opts),
                            **kwargs)

    def _submit(self, state_dict, path, comm, start, *, common=None, metadata=None,
                allow_pickle=False, overwrite=False, io_threads=None, staging_bytes=None,
                direct_io=None, verify_replicas=True, log=None, storage_options=None):
        """Stages ``state_dict`` and starts ``start(state, comm, options)`` (a C++
        save into ``path`` that returns a C++ SaveHandle)."""
        comm = comm if comm is not None else default_comm()
        staging = DeviceStaging(load=False)
        try:
            st, owners, _ = _build(state_dict, load=False, allow_pickle=allow_pickle,
                                   common=common, metadata=metadata, staging=staging)
            _wait_until_comm_idle(comm, skip=self)  # the C++ saver waits for its own save
            opts = _save_options(overwrite, io_threads, staging_bytes, direct_io,
                                 verify_replicas, self._plan_cache, log, storage_options)
            handle = SaveHandle(start(st, comm, opts), comm, path)
            del owners  # staged: the caller's memory is no longer used
        finally:
            staging.release()
        self._last = handle
        return handle

    def wait(self) -> None:
        """Waits for the save in flight (if any); raises its error."""
        self._saver.wait_for_pending()

    @property
    def pool_bytes(self) -> int:
        return self._saver.pool_bytes

    @property
    def pool_huge_pages(self) -> bool:
        """Whether the kernel accepted the huge-page request for the pool now held."""
        return self._saver.pool_huge_pages

    @property
    def plan_cache(self) -> _C.SavePlanCache:
        return self._plan_cache


_default_saver = None
_default_saver_lock = threading.Lock()


def default_saver() -> AsyncSaver:
    """This process's AsyncSaver (created on first use), used by ``save_async``."""
    global _default_saver
    with _default_saver_lock:
        if _default_saver is None:
            _default_saver = AsyncSaver()
    return _default_saver


def save_async(state_dict: dict, path: str | os.PathLike, comm: Comm | None = None,
               **kwargs: Any) -> SaveHandle:
    """``save`` in the background with this process's default AsyncSaver; returns a
    SaveHandle (``wait()``, ``done()``). Same arguments as ``save`` (no plan_cache:
    the saver keeps one)."""
    return default_saver().save(state_dict, path, comm, **kwargs)


@atexit.register
def _wait_for_pending_saves():
    # A save still running at exit would call Python comms during interpreter
    # shutdown: finish it first (its error, if any, stays with its handle).
    for saver in list(_live_savers):
        try:
            saver.wait()
        except Exception:  # noqa: BLE001 - reported by the handle's wait()
            pass


@dataclasses.dataclass
class LoadResult:
    """What ``load`` found: ``missing_keys`` (requested, not stored) and
    ``unexpected_keys`` (stored, requested by no rank), both sorted; ``common``
    (the stored common value, None if absent); ``metadata`` (the stored dict or
    None); ``bytes_read`` (from storage by this rank), ``bytes_received`` (from
    other ranks, cooperative load), ``requests`` (read calls this rank made to
    storage), ``bytes_needed`` (the bytes of the pieces it read them for; in
    a cooperative load, the bytes any rank needs in the blocks it read:
    ``bytes_read / bytes_needed`` is the read amplification of widening to
    whole checksum blocks and bridging small gaps) and ``seconds``.
    ``bytes_local`` / ``bytes_peer`` / ``bytes_persistent``: where this rank's
    bytes came from in a resume from the local tier (its node's memory, other
    nodes' copies, the persistent checkpoint; docs/local-tier.md); a plain
    load counts everything it read as ``bytes_persistent``."""

    missing_keys: list[str] = dataclasses.field(default_factory=list)
    unexpected_keys: list[str] = dataclasses.field(default_factory=list)
    common: Any = None
    metadata: dict | None = None
    bytes_read: int = 0
    bytes_received: int = 0
    requests: int = 0
    bytes_needed: int = 0
    seconds: float = 0.0
    bytes_local: int = 0
    bytes_peer: int = 0
    bytes_persistent: int = 0


@dataclasses.dataclass(frozen=True)
class SaveStats:
    """What a save did: ``bytes_written`` (by all ranks), ``rank_bytes`` (by this
    rank), ``num_files``, ``num_chunks``, ``seconds``, ``plan_seconds`` and
    ``plan_cached`` (the plan came from a ``SavePlanCache``), ``cleanup_error``
    (rank 0, the new checkpoint is committed but cleanup after it failed: an
    overwrite's previous checkpoint could not be removed, e.g. a file of it is
    held open on NFS or FUSE, or on an object store the uploads a crashed
    earlier save left open under the directory could not be aborted; why and
    where it is left, also issued as a ``RuntimeWarning``; else empty)."""

    bytes_written: int
    rank_bytes: int
    num_files: int
    num_chunks: int
    seconds: float
    plan_seconds: float
    plan_cached: bool
    cleanup_error: str = ""

    @classmethod
    def from_cpp(cls, s: Any) -> SaveStats:
        stats = cls(**{f.name: getattr(s, f.name) for f in dataclasses.fields(cls)})
        if stats.cleanup_error:
            warnings.warn("shardpoint: the checkpoint is committed, but " + stats.cleanup_error,
                          RuntimeWarning, stacklevel=3)
        return stats


Decoder = Callable[[str, bytes, Any], Any]  # (key, stored bytes, template value) -> value


def _fill(node: Any, path: str, values: dict, decode: Decoder) -> Any:
    """Rebuilds the template ``node`` with loaded values (dicts and lists in place)."""
    if isinstance(node, ShardedTensor) or is_tensor(node):
        return node
    if isinstance(node, ShardedObject):
        if (node.key, tuple(node.index)) in values:
            node.value = decode(node.key, values[(node.key, tuple(node.index))], node.value)
        return node
    if isinstance(node, dict):
        for k in list(node.keys()):
            node[k] = _fill(node[k], _join(path, k), values, decode)
        return node
    if isinstance(node, (list, tuple)) and _contains_leaf(node):
        items = [_fill(v, _join(path, i), values, decode) for i, v in enumerate(node)]
        if isinstance(node, list):
            node[:] = items
            return node
        return type(node)(*items) if hasattr(node, "_fields") else type(node)(items)
    if (path, ()) in values:
        return decode(path, values[(path, ())], node)
    return node


def decoder(checkpoint: str, raw: bool, allow_pickle: bool) -> Decoder:
    """How ``load`` turns stored object bytes into values (errors name ``checkpoint``)."""
    def decode(key: str, data: bytes, like: Any) -> Any:
        return data if raw else _objects.decode(key, data, allow_pickle, like, checkpoint)
    return decode


def decode_metadata(st: Any, checkpoint: str) -> dict | None:
    """The stored metadata dict of a loaded C++ State (None if there is none)."""
    text = st.metadata_bytes
    if not text:
        return None
    meta = _objects.parse_json(text, f"metadata of checkpoint '{checkpoint}'")
    if not isinstance(meta, dict):
        raise _C.DataLossError(f"metadata of checkpoint '{checkpoint}': a JSON "
                               f"{type(meta).__name__}, not an object")
    return meta


def byte_count_option(name: str, value, zero: str) -> int:
    """A byte-count option ``name=``: an int >= 0, where 0 does what ``zero`` says."""
    n = int(value)
    if n < 0:
        raise ValueError(f"{name} must be >= 0 (0 {zero}), got {n}")
    return n


def prefetch_bytes_option(value) -> int:
    """``prefetch_bytes=`` of load and verify: a byte count >= 0 (0: no hints)."""
    return byte_count_option("prefetch_bytes", value, "turns read-ahead hints off")


def _direct_by_default(path: str, storage_options: dict | None) -> bool:
    """``load``'s ``direct_io`` default: O_DIRECT reads for a local shardpoint
    checkpoint (large aligned requests, no page-cache pages to allocate),
    buffered for the other kinds and for object stores."""
    if storage_options is not None or "://" in path:
        return False
    try:
        return _C.checkpoint_kind(path) == "shardpoint"
    except Exception:  # noqa: BLE001 - the load itself names what is wrong
        return False


def load(state_dict: dict, path: str | os.PathLike, comm: Comm | None = None, *,
         strict: bool = True, allow_pickle: bool = False, common: bool = True,
         allow_missing_keys: bool | None = None, allow_unexpected_keys: bool | None = None,
         allow_dtype_conversion: bool = False, allow_shape_mismatch: bool = False,
         verify_checksums: bool = True, io_threads: int | None = None,
         raw_objects: bool = False, cooperative: bool | None = None,
         read_slice_bytes: int | None = None, prefetch_bytes: int | None = None,
         read_gap_bytes: int | None = None, all_or_nothing: bool = False,
         direct_io: bool | None = None, storage_options: dict | None = None,
         cooperative_round_bytes: int | None = None,
         _native: Callable[..., Any] | None = None) -> LoadResult:
    """Loads checkpoint ``path`` into ``state_dict`` (the template, under any layout).
    Collective.

    Tensors and ShardedTensors are filled in place; values are replaced in the
    dicts and lists that hold them (tuples are rebuilt). ``strict`` (default):
    a missing or unexpected key raises; ``strict=False`` allows both and
    reports them in the result (``allow_missing_keys`` / ``allow_unexpected_keys``
    choose separately). ``allow_pickle``: unpickle pickled values (only for
    trusted checkpoints). ``common``: also read the common value, if the
    checkpoint has one (the result's ``common``; False skips it).
    ``allow_dtype_conversion``: convert stored dtypes to the requested ones.
    ``allow_shape_mismatch``: load the overlap of a tensor whose
    global shape changed (vocab padding), zero the rest. ``raw_objects``: return
    object bytes as stored, undecoded. ``cooperative`` (the same on every
    rank): each checksummed block that several ranks need bytes of is read
    and verified by one of them, which sends the others their bytes over the
    comm; default None = on (a checkpoint whose manifest shards total more
    than 64 MiB, saved by tens of thousands of ranks, is loaded as with
    False: an exchange needs every rank's records on every rank). Over a comm implemented in Python (the
    torch.distributed and mpi4py adapters, subclasses) the blocks between
    ranks of one node move through shared memory (/dev/shm; the comm
    carries only statuses and places; where segments cannot be shared, the
    comm carries them), and the exchange runs only where reading alone would
    put more than 1.05 bytes through read() per needed byte (a load cut along
    another dim); elsewhere every rank reads alone (docs/performance.md,
    *The block exchange over Python comms*). ``read_slice_bytes``: bytes read at once per I/O
    thread (default 1 MiB, one checksum block). ``prefetch_bytes``: the reads
    of a file are announced to the storage in windows of this size, one ahead,
    so that the kernel fetches them in large requests meanwhile (default
    16 MiB; 0 turns it off). ``read_gap_bytes``: needed ranges of a file at
    most this far apart are read by one request where they lie in one
    ``read_slice_bytes`` unit of a chunk (a load cut along another dim without
    verification), or while the unneeded bytes stay within 5% of the needed
    ones (default 256 KiB; 0 reads only needed bytes, and whole blocks when
    verifying). ``all_or_nothing``: read into fresh memory and copy it into
    the template only once every rank has read and verified all of it, so a
    load that fails while reading data (a checksum mismatch) leaves every
    tensor as it was (costs the memory of the tensors once more; without it,
    blocks placed before the failure stay written). ``direct_io``: read the
    data files with O_DIRECT where the filesystem allows it (elsewhere
    buffered, by itself), neither using nor filling the page cache; default
    None = on for a local shardpoint checkpoint, off for DCP and HF sources
    (small and strided items: each would cost a page-sized read) and for
    ``s3://`` paths (docs/performance.md, *Direct reads*). ``storage_options``:
    as ``save``'s, for an ``s3://`` path. ``cooperative_round_bytes``: a
    cooperative load moves at most about this many bytes (all ranks
    together) per exchange; default None = 16 MiB over a comm written in
    Python (each round's memory is fresh in a new process: small rounds cost
    less CPU and peak memory), the C++ default (256 MiB) over the C++ comms.
    Returns a LoadResult. The GIL is
    released while it runs.
    """
    comm = comm if comm is not None else default_comm()
    _wait_until_comm_idle(comm)
    allow_missing = (not strict) if allow_missing_keys is None else bool(allow_missing_keys)
    if cooperative is None:
        cooperative = True  # over a Python comm same-node bytes move through shared memory
    # a key the checkpoint lacks keeps its values: only then are device values
    # copied in first; the groups reuse host memory where announced in order
    # (not cooperative: C++ runs a one-rank load alone whatever the option)
    staging = DeviceStaging(load=True, keep_values=allow_missing,
                            reuse=not (cooperative and comm.size() > 1))
    pairs: list = []
    target = _twin.twin(state_dict, "", allow_missing, pairs) if all_or_nothing else state_dict
    st, owners, _ = _build(target, load=True, allow_pickle=allow_pickle, common=common,
                           staging=staging)
    o = _C.LoadOptions()
    o.allow_missing_keys = allow_missing
    o.allow_unexpected_keys = ((not strict) if allow_unexpected_keys is None
                               else bool(allow_unexpected_keys))
    o.allow_dtype_conversion = bool(allow_dtype_conversion)
    o.allow_shape_mismatch = bool(allow_shape_mismatch)
    o.verify_checksums = bool(verify_checksums)
    if io_threads is not None:
        o.io_threads = int(io_threads)
    o.cooperative = bool(cooperative)
    if cooperative_round_bytes is None and type(comm) is not _C.Comm:
        cooperative_round_bytes = PYTHON_COMM_ROUND_BYTES
    if cooperative_round_bytes is not None:
        o.cooperative_round_bytes = byte_count_option(
            "cooperative_round_bytes", cooperative_round_bytes, "moves one block span per round")
    o.direct_io = bool(_direct_by_default(os.fspath(path), storage_options)
                       if direct_io is None else direct_io)
    if read_slice_bytes is not None:
        o.read_slice_bytes = int(read_slice_bytes)
    if prefetch_bytes is not None:
        o.prefetch_bytes = prefetch_bytes_option(prefetch_bytes)
    if read_gap_bytes is not None:
        o.read_gap_bytes = byte_count_option("read_gap_bytes", read_gap_bytes,
                                             "reads only the needed bytes")
    # A checkpoint without common state (written by the CLI or the C++ API)
    # loads with common None.
    o.common_optional = bool(common)
    storage = storage_for(storage_options)
    if storage is not None:
        o.set_storage(storage)
    path = os.fspath(path)
    try:
        if staging.pairs:  # device tensors: copied group by group while the next is read
            o.tensor_groups = staging.groups(len(st.tensors))
            o.on_group_loaded = staging.on_group_loaded
        # _native: another C++ load of the same State (a tiered manager's resume)
        r = (_native or _C.load)(st, path, comm, o)
        staging.finish()  # host buffers -> device tensors
    finally:
        staging.release()
    del owners
    _twin.copy_back(pairs)  # every rank read and verified all of it
    values = {(ob.key, tuple(ob.index)): ob.bytes for ob in st.objects if ob.bytes}
    decode = decoder(path, raw_objects, allow_pickle)
    _fill(state_dict, "", values, decode)
    common_value = None
    if common and st.common is not None and _COMMON not in r.missing_keys:
        common_value = decode(_COMMON, st.common, None)
    meta = decode_metadata(st, path)
    return LoadResult(missing_keys=list(r.missing_keys), unexpected_keys=list(r.unexpected_keys),
                      common=common_value, metadata=meta, bytes_read=r.bytes_read,
                      bytes_received=r.bytes_received, requests=r.requests,
                      bytes_needed=r.bytes_needed, seconds=r.seconds,
                      bytes_local=r.bytes_local, bytes_peer=r.bytes_peer,
                      bytes_persistent=r.bytes_persistent)
