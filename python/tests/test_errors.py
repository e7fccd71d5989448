"""Errors: one Python exception class per C++ status code, carrying the C++ message."""

import os

import pytest
import torch

import shardpoint as sp
from conftest import run_ranks


def test_exception_hierarchy():
    assert issubclass(sp.InvalidArgumentError, sp.Error)
    assert issubclass(sp.InvalidArgumentError, ValueError)
    assert issubclass(sp.NotFoundError, LookupError)
    assert issubclass(sp.IOError, OSError)
    assert issubclass(sp.FailedPreconditionError, RuntimeError)
    assert issubclass(sp.InternalError, RuntimeError)
    assert issubclass(sp.DataLossError, sp.Error)
    codes = {c.code for c in (sp.InvalidArgumentError, sp.NotFoundError, sp.IOError,
                              sp.DataLossError, sp.FailedPreconditionError, sp.InternalError)}
    assert codes == {"InvalidArgument", "NotFound", "IOError", "DataLoss", "FailedPrecondition",
                     "Internal"}
    assert sp.InvalidArgumentError.__module__ == "shardpoint"


def test_not_found(ckpt):
    with pytest.raises(sp.NotFoundError) as e:
        sp.load({"a": torch.zeros(1)}, ckpt)
    assert str(e.value) == (f"rank 0: no checkpoint at '{ckpt}': '{ckpt}/manifest' does not "
                            "exist (a save that did not commit leaves no manifest)")
    assert e.value.code == "NotFound"


def test_io_error(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(sp.IOError, match=str(f)) as e:
        sp.save({"a": torch.ones(1)}, f / "ckpt")
    assert isinstance(e.value, OSError)


def test_data_loss_names_key_and_file(ckpt):
    sp.save({"weights": torch.arange(1000, dtype=torch.float32)}, ckpt)
    data = os.path.join(ckpt, "data")
    name = sorted(os.listdir(data))[0]
    path = os.path.join(data, name)
    with open(path, "r+b") as f:
        f.seek(-8, os.SEEK_END)
        f.write(b"\xff" * 8)
    with pytest.raises(sp.DataLossError) as e:
        sp.load({"weights": torch.zeros(1000)}, ckpt)
    assert "weights" in str(e.value) and name in str(e.value)
    # and skipping the checksums reads the corrupt bytes
    sp.load({"weights": torch.zeros(1000)}, ckpt, verify_checksums=False)


def test_corrupt_manifest(ckpt):
    sp.save({"a": torch.ones(3)}, ckpt)
    with open(os.path.join(ckpt, "manifest"), "r+b") as f:
        f.seek(12)
        f.write(b"\x00\x7f\x7f\x7f")
    with pytest.raises(sp.DataLossError, match="manifest"):
        sp.load({"a": torch.zeros(3)}, ckpt)


def test_invalid_argument_and_failed_precondition(ckpt):
    sp.save({"a": torch.ones(3)}, ckpt)
    with pytest.raises(sp.InvalidArgumentError, match="'a'.*dtype|dtype.*'a'"):
        sp.load({"a": torch.zeros(3, dtype=torch.int32)}, ckpt)
    with pytest.raises(sp.FailedPreconditionError, match="already exists"):
        sp.save({"a": torch.ones(3)}, ckpt)


def test_error_on_one_rank_fails_every_rank(ckpt):
    errors = []

    def save(r, comm):
        t = torch.ones(2) if r == 0 else torch.ones(2, dtype=torch.float64)
        try:
            sp.save({"w": t}, ckpt, comm)
        except sp.Error as e:
            errors.append((r, type(e), str(e)))

    run_ranks(2, save)
    assert sorted(r for r, _, _ in errors) == [0, 1]
    for _, cls, msg in errors:
        assert cls is sp.InvalidArgumentError and "'w'" in msg
    assert not os.path.exists(os.path.join(ckpt, "manifest"))


class BrokenComm(sp.Comm):
    def __init__(self):
        sp.Comm.__init__(self)

    def rank(self):
        return 0

    def size(self):
        return 1

    def all_gather(self, data):
        raise ConnectionError("network is down")

    def gather(self, data, root):
        raise ConnectionError("network is down")

    def broadcast(self, data, root):
        raise ConnectionError("network is down")

    def barrier(self):
        raise ConnectionError("network is down")


def test_python_comm_exception_becomes_io_error(ckpt):
    with pytest.raises(sp.IOError, match=r"Python comm \w+\(\) raised ConnectionError: network "
                                         r"is down"):
        sp.save({"a": torch.ones(1)}, ckpt, BrokenComm())
    assert not os.path.exists(os.path.join(ckpt, "manifest"))


def test_python_comm_bad_return_value(ckpt):
    class Bad(BrokenComm):
        def all_gather(self, data):
            return [data, data]  # two items for one rank

        def broadcast(self, data, root):
            return "not bytes"

    with pytest.raises(sp.IOError, match="2 items for 1 ranks"):
        sp.save({"a": torch.ones(1)}, ckpt, Bad())
    with pytest.raises(sp.IOError, match="broadcast.*bytes"):
        sp.comm.Comm.broadcast(Bad(), b"x", 0)
