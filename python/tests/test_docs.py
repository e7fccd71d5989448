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
    """docs/migrating.md: each '## name (N lines)' snippet has N non-blank lines, and the
    table quotes the same N."""
    with open(os.path.join(REPO, "docs", "migrating.md")) as f:
        text = f.read()
    sections = re.findall(r"^## (.+?) \((\d+) lines\)\n(.*?)```python\n(.*?)```", text, re.S | re.M)
    assert len(sections) == 4
    table = text.split("\n## ")[0]
    for name, n, _, code in sections:
        lines = [line for line in code.splitlines() if line.strip()]
        assert len(lines) == int(n), (name, len(lines))
        assert f"| {n} lines" in table, name
