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


# CheckpointManager (python/shardpoint/_manager.py) is being reworked by another change
# (lock release); its annotations come with it.
_ELSEWHERE = {"CheckpointManager"}


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
