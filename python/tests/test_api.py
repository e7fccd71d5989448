"""The state-dict API: nested dicts, values, common state, metadata, strictness."""

import collections
import math
import os
import pickle
import shutil
import tempfile

import numpy as np
import pytest
import torch

import shardpoint as sp


def model_sd(fill=None):
    def t(*shape, dtype=torch.float32):
        n = int(np.prod(shape))
        x = torch.arange(n, dtype=torch.float64).reshape(shape).to(dtype)
        return x if fill is None else torch.full(shape, fill, dtype=dtype)

    return {
        "model": {"layers": [{"w": t(3, 4), "b": t(4)}, {"w": t(4, 2), "b": t(2)}],
                  "scale": t(1, dtype=torch.bfloat16)},
        "optim": {"state": {0: {"step": t(), "exp_avg": t(3, 4)}},
                  "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "params": [0, 1],
                                    "name": "default", "fused": None}]},
        "np": np.arange(6, dtype=np.int32).reshape(2, 3) if fill is None else
        np.full((2, 3), fill, dtype=np.int32),
        "iteration": 12,
        "blob": b"\x00\x01binary",
        "pair": (torch.ones(2) if fill is None else torch.zeros(2), "tag"),
    }


def template():
    sd = model_sd(fill=0)
    sd["optim"]["param_groups"] = [{"lr": 0.0, "betas": (0, 0), "params": [], "name": "",
                                    "fused": False}]
    sd["iteration"] = 0
    sd["blob"] = b""
    sd["pair"] = (torch.zeros(2), "")
    return sd


def assert_same(a, b):
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    else:
        assert a == b


def test_round_trip_nested_state_dict(ckpt):
    sd = model_sd()
    stats = sp.save(sd, ckpt, common={"iteration": 12, "seed": [1, 2]},
                    metadata={"framework": "torch", "tp": 1})
    assert stats.bytes_written > 0 and stats.num_files >= 1
    t = template()
    keep = t["model"]["layers"][0]["w"]
    r = sp.load(t, ckpt)
    assert r.missing_keys == [] and r.unexpected_keys == []
    assert r.common == {"iteration": 12, "seed": [1, 2]}
    assert r.metadata == {"framework": "torch", "tp": 1}
    assert_same(t, sd)
    assert t["model"]["layers"][0]["w"] is keep  # filled in place
    assert r.bytes_read > 0


def test_keys_are_dotted_paths():
    keys = sp.flatten_keys(model_sd())
    assert keys["model.layers.0.w"] == "tensor"
    assert keys["optim.state.0.exp_avg"] == "tensor"
    assert keys["optim.param_groups"] == "object"  # a list without tensors is one value
    assert keys["pair.0"] == "tensor" and keys["pair.1"] == "object"
    assert keys["iteration"] == "object"


def test_values_json_bytes_and_tuples(ckpt):
    Point = collections.namedtuple("Point", "x y")
    sd = {"f": math.pi, "nan": float("inf"), "s": "héllo", "none": None, "t": (1, (2, 3)),
          "p": Point(1, 2), "d": {"a": [1, {"b": True}]}, "raw": bytearray(b"\xff")}
    sp.save(sd, ckpt)
    t = {"f": 0.0, "nan": 0.0, "s": "", "none": 1, "t": (0, (0, 0)), "p": Point(0, 0),
         "d": {"a": [0, {"b": False}]}, "raw": None}
    sp.load(t, ckpt)
    assert t == {"f": math.pi, "nan": float("inf"), "s": "héllo", "none": None, "t": (1, (2, 3)),
                 "p": Point(1, 2), "d": {"a": [1, {"b": True}]}, "raw": b"\xff"}
    assert type(t["p"]) is Point


class Custom:
    def __init__(self, v):
        self.v = v

    def __eq__(self, other):
        return isinstance(other, Custom) and other.v == self.v


def test_pickle_needs_opt_in_on_save(ckpt):
    with pytest.raises(sp.PickleNotAllowedError, match=r"object 'cfg'.*allow_pickle=True"):
        sp.save({"cfg": Custom(3)}, ckpt)
    with pytest.raises(sp.PickleNotAllowedError, match=r"dict key 1 is not a str"):
        sp.save({"cfg": [{1: "a"}]}, ckpt)
    with pytest.raises(sp.PickleNotAllowedError, match="not JSON-serializable"):
        sp.save({"x": {1, 2}}, ckpt)
    assert issubclass(sp.PickleNotAllowedError, sp.InvalidArgumentError)


