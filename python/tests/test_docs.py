"""The examples of docs/python.md run as written (in order, in one namespace)."""

import os
import re
import sys
import types

from conftest import REPO


def test_docs_examples_run(tmp_path, monkeypatch):
    with open(os.path.join(REPO, "docs", "python.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    assert len(blocks) >= 6
    monkeypatch.chdir(tmp_path)  # the examples save under ckpt/
    module = types.ModuleType("docs_python")  # importable, so its classes can be pickled
    monkeypatch.setitem(sys.modules, module.__name__, module)
    for i, code in enumerate(blocks):
        exec(compile(code, f"docs/python.md block {i}", "exec"), module.__dict__)  # noqa: S102


def test_migrating_line_counts():
    """docs/migrating.md: each '## name (N lines)' snippet has N written-out lines (not
    blank, not a comment), no comment holds code (a call), and the table quotes the
    same N."""
    with open(os.path.join(REPO, "docs", "migrating.md")) as f:
        text = f.read()
    sections = re.findall(r"^## (.+?) \((\d+) lines\)\n(.*?)```python\n(.*?)```", text, re.S | re.M)
    assert len(sections) == 4
    table = text.split("\n## ")[0]
    for name, n, _, code in sections:
        lines = [line for line in code.splitlines()
                 if line.strip() and not line.strip().startswith("#")]
        assert len(lines) == int(n), (name, len(lines))
        comments = [line.split("#", 1)[1] for line in code.splitlines() if "#" in line]
        hidden = [c for c in comments if re.search(r"[\w.]+\(", c)]
        assert not hidden, (name, hidden)
        assert f"| {n} lines" in table, name


def test_migrating_dcp_write_back_needs_rng_false(tmp_path):
    """What docs/migrating.md says under 'Going back to DCP'."""
    import subprocess

    import torch

    import shardpoint.torch as spt
    from test_dcp import cli
    exe = cli()
    assert exe is not None, "no shardpoint CLI beside the package"
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    for rng in (True, False):
        src, out = tmp_path / f"rng_{rng}", tmp_path / f"dcp_{rng}"
        spt.TrainState(model, opt, rng=rng).save(src)
        r = subprocess.run([exe, "convert", "--to", "dcp", "--torch", "1.13", str(src),
                            str(out)], capture_output=True, text=True, timeout=60)
        if rng:
            assert r.returncode != 0 and "object 'rng' is sharded over [1]" in r.stderr, r
            assert not out.exists()
        else:
            assert r.returncode == 0, r.stdout + r.stderr
            assert (out / ".metadata").is_file()
