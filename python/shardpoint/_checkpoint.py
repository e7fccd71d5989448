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

import atexit
import json
import threading
import time
import weakref

from shardpoint import _shardpoint as _C
from shardpoint import _objects
from shardpoint._tensors import is_tensor
from shardpoint.comm import default_comm
from shardpoint.sharded import ShardedTensor, whole

__all__ = ["ShardedObject", "save", "save_async", "load", "AsyncSaver", "SaveHandle",
           "LoadResult", "flatten_keys"]


class ShardedObject:
    """A value under key ``key``, shard ``index`` of a grid of shape ``grid``.

    ``ShardedObject("rng", state, index=(rank,), grid=(world,))`` stores one
    value per rank; ranks that give the same (key, index) are replicas. With
    empty index and grid it is one value shared by all ranks. On load,
    ``value`` is replaced by the stored value."""

    __slots__ = ("key", "value", "index", "grid")

    def __init__(self, key, value=None, index=(), grid=()):
        self.key = key
        self.value = value
        self.index = [int(i) for i in index]
        self.grid = [int(g) for g in grid]

    def __repr__(self):
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


def flatten_keys(state_dict):
    """The keys a state dict is stored under: {key: "tensor" | "object"}."""
    keys = {}
    for kind, key, node in _flatten(state_dict):
        if kind == "sharded":
            for k in node.keys:
                keys[k] = "tensor"
        else:
            keys[key] = "tensor" if kind == "tensor" else "object"
    return keys


def _build(state_dict, *, load, allow_pickle, common=None, metadata=None, raw_objects=False):
    """A C++ State over the state dict's memory, the objects keeping it alive,
    and the flattened entries."""
    entries = _flatten(state_dict)
    st = _C.State()
    tensors, objects, owners = [], [], []
    for kind, key, node in entries:
        if kind in ("sharded", "tensor"):
            sharded = node if kind == "sharded" else whole(key, node)
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


def _save_options(overwrite, io_threads, staging_bytes, direct_io, verify_replicas,
                  plan_cache, log=None):
    o = _C.SaveOptions()
    if log is not None:
        o.log = _safe_log(log)
    o.overwrite = bool(overwrite)
    if io_threads is not None:
        o.io_threads = int(io_threads)
    if staging_bytes is not None:
        o.staging_bytes = int(staging_bytes)
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


def save(state_dict, path, comm=None, *, common=None, metadata=None, allow_pickle=False,
         overwrite=False, io_threads=None, staging_bytes=None, direct_io=None,
         verify_replicas=True, plan_cache=None, log=None):
    """Saves every rank's ``state_dict`` into checkpoint directory ``path``. Collective.

    ``common``: one value for the whole job (rank 0's is stored: iteration,
    scheduler, config), JSON unless ``allow_pickle``. ``metadata``: a JSON
    dict stored in the manifest. ``overwrite``: replace an existing
    checkpoint. ``verify_replicas`` (default True): fail if replicas of a tensor differ.
    ``plan_cache``: a ``SavePlanCache`` reused between saves of this rank.
    ``log``: called on rank 0 with one line when the save committed or failed.
    Returns the C++ ``SaveStats``. The GIL is released while it runs.
    """
    comm = comm if comm is not None else default_comm()
    _wait_until_comm_idle(comm)
    st, owners, _ = _build(state_dict, load=False, allow_pickle=allow_pickle, common=common,
                           metadata=metadata)
    opts = _save_options(overwrite, io_threads, staging_bytes, direct_io, verify_replicas,
                         plan_cache, log)
    stats = _C.save(st, str(path), comm, opts)
    del owners
    return stats


class SaveHandle:
    """The outcome of ``save_async``: ``wait()`` returns the SaveStats or raises the
    save's error (the same on every call); ``done()`` is True once it committed or failed."""

    def __init__(self, handle, comm, path):
        self._handle = handle
        self._comm = comm  # the background save uses it: keep it alive
        self.path = path

    def done(self):
        return self._handle.done()

    def wait(self, timeout=None):
        if timeout is not None:
            deadline = time.monotonic() + timeout
            while not self._handle.done():
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"save of {self.path} still running after {timeout} s")
                time.sleep(0.005)
        return self._handle.wait()

    @property
    def stall_seconds(self):
        """How long save_async blocked the caller (previous save, then the copy)."""
        return self._handle.stall_seconds

    @property
    def staged_bytes(self):
        return self._handle.staged_bytes


_live_savers = weakref.WeakSet()
_COMMON = "<common>"  # how the C++ library names the common blob in key lists


class AsyncSaver:
    """Saves in the background. ``save`` copies the state into a staging pool
    (the only time training stalls) and returns a SaveHandle; the caller may
    change its tensors right away. At most one save is in flight: ``save``
    first waits for the previous one. The pool is kept between saves (bounded
    by ``max_staging_bytes``, 0 = unbounded), and so is the save plan while the
    state's structure does not change. Collective: every rank uses its own
    AsyncSaver in the same order."""

    def __init__(self, max_staging_bytes=0):
        self._saver = _C.AsyncSaver(int(max_staging_bytes))
        self._plan_cache = _C.SavePlanCache()
        self._last = None
        _live_savers.add(self)

    def save(self, state_dict, path, comm=None, **kwargs):
        return self._submit(state_dict, str(path), comm,
                            lambda st, c, opts: self._saver.save(st, str(path), c, opts),
                            **kwargs)

    def _submit(self, state_dict, path, comm, start, *, common=None, metadata=None,
                allow_pickle=False, overwrite=False, io_threads=None, staging_bytes=None,
                direct_io=None, verify_replicas=True, log=None):
        """Stages ``state_dict`` and starts ``start(state, comm, options)`` (a C++
        save into ``path`` that returns a C++ SaveHandle)."""
        comm = comm if comm is not None else default_comm()
        st, owners, _ = _build(state_dict, load=False, allow_pickle=allow_pickle, common=common,
                               metadata=metadata)
        _wait_until_comm_idle(comm, skip=self)  # the C++ saver waits for its own save
        opts = _save_options(overwrite, io_threads, staging_bytes, direct_io, verify_replicas,
                             self._plan_cache, log)
        handle = SaveHandle(start(st, comm, opts), comm, path)
        del owners  # staged: the caller's memory is no longer used
        self._last = handle
        return handle

    def wait(self):
        """Waits for the save in flight (if any); raises its error."""
        self._saver.wait_for_pending()

    @property
    def pool_bytes(self):
        return self._saver.pool_bytes

    @property
    def plan_cache(self):
        return self._plan_cache