def test_pickle_needs_opt_in_on_load(ckpt, tmp_path):
    sp.save({"cfg": Custom(3), "w": torch.ones(2)}, ckpt, allow_pickle=True,
            common=Custom(4))
    marker = tmp_path / "pwned"

    t = {"cfg": None, "w": torch.zeros(2)}
    with pytest.raises(sp.PickleNotAllowedError, match="object 'cfg' is pickled"):
        sp.load(t, ckpt)
    with pytest.raises(sp.PickleNotAllowedError, match="'<common>' is pickled"):
        sp.load({"w": torch.zeros(2)}, ckpt, strict=False)
    r = sp.load(t, ckpt, allow_pickle=True)
    assert t["cfg"] == Custom(3) and r.common == Custom(4)
    # Without the opt-in, a malicious pickle never runs (written with the C++ API).
    evil = b"P" + pickle.dumps(EvilPayload(str(marker)))
    st = sp._shardpoint.State()
    st.objects = [sp._shardpoint.Object("cfg", evil)]
    sp._shardpoint.save(st, ckpt + "2", sp.single())
    with pytest.raises(sp.PickleNotAllowedError):
        sp.load({"cfg": None}, ckpt + "2", common=False)
    assert not marker.exists()
    # A bytes value is stored raw, never as a pickle, whatever it holds.
    sp.save({"cfg": evil}, ckpt + "3")
    t = {"cfg": None}
    sp.load(t, ckpt + "3", allow_pickle=True)
    assert t["cfg"] == evil and not marker.exists()
    raw = {"cfg": None, "w": torch.zeros(2)}
    sp.load(raw, ckpt, raw_objects=True)
    assert raw["cfg"][:1] == b"P"


class EvilPayload:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_strict_and_non_strict(ckpt):
    sp.save({"a": torch.ones(2), "b": torch.ones(3), "n": 1}, ckpt)
    with pytest.raises(sp.InvalidArgumentError, match="'b'|b\\b") as e:
        sp.load({"a": torch.zeros(2), "n": 0}, ckpt)
    assert "unexpected" in str(e.value)
    with pytest.raises(sp.Error, match="c") as e:
        sp.load({"a": torch.zeros(2), "b": torch.zeros(3), "c": torch.zeros(1), "n": 0}, ckpt)
    assert "missing" in str(e.value)
    t = {"a": torch.zeros(2), "c": torch.full((1,), 7.0), "n": 0, "m": "default"}
    r = sp.load(t, ckpt, strict=False)
    assert r.missing_keys == ["c", "m"]
    assert r.unexpected_keys == ["b"]
    assert torch.equal(t["a"], torch.ones(2)) and t["c"].item() == 7.0
    assert t["n"] == 1 and t["m"] == "default"  # missing values keep the template's
    # only one of the two relaxations
    with pytest.raises(sp.Error, match="unexpected"):
        sp.load({"a": torch.zeros(2), "n": 0, "c": torch.zeros(1)}, ckpt,
                allow_missing_keys=True)


def test_sharded_objects(ckpt):
    def save(rank, comm):
        sd = {"rng": sp.ShardedObject("rng", {"rank": rank}, index=(rank,), grid=(2,)),
              "cfg": sp.ShardedObject("cfg", "shared")}
        sp.save(sd, ckpt, comm)

    from conftest import run_ranks
    run_ranks(2, save)
    o = sp.ShardedObject("rng", None, index=(1,), grid=(2,))
    sd = {"x": o, "cfg": sp.ShardedObject("cfg")}
    sp.load(sd, ckpt, strict=False)
    assert sd["x"] is o and o.value == {"rank": 1} and sd["cfg"].value == "shared"


def test_checkpoint_without_common_state(ckpt):
    st = sp._shardpoint.State()  # written by the C++ API: no common blob at all
    st.objects = [sp._shardpoint.Object("x", b"J1")]
    sp._shardpoint.save(st, ckpt, sp.single())
    t = {"x": 0}
    r = sp.load(t, ckpt)
    assert t == {"x": 1} and r.common is None and r.missing_keys == []
    with pytest.raises(sp.NotFoundError, match="lacks requested keys 'y' "):
        sp.load({"x": 0, "y": 0}, ckpt)


def test_common_absent_and_metadata_default(ckpt):
    sp.save({"a": torch.ones(1)}, ckpt)
    r = sp.load({"a": torch.zeros(1)}, ckpt)
    assert r.common is None and r.metadata is None
    r = sp.load({"a": torch.zeros(1)}, ckpt, common=False)
    assert r.common is None


def test_state_dict_shape_errors(ckpt):
    with pytest.raises(sp.InvalidArgumentError, match="must be a dict"):
        sp.save([torch.ones(1)], ckpt)
    with pytest.raises(sp.InvalidArgumentError, match="'a.b' appears twice"):
        sp.save({"a.b": 1, "a": {"b": 2}}, ckpt)
    with pytest.raises(sp.InvalidArgumentError, match="metadata must be JSON"):
        sp.save({"a": 1}, ckpt, metadata={"x": object()})


