"""Errors: one Python exception class per C++ status code, carrying the C++ message."""

import os

import pytest
import torch

import shardpoint as sp
from conftest import run_ranks


def test_exception_hierarchy():
    assert issubclass(sp.InvalidArgumentError, sp.Error)
    assert issubclass(sp.InvalidArgumentError, ValueError)
    assert issubclass(sp.NotFoundError, FileNotFoundError)
    assert issubclass(sp.NotFoundError, LookupError)
    assert issubclass(sp.IOFailureError, OSError)
    assert issubclass(sp.PermissionDeniedError, PermissionError)
    assert issubclass(sp.PermissionDeniedError, sp.IOFailureError)
    assert issubclass(sp.IsDirectoryError, IsADirectoryError)
    assert issubclass(sp.NotDirectoryError, NotADirectoryError)
    assert issubclass(sp.FailedPreconditionError, RuntimeError)
    assert issubclass(sp.InternalError, RuntimeError)
    assert issubclass(sp.DeadlineExceededError, TimeoutError)
    assert issubclass(sp.DataLossError, sp.Error)
    assert issubclass(sp.DataLossError, OSError)
    assert issubclass(sp.PickleNotAllowedError, ValueError)
    codes = {c.code for c in (sp.InvalidArgumentError, sp.NotFoundError, sp.IOFailureError,
                              sp.DataLossError, sp.FailedPreconditionError, sp.InternalError,
                              sp.DeadlineExceededError)}
    assert codes == {"InvalidArgument", "NotFound", "IOError", "DataLoss", "FailedPrecondition",
                     "Internal", "DeadlineExceeded"}
    assert sp.InvalidArgumentError.__module__ == "shardpoint"
    # the message is the C++ message: OSError's "[Errno n]" prefix is not added
    assert str(sp.NotFoundError("x")) == "x"


def test_no_public_name_shadows_a_builtin():
    import builtins
    assert not set(sp.__all__) & set(dir(builtins))
    with pytest.warns(DeprecationWarning, match="IOFailureError"):
        assert sp.IOError is sp.IOFailureError
    assert "IOError" not in sp.__all__


def test_not_found(ckpt):
    with pytest.raises(FileNotFoundError) as e:  # a wrong path
        sp.load({"a": torch.zeros(1)}, ckpt)
    assert type(e.value) is sp.NotFoundError
    assert str(e.value) == (f"rank 0: no checkpoint at '{ckpt}': '{ckpt}/manifest' does not "
                            "exist (a save that did not commit leaves no manifest)")
    assert e.value.code == "NotFound"


def test_not_a_directory(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(NotADirectoryError, match=str(f)) as e:
        sp.save({"a": torch.ones(1)}, f / "ckpt")
    assert type(e.value) is sp.NotDirectoryError and isinstance(e.value, sp.IOFailureError)


def test_is_a_directory(ckpt):
    sp.save({"a": torch.ones(1)}, ckpt)
    data = os.path.join(ckpt, "data")
    name = sorted(os.listdir(data))[0]
    os.remove(os.path.join(data, name))
    os.mkdir(os.path.join(data, name))  # a directory where a data file belongs
    with pytest.raises(IsADirectoryError, match=name) as e:
        sp.load({"a": torch.zeros(1)}, ckpt)
    assert type(e.value) is sp.IsDirectoryError


_AS_NOBODY = """
import sys, torch, shardpoint as sp
try:
    sp.save({"a": torch.ones(1)}, sys.argv[1])
except PermissionError as e:
    print(type(e).__name__, isinstance(e, sp.IOFailureError), e)
"""


def test_permission_denied():
    # root ignores file modes: the save runs as user nobody in a directory it may not write
    import subprocess
    from conftest import PYTHON, subprocess_env
    import shutil
    import tempfile
    if os.geteuid() != 0:
        pytest.skip("needs root to run a process as nobody")
    probe = subprocess.run([PYTHON, "-c", "import shardpoint"], env=subprocess_env(),
                           capture_output=True, text=True, timeout=60, user=65534, group=65534)
    if probe.returncode != 0:  # e.g. installed into a private (0700) temporary venv
        pytest.skip(f"user nobody cannot import the package under test: {probe.stderr[-200:]}")
    base = tempfile.mkdtemp(prefix="sp_perm_", dir="/tmp")  # pytest's tmp_path is 0700
    request_cleanup = lambda: shutil.rmtree(base, ignore_errors=True)  # noqa: E731
    os.chmod(base, 0o755)
    root = os.path.join(base, "ro")
    os.mkdir(root, 0o555)
    try:
        r = subprocess.run([PYTHON, "-c", _AS_NOBODY, os.path.join(root, "ckpt")],
                           env=subprocess_env(), capture_output=True, text=True, timeout=60,
                           user=65534, group=65534)
    finally:
        request_cleanup()
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("PermissionDeniedError True "), r.stdout
    assert str(root) in r.stdout and "Permission denied" in r.stdout


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
    with pytest.raises(sp.IOFailureError, match=r"Python comm \w+\(\) raised ConnectionError: network "
                                         r"is down"):
        sp.save({"a": torch.ones(1)}, ckpt, BrokenComm())
    assert not os.path.exists(os.path.join(ckpt, "manifest"))


def test_python_comm_bad_return_value(ckpt):
    class BadAllGather(BrokenComm):
        def all_gather(self, data):
            return [data, data]  # two items for one rank

        def broadcast(self, data, root):
            return data  # correct: the save gets to its all_gather

        def gather(self, data, root):
            return [data]  # correct too (the plan cache's agreement gathers first)

    class BadBroadcast(BrokenComm):
        def broadcast(self, data, root):
            return "not bytes"

    with pytest.raises(sp.IOFailureError, match="2 items for 1 ranks"):
        sp.save({"a": torch.ones(1)}, ckpt, BadAllGather())
    with pytest.raises(sp.IOFailureError, match=r"broadcast\(\) failed: did not return bytes"):
        sp.save({"a": torch.ones(1)}, ckpt, BadBroadcast())
    # the save's first collective failed after rank 0 made its directory: removed again
    assert not os.path.exists(ckpt) or os.listdir(ckpt) == []
