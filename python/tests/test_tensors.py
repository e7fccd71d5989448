"""dtypes, views and zero-copy: numpy arrays and torch CPU tensors."""

import numpy as np
import pytest
import torch

import shardpoint as sp

TORCH_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                torch.float16, torch.bfloat16, torch.float32, torch.float64]
NUMPY_DTYPES = [np.bool_, np.uint8, np.int8, np.int16, np.uint16, np.int32, np.uint32, np.int64,
                np.uint64, np.float16, np.float32, np.float64]


def torch_values(dtype, shape=(5, 7)):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 100
    return (x > 0) if dtype == torch.bool else x.to(dtype)


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_torch_dtypes(ckpt, dtype):
    x = torch_values(dtype)
    sp.save({"x": x}, ckpt)
    y = torch.zeros_like(x)
    sp.load({"x": y}, ckpt)
    assert torch.equal(x, y)


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_numpy_dtypes(ckpt, dtype):
    x = (np.random.default_rng(2).standard_normal((4, 3)) * 50).astype(dtype)
    sp.save({"x": x}, ckpt)
    y = np.zeros_like(x)
    sp.load({"x": y}, ckpt)
    assert np.array_equal(x, y)


def test_bf16_between_torch_and_numpy(ckpt):
    x = torch.tensor([1.5, -2.25, 3e38, 1e-3], dtype=torch.bfloat16)
    sp.save({"x": x}, ckpt)
    # numpy has no bfloat16: a uint16 array reinterpreted as "bf16" receives the bits
    bits = np.zeros(4, dtype=np.uint16)
    sp.load({"x": sp.whole("x", bits, dtype="bf16")}, ckpt)
    assert np.array_equal(bits, x.view(torch.int16).numpy().view(np.uint16))
    # and the other way round, float8 as uint8 bits
    f8 = np.array([0x38, 0x40, 0xC0], dtype=np.uint8)
    sp.save({"f8": sp.whole("f8", f8, dtype=sp.DType.F8_E4M3)}, ckpt + "8")
    back = torch.zeros(3, dtype=torch.uint8)
    sp.load({"f8": sp.whole("f8", back, dtype="F8_E4M3")}, ckpt + "8")
    assert back.tolist() == [0x38, 0x40, 0xC0]
    with pytest.raises(sp.InvalidArgumentError, match="2 bytes"):
        sp.whole("x", np.zeros(2, np.float32), dtype="bf16")


def test_zero_copy_addresses():
    t = torch.arange(24, dtype=torch.bfloat16).reshape(4, 6)[1:, 2:5]  # a strided view
    lt, owner = sp.whole("t", t).bind()
    assert owner is t and lt.data == t.data_ptr()
    assert lt.strides == [6, 1] and lt.shape == [3, 3]
    a = np.arange(24, dtype=np.float32).reshape(4, 6).T
    lt, owner = sp.whole("a", a).bind(writable=True)
    assert lt.data == a.__array_interface__["data"][0] and lt.strides == [1, 6]
    c = torch.ones(3, 4)
    lt, _ = sp.whole("c", c).bind()
    assert lt.data == c.data_ptr() and lt.strides == []  # contiguous: no strides


def test_non_contiguous_views(ckpt):
    base = torch.arange(10 * 12, dtype=torch.float32).reshape(10, 12)
    views = {"t": base.t(), "step": base[::3, 1::2], "offset": base[4:, 5],
             "narrow": base[2:5, 3:9],
             "expand": torch.arange(3.0).expand(4, 3), "np": base.numpy()[::-2, ::3]}
    sp.save(views, ckpt)
    out = {k: torch.zeros(tuple(v.shape)) for k, v in views.items()}
    sp.load(out, ckpt)
    for k, v in views.items():
        assert torch.equal(out[k], torch.as_tensor(np.ascontiguousarray(v))), k
    # load into views: only the viewed elements change
    target = torch.full((10, 12), -1.0)
    sp.load({"step": target[::3, 1::2]}, ckpt, strict=False)
    assert torch.equal(target[::3, 1::2], base[::3, 1::2])
    mask = torch.ones(10, 12, dtype=torch.bool)
    mask[::3, 1::2] = False
    assert (target[mask] == -1).all()
    tn = np.full((10, 12), -1.0, dtype=np.float32)
    sp.load({"t": tn.T}, ckpt, strict=False)  # a transposed (non-contiguous) numpy view
    assert np.array_equal(tn.T, base.t().numpy())


def test_load_into_unwritable_views_fails(ckpt):
    sp.save({"x": torch.ones(4, 3)}, ckpt)
    with pytest.raises(sp.InvalidArgumentError, match="zero strides"):
        sp.load({"x": torch.zeros(3).expand(4, 3)}, ckpt)
    ro = np.zeros((4, 3), np.float32)
    ro.flags.writeable = False
    with pytest.raises(sp.InvalidArgumentError, match="read-only"):
        sp.load({"x": ro}, ckpt)
    with pytest.raises(sp.InvalidArgumentError, match="negative"):
        sp.load({"x": np.zeros((4, 3), np.float32)[::-1]}, ckpt)


def test_unsupported_tensors(ckpt):
    with pytest.raises(sp.InvalidArgumentError, match="torch dtype torch.complex64"):
        sp.save({"x": torch.zeros(2, dtype=torch.complex64)}, ckpt)
    with pytest.raises(sp.InvalidArgumentError, match="numpy dtype >f4"):
        sp.save({"x": np.zeros(2, dtype=">f4")}, ckpt)
    with pytest.raises(sp.InvalidArgumentError, match="layout"):
        sp.save({"x": torch.zeros(2, 2).to_sparse()}, ckpt)
    with pytest.raises(sp.InvalidArgumentError, match="tensor on meta"):
        sp.save({"x": torch.zeros(2, device="meta")}, ckpt)


def test_requires_grad_parameters_and_scalars(ckpt):
    p = torch.nn.Parameter(torch.randn(3, 2))
    sd = {"p": p, "scalar": torch.tensor(2.5), "empty": torch.zeros(0, 4)}
    sp.save(sd, ckpt)
    q = torch.nn.Parameter(torch.zeros(3, 2))
    out = {"p": q, "scalar": torch.tensor(0.0), "empty": torch.zeros(0, 4)}
    sp.load(out, ckpt)
    assert torch.equal(q.detach(), p.detach()) and out["scalar"].item() == 2.5


def test_module_state_dict(ckpt):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8),
                            torch.nn.Linear(8, 2).to(torch.bfloat16))
    opt = torch.optim.Adam(m.parameters())
    for p in m.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    sp.save({"model": m.state_dict(), "optim": opt.state_dict()}, ckpt)
    m2 = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8),
                             torch.nn.Linear(8, 2).to(torch.bfloat16))
    opt2 = torch.optim.Adam(m2.parameters())
    for p in m2.parameters():  # optimizer state must exist to be loaded into
        p.grad = torch.zeros_like(p)
    opt2.step()
    sd2 = {"model": m2.state_dict(), "optim": opt2.state_dict()}
    sp.load(sd2, ckpt)
    opt2.load_state_dict(sd2["optim"])
    for a, b in zip(m.parameters(), m2.parameters()):
        assert torch.equal(a, b)
    s1, s2 = opt.state_dict()["state"], opt2.state_dict()["state"]
    assert all(torch.equal(s1[i]["exp_avg"], s2[i]["exp_avg"]) for i in s1)