def test_overwrite(ckpt):
    sp.save({"a": torch.ones(1)}, ckpt)
    with pytest.raises(sp.FailedPreconditionError, match="already exists"):
        sp.save({"a": torch.ones(1)}, ckpt)
    sp.save({"a": torch.full((1,), 2.0)}, ckpt, overwrite=True)
    t = {"a": torch.zeros(1)}
    sp.load(t, ckpt)
    assert t["a"].item() == 2.0


def test_path_like_and_options(ckpt, tmp_path):
    p = tmp_path / "pathlib"
    cache = sp.SavePlanCache()
    for i in range(2):
        sp.save({"a": torch.ones(4)}, p, io_threads=1, staging_bytes=1 << 16, direct_io=False,
                verify_replicas=True, plan_cache=cache, overwrite=True)
    assert cache.hits == 1 and cache.misses == 1
    t = {"a": torch.zeros(4)}
    sp.load(t, p, io_threads=1, verify_checksums=False)
    assert t["a"].sum().item() == 4


def test_dtype_conversion_and_shape_mismatch(ckpt):
    sp.save({"a": torch.arange(4, dtype=torch.float32), "v": torch.ones(3, 2)}, ckpt)
    t = {"a": torch.zeros(4, dtype=torch.float64), "v": torch.full((4, 2), 5.0)}
    with pytest.raises(sp.InvalidArgumentError, match="'a'"):
        sp.load(t, ckpt)
    with pytest.raises(sp.InvalidArgumentError, match="'v'"):
        sp.load(t, ckpt, allow_dtype_conversion=True)
    sp.load(t, ckpt, allow_dtype_conversion=True, allow_shape_mismatch=True)
    assert t["a"].tolist() == [0, 1, 2, 3]
    assert t["v"].tolist() == [[1, 1], [1, 1], [1, 1], [0, 0]]


def test_default_comm_is_single():
    c = sp.default_comm()
    assert c.rank() == 0 and c.size() == 1
    assert c.all_gather(b"x") == [b"x"]
    assert c.gather(b"y", 0) == [b"y"]
    assert c.broadcast(b"z", 0) == b"z"
    c.barrier()


def test_prefetch_bytes_reaches_load_and_verify(tmp_path):
    # Announcing reads ahead (the default, 16 MiB windows), announcing none, and windows
    # smaller than a slice all load the same bytes; verify takes the same knob.
    g = torch.randn(1024, 1024, generator=torch.Generator().manual_seed(7))
    sp.save({"w": g}, tmp_path / "c")
    assert sp._shardpoint.LoadOptions().prefetch_bytes == 16 << 20
    for prefetch in (None, 0, 4096):
        cols = torch.zeros(1024, 256)
        r = sp.load({"w": sp.chunk("w", cols, [1024, 1024], 1, 2, 4)}, tmp_path / "c",
                    prefetch_bytes=prefetch)
        assert torch.equal(cols, g[:, 512:768]), prefetch
        assert r.bytes_read == 4 << 20
        assert sp.verify(tmp_path / "c", prefetch_bytes=prefetch).ok
    with pytest.raises(ValueError, match=r"prefetch_bytes must be >= 0 .*got -1"):
        sp.load({"w": torch.zeros(1024, 1024)}, tmp_path / "c", prefetch_bytes=-1)
    with pytest.raises(ValueError, match=r"prefetch_bytes must be >= 0 .*got -1"):
        sp.verify(tmp_path / "c", prefetch_bytes=-1)
    with pytest.raises(ValueError, match=r"read_gap_bytes must be >= 0 .*got -1"):
        sp.load({"w": torch.zeros(1024, 1024)}, tmp_path / "c", read_gap_bytes=-1)


