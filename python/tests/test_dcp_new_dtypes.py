"""`convert --to dcp` writes torch 2.x's newer dtypes (uint16/32/64, float8) as
torch 2.x's torch.save does: `_rebuild_tensor_v3(storage, storage_offset, size,
stride, requires_grad, backward_hooks, dtype)` of a `torch.storage.UntypedStorage`
whose persistent id carries its byte count (torch/_tensor.py,
torch/serialization.py). Here each item is unpickled by Python's own pickle
module with that signature, without torch 2.x; test_torch2_dcp.py does the
same against the real torch 2.x (GPU machine)."""

import collections
import io
import math
import pickle
import subprocess
import zipfile

import numpy as np
import pytest

import shardpoint as sp
from test_dcp import cli

# torch dtype name -> (numpy dtype of its bits, shardpoint dtype name)
NEWER = {"uint16": (np.uint16, None), "uint32": (np.uint32, None), "uint64": (np.uint64, None),
         "float8_e4m3fn": (np.uint8, "f8_e4m3"), "float8_e5m2": (np.uint8, "f8_e5m2")}


class _Torch2Unpickler(pickle.Unpickler):
    """What torch 2.x's torch.load accepts for such a tensor, and nothing else."""

    def __init__(self, data, archive, prefix):
        super().__init__(io.BytesIO(data))
        self.archive, self.prefix = archive, prefix

    def find_class(self, module, name):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v3"):
            return _rebuild_tensor_v3
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch.storage" and name == "UntypedStorage":  # the class's own module
            return "UntypedStorage"
        if module == "torch" and name in NEWER:
            return NEWER[name][0]
        raise pickle.UnpicklingError(f"{module}.{name} is not in a v3 tensor pickle")

    def persistent_load(self, pid):
        typename, storage_type, key, location, numel = pid
        assert (typename, storage_type, location) == ("storage", "UntypedStorage", "cpu"), pid
        data = self.archive.read(f"{self.prefix}data/{key}")
        assert len(data) == numel, "an untyped storage's numel is its byte count"
        return data


def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks,
                       dtype, metadata=None):
    assert requires_grad is False and backward_hooks == collections.OrderedDict()
    assert metadata is None
    n = math.prod(size)
    contiguous = tuple(math.prod(size[d + 1:]) for d in range(len(size)))
    assert tuple(stride) == contiguous, (size, stride)
    return np.frombuffer(storage, dtype=dtype)[storage_offset:storage_offset + n].reshape(size)


@pytest.mark.parametrize("name", sorted(NEWER))
def test_newer_dtype_items_unpickle_as_torch2_writes_them(name, tmp_path):
    exe = cli()
    if exe is None:
        pytest.skip("no shardpoint CLI: not in the package, beside it, nor on PATH")
    bits, sp_dtype = NEWER[name]
    rng = np.random.default_rng(11)
    want = rng.integers(0, np.iinfo(bits).max, size=(5, 3), dtype=bits, endpoint=True)
    src, out = str(tmp_path / "sp"), str(tmp_path / "dcp")
    x = sp.ShardedTensor("x", want, [5, 3], [0, 0], dtype=sp_dtype) if sp_dtype else want
    sp.save({"x": x}, src, sp.single())
    r = subprocess.run([exe, "convert", "--to", "dcp", src, out], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    # One tensor saved whole: the only item of the only data file, at offset 0.
    with zipfile.ZipFile(f"{out}/__0_0.distcp") as z:
        pkl = [n for n in z.namelist() if n.endswith("/data.pkl")]
        assert len(pkl) == 1, z.namelist()
        prefix = pkl[0][:-len("data.pkl")]
        assert z.read(prefix + "byteorder") == b"little"
        got = _Torch2Unpickler(z.read(pkl[0]), z, prefix).load()
    assert got.dtype == bits and got.shape == (5, 3)
    assert np.array_equal(got, want)

    r = subprocess.run([exe, "convert", "--to", "dcp", "--torch", "1.13", src, str(tmp_path / "b")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "tensor 'x'" in r.stderr and "torch 1.13" in r.stderr, r.stderr
