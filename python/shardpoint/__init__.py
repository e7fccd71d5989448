"""shardpoint: distributed checkpoints of sharded training state.

    import shardpoint as sp
    sp.save({"model": model.state_dict()}, "ckpt/iter_100")          # one process
    sp.load(sd, "ckpt/iter_100")                                        # in place
    h = sp.save_async(sd, "ckpt/iter_200", sp.TorchDistributedComm())  # collective
    h.wait()

Sharded tensors (``ShardedTensor``, ``column_parallel``, ``row_parallel``,
``dtensor``, ``fused``, ``flat_buffer``...) say which piece of which global
tensor a rank holds, so a checkpoint saved under one parallel layout loads
under any other. See docs/python.md.
"""

from shardpoint._shardpoint import (  # noqa: F401 - re-exported
    DataLossError, DeadlineExceededError, DType, Error, FailedPreconditionError, InternalError,
    InvalidArgumentError, IOFailureError, IsDirectoryError, NotDirectoryError, NotFoundError,
    PermissionDeniedError, SavePlanCache)
from shardpoint._objects import PickleNotAllowedError  # noqa: F401
from shardpoint._tensors import to_dtype  # noqa: F401
from shardpoint._checkpoint import (  # noqa: F401
    AsyncSaver, LoadResult, SaveHandle, SaveStats, ShardedObject, default_saver, flatten_keys,
    load, save, save_async)
from shardpoint._manager import CheckpointManager, TierStep  # noqa: F401
from shardpoint._read import (  # noqa: F401
    ChunkInfo, Fault, Metadata, ObjectInfo, TensorInfo, VerifyReport, inspect, iter_tensors,
    metadata, read, verify)
from shardpoint import comm  # noqa: F401
from shardpoint.comm import (  # noqa: F401
    Comm, MPI4PyComm, TorchDistributedComm, default_comm, single, thread_comms)
from shardpoint.sharded import *  # noqa: F401,F403
from shardpoint.sharded import __all__ as _sharded_all

__all__ = [
    "TierStep",
    "save", "save_async", "load", "CheckpointManager", "AsyncSaver", "SaveHandle", "default_saver",
    "LoadResult", "ShardedObject", "flatten_keys", "Comm", "comm", "single", "thread_comms",
    "MPI4PyComm", "TorchDistributedComm", "default_comm", "Error", "InvalidArgumentError",
    "NotFoundError", "IOFailureError", "PermissionDeniedError", "IsDirectoryError",
    "NotDirectoryError", "DataLossError", "FailedPreconditionError", "InternalError",
    "DeadlineExceededError", "PickleNotAllowedError", "DType", "to_dtype", "SavePlanCache", "SaveStats",
    "metadata", "read", "iter_tensors", "verify", "inspect", "Metadata", "TensorInfo",
    "ChunkInfo", "ObjectInfo", "VerifyReport", "Fault",
] + list(_sharded_all)

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # Deprecated alias kept outside __all__: `shardpoint.IOError` shadowed the builtin.
    if name == "IOError":
        import warnings
        warnings.warn("shardpoint.IOError is deprecated: use shardpoint.IOFailureError (an "
                      "OSError)", DeprecationWarning, stacklevel=2)
        return IOFailureError
    raise AttributeError(f"module 'shardpoint' has no attribute '{name}'")