def test_load_reports_requests_and_bytes_needed(tmp_path):
    # 4 MiB of f32 = 4 checksum blocks of 1 MiB, one chunk in one file. Buffered
    # reads: the requests as planned (direct ones are widened to aligned bounds).
    g = torch.arange(1024 * 1024, dtype=torch.float32).reshape(1024, 1024)
    sp.save({"w": g}, tmp_path / "c")
    whole = torch.zeros(1024, 1024)
    r = sp.load({"w": whole}, tmp_path / "c", direct_io=False)
    assert torch.equal(whole, g)
    # one request per block by default (read_slice_bytes 1 MiB), one in all with 16 MiB slices
    assert (r.requests, r.bytes_needed, r.bytes_read) == (4, 4 << 20, 4 << 20)
    whole.zero_()
    r = sp.load({"w": whole}, tmp_path / "c", read_slice_bytes=16 << 20)
    assert torch.equal(whole, g)
    assert (r.requests, r.bytes_needed, r.bytes_read) == (1, 4 << 20, 4 << 20)
    # rows 256..511: exactly its own block, one request
    rows = torch.zeros(256, 1024)
    r = sp.load({"w": sp.chunk("w", rows, [1024, 1024], 0, 1, 4)}, tmp_path / "c",
                direct_io=False)
    assert torch.equal(rows, g[256:512])
    assert (r.requests, r.bytes_needed, r.bytes_read) == (1, 1 << 20, 1 << 20)
    # columns 256..511: a quarter of every row, verified through the whole blocks that cover it
    cols = torch.zeros(1024, 256)
    r = sp.load({"w": sp.chunk("w", cols, [1024, 1024], 1, 1, 4)}, tmp_path / "c",
                direct_io=False, read_slice_bytes=16 << 20)
    assert torch.equal(cols, g[:, 256:512])
    assert (r.requests, r.bytes_needed, r.bytes_read) == (1, 1 << 20, 4 << 20)
    # without verification: the 1024 row runs, 3 KiB apart; those inside one 1 MiB unit
    # of the chunk (256 rows) are read by one request, from the unit's first needed byte
    # to its last (the gaps between units, within 5% of the needed bytes, too)
    cols.zero_()
    r = sp.load({"w": sp.chunk("w", cols, [1024, 1024], 1, 1, 4)}, tmp_path / "c",
                direct_io=False, verify_checksums=False)
    assert torch.equal(cols, g[:, 256:512])
    assert r.bytes_needed == 1 << 20
    assert (r.requests, r.bytes_read) == (4, 4 * (255 * 4096 + 1024))
    # with read_gap_bytes=0, only the needed bytes: a request per row
    cols.zero_()
    r = sp.load({"w": sp.chunk("w", cols, [1024, 1024], 1, 1, 4)}, tmp_path / "c",
                direct_io=False, verify_checksums=False, read_gap_bytes=0)
    assert torch.equal(cols, g[:, 256:512])
    assert (r.requests, r.bytes_read) == (1024, 1 << 20)
    # direct: each request widened to 4096-aligned bounds (at most a page more
    # at each end) and read at once, as many requests
    cols.zero_()
    r = sp.load({"w": sp.chunk("w", cols, [1024, 1024], 1, 1, 4)}, tmp_path / "c",
                verify_checksums=False, direct_io=True)
    assert torch.equal(cols, g[:, 256:512])
    planned = 4 * (255 * 4096 + 1024)
    assert r.requests == 4 and planned <= r.bytes_read <= planned + 4 * 8192, r.bytes_read
    try:  # where the filesystem takes O_DIRECT, the unaligned requests were widened
        os.close(os.open(tmp_path / "c" / "manifest", os.O_RDONLY | os.O_DIRECT))
    except OSError:
        return
    assert r.bytes_read > planned, r.bytes_read


@pytest.mark.parametrize("where", ["tmp", "shm"])

def test_direct_io_loads_the_same_bytes(tmp_path, where):
    """direct_io=True (O_DIRECT where the filesystem allows it: ext4 here; tmpfs
    refused it before Linux 6.6, and the file then reads buffered by itself)
    loads bit for bit what a buffered load does: a whole tensor, a bf16 column
    strip (unaligned runs in every row), unverified strips (unaligned requests),
    and an int8 tensor whose chunk starts at an unaligned offset of its file."""
    if where == "shm":
        if not os.path.isdir("/dev/shm"):
            pytest.skip("no /dev/shm")
        d = tempfile.mkdtemp(dir="/dev/shm")
    else:
        d = str(tmp_path)
    try:
        gen = torch.Generator().manual_seed(38)
        g = torch.randn(1000, 1030, generator=gen).to(torch.bfloat16)
        b = torch.randint(-128, 127, (77, 13), generator=gen, dtype=torch.int8)
        sp.save({"g": g, "b": b}, os.path.join(d, "c"))
        for verify in (True, False):
            whole, strip, small = torch.zeros_like(g), torch.zeros(1000, 206, dtype=g.dtype), \
                torch.zeros_like(b)
            sp.load({"g": whole, "b": small}, os.path.join(d, "c"), direct_io=True,
                    verify_checksums=verify)
            sp.load({"g": sp.chunk("g", strip, [1000, 1030], 1, 3, 5)}, os.path.join(d, "c"),
                    direct_io=True, verify_checksums=verify, strict=False)
            assert torch.equal(whole, g) and torch.equal(small, b), verify
            assert torch.equal(strip, g[:, 618:824]), verify
        assert sp._shardpoint.LoadOptions().direct_io is False
    finally:
        if where == "shm":
            shutil.rmtree(d)
