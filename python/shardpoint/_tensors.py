"""numpy arrays and torch CPU tensors as C++ LocalTensors, without copies.

A tensor is passed to C++ as its address, shape and element strides; the
caller of ``bind`` keeps the Python object alive while C++ uses the address.
torch.bfloat16 has no numpy dtype, so torch tensors are read through
``data_ptr()`` and ``stride()`` directly, never through numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Union

import numpy as np

from shardpoint import _shardpoint as _C

try:  # torch is optional
    import torch
except ImportError:  # pragma: no cover
    torch = None  # type: ignore[assignment]

DType = _C.DType

if TYPE_CHECKING:  # what the public functions accept, for type checkers
    Array = Union[np.ndarray, "torch.Tensor"]
else:
    Array = Any
DTypeLike = Union["_C.DType", str, np.dtype, type, Any]

_NUMPY = {
    np.dtype(np.bool_): DType.BOOL,
    np.dtype(np.uint8): DType.U8,
    np.dtype(np.int8): DType.I8,
    np.dtype(np.int16): DType.I16,
    np.dtype(np.uint16): DType.U16,
    np.dtype(np.int32): DType.I32,
    np.dtype(np.uint32): DType.U32,
    np.dtype(np.int64): DType.I64,
    np.dtype(np.uint64): DType.U64,
    np.dtype(np.float16): DType.F16,
    np.dtype(np.float32): DType.F32,
    np.dtype(np.float64): DType.F64,
}

_TORCH = {}
if torch is not None:
    _TORCH = {
        torch.bool: DType.BOOL,
        torch.uint8: DType.U8,
        torch.int8: DType.I8,
        torch.int16: DType.I16,
        torch.int32: DType.I32,
        torch.int64: DType.I64,
        torch.float16: DType.F16,
        torch.bfloat16: DType.BF16,
        torch.float32: DType.F32,
        torch.float64: DType.F64,
    }
    for _name, _dt in (("float8_e4m3fn", DType.F8_E4M3), ("float8_e5m2", DType.F8_E5M2),
                       ("uint16", DType.U16), ("uint32", DType.U32), ("uint64", DType.U64)):
        if hasattr(torch, _name):  # newer torch
            _TORCH[getattr(torch, _name)] = _dt


def is_tensor(x: Any) -> bool:
    """True for a numpy array or a torch tensor."""
    return isinstance(x, np.ndarray) or (torch is not None and isinstance(x, torch.Tensor))


def to_dtype(d: DTypeLike) -> _C.DType:
    """A shardpoint DType from a DType, a name ("bf16", "F8_E4M3"), a numpy or a torch dtype."""
    if isinstance(d, DType):
        return d
    if isinstance(d, str):
        return _C.parse_dtype(d)
    if torch is not None and isinstance(d, torch.dtype):
        if d not in _TORCH:
            raise _C.InvalidArgumentError(f"torch dtype {d} is not supported")
        return _TORCH[d]
    try:
        nd = np.dtype(d)
    except TypeError:
        raise _C.InvalidArgumentError(f"not a dtype: {d!r}") from None
    if nd.newbyteorder("=") != nd or nd not in _NUMPY:
        raise _C.InvalidArgumentError(f"numpy dtype {nd} is not supported (native byte order "
                                      "bool/int/uint/float16/32/64)")
    return _NUMPY[nd]


class Described:
    """Address, shape, element strides and dtype of a tensor; `owner` keeps it alive."""

    __slots__ = ("address", "shape", "strides", "dtype", "owner", "contiguous")

    def __init__(self, address, shape, strides, dtype, owner):
        self.address = address
        self.shape = list(shape)
        self.strides = list(strides)
        self.dtype = dtype
        self.owner = owner
        expected, contiguous = 1, True
        for n, s in zip(reversed(self.shape), reversed(self.strides)):
            if n != 1 and s != expected:
                contiguous = False
            expected *= n
        self.contiguous = contiguous

    @property
    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n


def describe(t: Array, dtype: DTypeLike | None = None, *, writable: bool = False,
             device_ok: bool = False) -> Described:
    """Describes `t` (numpy array or torch CPU tensor) for C++, without a copy.

    `dtype` reinterprets the elements (same element size): a uint16 array as
    "bf16", a uint8 array or tensor as "f8_e4m3". With writable=False (save) a
    layout C++ cannot address (negative numpy strides) is copied; with
    writable=True (load) it is an error, as are read-only arrays. A device
    (CUDA) tensor is described only with ``device_ok`` (its shape and dtype: the
    address is not host memory; save and load stage it through pinned memory).
    """
    if torch is not None and isinstance(t, torch.Tensor):
        if t.device.type != "cpu" and not device_ok:
            raise _C.InvalidArgumentError(f"tensor on {t.device}: C++ reads and writes host "
                                          "memory; save and load stage device tensors")
        if t.layout != torch.strided or t.is_quantized:
            raise _C.InvalidArgumentError(f"unsupported tensor layout {t.layout}")
        if t.dtype not in _TORCH:
            raise _C.InvalidArgumentError(f"torch dtype {t.dtype} is not supported")
        own = _TORCH[t.dtype]
        size = t.element_size()
        d = Described(t.data_ptr(), t.shape, t.stride(), own, t)
    elif isinstance(t, np.ndarray):
        own = to_dtype(t.dtype)
        size = t.itemsize
        if any(s < 0 or s % size for s in t.strides):
            if writable:
                raise _C.InvalidArgumentError(
                    f"cannot load into an array with strides {t.strides} (negative or not a "
                    "multiple of the item size)")
            t = np.ascontiguousarray(t)
        if writable and not t.flags.writeable:
            raise _C.InvalidArgumentError("cannot load into a read-only array")
        d = Described(t.__array_interface__["data"][0], t.shape, [s // size for s in t.strides],
                      own, t)
    else:
        raise _C.InvalidArgumentError(f"expected a numpy array or a torch tensor, got "
                                      f"{type(t).__name__}")
    if dtype is not None:
        want = to_dtype(dtype)
        if _C.dtype_size(want) != size:
            raise _C.InvalidArgumentError(
                f"cannot view elements of {size} bytes as {_C.dtype_name(want)} "
                f"({_C.dtype_size(want)} bytes)")
        d.dtype = want
    if writable and any(s == 0 and n > 1 for n, s in zip(d.shape, d.strides)):
        raise _C.InvalidArgumentError("cannot load into a tensor with zero strides (expanded)")
    return d
