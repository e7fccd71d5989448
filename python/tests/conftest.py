"""Shared helpers of the shardpoint Python tests.

Run with the build's package on the path:
    PYTHONPATH=<build>/python /usr/bin/python3 -m pytest -q python/tests
or against an installed package (tests/install/pip.sh sets
SHARDPOINT_TEST_INSTALLED=<venv>, and the package must come from there).
"""

import os
import subprocess
import sys
import threading

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON = "/usr/bin/python3"  # Debian's interpreter: numpy, torch, mpi4py

try:
    import shardpoint  # noqa: F401
except ImportError as e:  # pragma: no cover
    raise ImportError(f"{e}: build the module (cmake --build <build> --target _shardpoint) and "
                      "set PYTHONPATH=<build>/python") from e

_INSTALLED = os.environ.get("SHARDPOINT_TEST_INSTALLED")
if _INSTALLED and not os.path.abspath(shardpoint.__file__).startswith(
        os.path.abspath(_INSTALLED) + os.sep):
    raise ImportError(f"shardpoint imported from {shardpoint.__file__}, not from the installed "
                      f"package in {_INSTALLED}")


def pytest_report_header(config):
    return f"shardpoint: {os.path.dirname(os.path.abspath(shardpoint.__file__))}"


def package_dir():
    """The directory holding the built `shardpoint` package (for subprocesses)."""
    import shardpoint
    return os.path.dirname(os.path.dirname(os.path.abspath(shardpoint.__file__)))


def native_module_dir():
    """Where the test-only module _shardpoint_testing lies (never in the package):
    $SHARDPOINT_TESTING_DIR (tests/install/pip.sh), else <build>/python_testing
    beside the build's package."""
    return os.environ.get("SHARDPOINT_TESTING_DIR") or os.path.join(
        os.path.dirname(package_dir()), "python_testing")


def native_module():
    """The test-only module _shardpoint_testing (python/tests/native/)."""
    where = native_module_dir()
    if where not in sys.path:
        sys.path.insert(0, where)
    try:
        import _shardpoint_testing
    except ImportError as e:
        pytest.fail(f"{e}: build it beside the package (cmake --build <build> --target "
                    f"_shardpoint_testing; SHARDPOINT_PYTHON_TESTING=ON) or set "
                    f"SHARDPOINT_TESTING_DIR (looked in {where})")
    return _shardpoint_testing


def free_port():
    """A TCP port on 127.0.0.1 nobody listens on now (for a gloo rendezvous)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torch_at_least(major, minor):
    """True when the imported torch is at least major.minor (checked before importing
    torch 2.x modules: torch 1.13's fsdp package fails to import on Python 3.11)."""
    import torch
    return tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (major, minor)


def torch_has(major, minor, *names):
    """True when the imported torch is at least major.minor and each dotted name
    imports: a module (``torch.distributed.checkpoint``) or a module's attribute
    (``torch.distributed.tensor.DTensor``). The torch 2.x tests skip otherwise."""
    import importlib
    if not torch_at_least(major, minor):
        return False
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            module, _, attr = name.rpartition(".")
            try:
                getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError):
                return False
    return True


def run_python(script, *args, timeout=300):
    """Runs `script` with this test's interpreter (its torch), the package on the
    path; returns stdout, and fails the test with the output on a non-zero exit."""
    r = subprocess.run([sys.executable, script, *map(str, args)], capture_output=True,
                       text=True, env=subprocess_env(), timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def subprocess_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [package_dir(), native_module_dir(), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["OMPI_MCA_btl_vader_single_copy_mechanism"] = "none"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_ranks(n, fn, comms=None, timeout=60):
    """Runs fn(rank, comm) on n threads, one per rank (shardpoint.thread_comms
    unless `comms` is given); returns the results; re-raises the first error."""
    import shardpoint as sp
    comms = comms if comms is not None else sp.thread_comms(n)
    results, errors = [None] * n, [None] * n

    def body(r):
        try:
            results[r] = fn(r, comms[r])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors[r] = e

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        if t.is_alive():
            pytest.fail(f"rank threads still running after {timeout} s (a hang)")
    for e in errors:
        if e is not None:
            raise e
    return results


@pytest.fixture
def ckpt(tmp_path):
    """A fresh checkpoint path (not created)."""
    return str(tmp_path / "ckpt")


sys.dont_write_bytecode = True
