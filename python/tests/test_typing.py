"""The package is typed: py.typed, a stub of the extension that matches the bindings,
and annotations on every public function and method."""

import inspect
import os
import subprocess

import shardpoint as sp
from conftest import PYTHON, REPO, package_dir, subprocess_env


def test_py_typed_and_stub_ship_with_the_package():
    pkg = os.path.join(package_dir(), "shardpoint")
    assert os.path.isfile(os.path.join(pkg, "py.typed"))
    assert os.path.isfile(os.path.join(pkg, "_shardpoint.pyi"))


def test_stub_matches_the_bindings():
    r = subprocess.run([PYTHON, os.path.join(REPO, "scripts", "gen_stub.py"), "--check"],
                       env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, ("python/shardpoint/_shardpoint.pyi is stale; regenerate it with "
                               "scripts/gen_stub.py:\n" + r.stdout + r.stderr)


_ELSEWHERE: set = set()


def _public_callables():
    import shardpoint.torch as spt
    names = [(n, getattr(sp, n)) for n in sp.__all__ if n not in _ELSEWHERE]
    names += [(f"torch.{n}", getattr(spt, n)) for n in spt.__all__]
    for name, obj in names:
        if inspect.isfunction(obj):
            yield name, obj
        elif inspect.isclass(obj) and obj.__module__.startswith("shardpoint.") and \
                not issubclass(obj, BaseException):
            for attr, fn in vars(obj).items():
                if attr.startswith("_") and attr != "__init__":
                    continue
                fn = fn.fget if isinstance(fn, property) else fn
                fn = fn.__func__ if isinstance(fn, (classmethod, staticmethod)) else fn
                if inspect.isfunction(fn):
                    yield f"{name}.{attr}", fn


def test_every_public_function_is_annotated():
    missing = []
    seen = 0
    for name, fn in _public_callables():
        seen += 1
        sig = inspect.signature(fn)
        for p in sig.parameters.values():
            if p.name in ("self", "cls"):
                continue
            if p.annotation is inspect.Parameter.empty:
                missing.append(f"{name}({p.name})")
        if sig.return_annotation is inspect.Signature.empty:
            missing.append(f"{name} -> ?")
    assert seen > 40
    assert not missing, missing


_USER_SCRIPT = os.path.join(REPO, "python", "tests", "typed_user_script.py")


def test_user_script_calls_every_public_name():
    import shardpoint.torch as spt
    with open(_USER_SCRIPT) as f:
        text = f.read()
    unused = [n for n in sp.__all__ if f"sp.{n}" not in text]
    unused += [n for n in spt.__all__ if f"spt.{n}" not in text]
    assert not unused, f"typed_user_script.py does not use {unused}"


def test_mypy_is_clean_on_the_package_and_a_user_script(tmp_path):
    """Debian's mypy (scripts/setup.sh installs it) over the built package, its stub
    included, a user script that calls every public function as documented
    (state.extra["step"] among them) and the examples."""
    import shutil
    import tempfile
    mypy = shutil.which("mypy")
    assert mypy is not None, "mypy is not installed (scripts/setup.sh installs Debian's mypy)"
    cache = os.path.join(tempfile.gettempdir(), f"shardpoint-mypy-{os.getuid()}")
    env = dict(subprocess_env(), MYPYPATH=package_dir())
    # torch's own sources are not analysed (their types are Any here): that took
    # 40 s to minutes of CPU and checks torch, not shardpoint's types
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\n[mypy-torch.*]\nfollow_imports = skip\n")
    r = subprocess.run([mypy, "--config-file", str(config), "--python-executable", PYTHON,
                        "--cache-dir", cache,
                        os.path.join(package_dir(), "shardpoint"), _USER_SCRIPT,
                        os.path.join(REPO, "examples", "train_gpt.py"),
                        os.path.join(REPO, "examples", "train_tp.py")],
                       env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr


def test_stub_types_constructors_and_equality_as_python_does():
    with open(os.path.join(package_dir(), "shardpoint", "_shardpoint.pyi")) as f:
        stub = f.read()
    assert "def __init__(self, *args: Any, **kwargs: Any) -> None: ..." in stub
    assert "-> Any: ...\n" not in [line for line in stub.splitlines(True) if "__init__" in line]
    eqs = [line.strip() for line in stub.splitlines() if "def __eq__" in line]
    assert eqs and all(e == "def __eq__(self, other: object) -> bool: ..." for e in eqs), eqs