_default_saver = None
_default_saver_lock = threading.Lock()


def default_saver():
    """This process's AsyncSaver (created on first use), used by ``save_async``."""
    global _default_saver
    with _default_saver_lock:
        if _default_saver is None:
            _default_saver = AsyncSaver()
    return _default_saver


def save_async(state_dict, path, comm=None, **kwargs):
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


class LoadResult:
    """What ``load`` found: ``missing_keys`` (requested, not stored) and
    ``unexpected_keys`` (stored, requested by no rank), both sorted; ``common``
    (the stored common value, None if absent); ``metadata`` (the stored dict or
    None); ``bytes_read`` (from storage by this rank), ``bytes_received`` (from
    other ranks, cooperative load) and ``seconds``."""

    __slots__ = ("missing_keys", "unexpected_keys", "common", "metadata", "bytes_read",
                 "bytes_received", "seconds")

    def __init__(self, **kw):
        for k in self.__slots__:
            setattr(self, k, kw.get(k))

    def __repr__(self):
        return (f"LoadResult(missing_keys={self.missing_keys}, "
                f"unexpected_keys={self.unexpected_keys})")


def _fill(node, path, values, raw, allow_pickle):
    """Rebuilds the template ``node`` with loaded values (dicts and lists in place)."""
    if isinstance(node, ShardedTensor) or is_tensor(node):
        return node
    if isinstance(node, ShardedObject):
        if (node.key, tuple(node.index)) in values:
            node.value = _decode(node.key, values[(node.key, tuple(node.index))], node.value,
                                 raw, allow_pickle)
        return node
    if isinstance(node, dict):
        for k in list(node.keys()):
            node[k] = _fill(node[k], _join(path, k), values, raw, allow_pickle)
        return node
    if isinstance(node, (list, tuple)) and _contains_leaf(node):
        items = [_fill(v, _join(path, i), values, raw, allow_pickle) for i, v in enumerate(node)]
        if isinstance(node, list):
            node[:] = items
            return node
        return type(node)(*items) if hasattr(node, "_fields") else type(node)(items)
    if (path, ()) in values:
        return _decode(path, values[(path, ())], node, raw, allow_pickle)
    return node


def _decode(key, data, like, raw, allow_pickle):
    return data if raw else _objects.decode(key, data, allow_pickle, like)


def load(state_dict, path, comm=None, *, strict=True, allow_pickle=False, common=True,
         allow_missing_keys=None, allow_unexpected_keys=None, allow_dtype_conversion=False,
         allow_shape_mismatch=False, verify_checksums=True, io_threads=None,
         raw_objects=False, cooperative=True, read_slice_bytes=None):
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
    object bytes as stored, undecoded. ``cooperative`` (default True, the same
    on every rank): bytes that several ranks need are read by one and sent to
    the others over the comm. ``read_slice_bytes``: bytes read at once per I/O
    thread (default 16 MiB). Returns a LoadResult. The GIL is released
    while it runs.
    """
    comm = comm if comm is not None else default_comm()
    _wait_until_comm_idle(comm)
    st, owners, _ = _build(state_dict, load=True, allow_pickle=allow_pickle, common=common)
    o = _C.LoadOptions()
    o.allow_missing_keys = (not strict) if allow_missing_keys is None else bool(allow_missing_keys)
    o.allow_unexpected_keys = ((not strict) if allow_unexpected_keys is None
                               else bool(allow_unexpected_keys))
    o.allow_dtype_conversion = bool(allow_dtype_conversion)
    o.allow_shape_mismatch = bool(allow_shape_mismatch)
    o.verify_checksums = bool(verify_checksums)
    if io_threads is not None:
        o.io_threads = int(io_threads)
    o.cooperative = bool(cooperative)
    if read_slice_bytes is not None:
        o.read_slice_bytes = int(read_slice_bytes)
    # A checkpoint without common state (written by the CLI or the C++ API)
    # loads with common None.
    o.common_optional = bool(common)
    r = _C.load(st, str(path), comm, o)
    del owners
    values = {(ob.key, tuple(ob.index)): ob.bytes for ob in st.objects if ob.bytes}
    _fill(state_dict, "", values, raw_objects, allow_pickle)
    common_value = None
    if common and st.common is not None and _COMMON not in r.missing_keys:
        common_value = st.common if raw_objects else _objects.decode(
            "<common>", st.common, allow_pickle)
    meta = json.loads(st.metadata_json) if st.metadata_json else None
    return LoadResult(missing_keys=list(r.missing_keys), unexpected_keys=list(r.unexpected_keys),
                      common=common_value, metadata=meta, bytes_read=r.bytes_read,
                      bytes_received=r.bytes_received, seconds=r.seconds)
