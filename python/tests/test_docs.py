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


def _slugs(path):
    """GitHub's anchors of a markdown file's headings."""
    with open(path) as f:
        heads = [line.lstrip("#").strip() for line in f if line.startswith("#")]
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


PERF = os.path.join(REPO, "docs", "performance.md")
HISTORY = os.path.join(REPO, "bench", "results", "history.md")
HASH = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
TIME = re.compile(r"\b\d{1,2}:\d{2}\b|\b20\d\d-\d\d-\d\d\b|\bUTC\b")


def test_performance_page_is_a_reference():
    """docs/performance.md: at most ~300 lines, one table of figures beside the peers, and no
    commit hash or timestamp outside its "where these figures come from" table (the run-by-run
    record is bench/results/history.md)."""
    with open(PERF) as f:
        text = f.read()
    assert len(text.splitlines()) <= 300
    sections = re.findall(r"^## (.+)$", text, re.M)
    assert sections == ["What to expect", "How to run the benchmarks", "Tuning",
                        "Where these figures come from"]
    reference = text.split("\n## Where these figures come from")[0]
    assert not HASH.findall(reference), HASH.findall(reference)
    assert not TIME.findall(reference), TIME.findall(reference)
    assert len(re.findall(r"^\| GB/s", text, re.M)) == 1  # one table of figures
    assert "## Figures" in open(HISTORY).read()  # the record moved, whole


def test_tuning_table_names_every_option():
    """Every field of SaveOptions, LoadOptions, Resources and AsyncSaverOptions that changes
    speed or memory has a row in docs/performance.md's tuning table (the fields that change
    what a call accepts, or where files and logs go, are documented elsewhere)."""
    with open(PERF) as f:
        tuning = f.read().split("\n## Tuning")[1].split("\n## ")[0]
    rows = " ".join(line.split("|")[1] for line in tuning.splitlines() if line.startswith("| `"))
    not_tuning = {"allow_missing_keys", "allow_unexpected_keys", "allow_dtype_conversion",
                  "allow_shape_mismatch", "common_optional", "overwrite", "storage", "log"}
    fields = []
    for header, struct in [("checkpoint.h", "SaveOptions"), ("checkpoint.h", "LoadOptions"),
                           ("resources.h", "Resources"), ("async_save.h", "AsyncSaverOptions")]:
        with open(os.path.join(REPO, "include", "shardpoint", header)) as f:
            body = f.read().split(f"struct {struct} ")[1].split("\n};")[0]
        for line in body.splitlines():
            decl = line.split("//")[0].strip()
            if decl.endswith(";") and "(" not in decl.split(" = ")[0].rsplit(" ", 1)[-1]:
                fields.append(re.findall(r"(\w+)$", decl[:-1].split(" = ")[0])[0])
    assert {"read_slice_bytes", "io_threads", "pool", "plan_cache", "on_group_loaded",
            "huge_pages", "preallocate"} <= set(fields), fields
    missing = [f for f in fields if f not in not_tuning and f"`{f}" not in rows
               and f"{f}=" not in rows]
    assert not missing, missing


def test_links_into_the_performance_pages_resolve():
    """Every 'performance.md#<anchor>' and 'history.md#<anchor>' in the tree names a heading of
    docs/performance.md or bench/results/history.md."""
    targets = {"performance.md": _slugs(PERF), "history.md": _slugs(HISTORY)}
    link = re.compile(r"\b(performance|history)\.md#([\w-]+)")
    found = 0
    for top in ["README.md", "docs", "include", "src", "bench", "python", "scripts", "tools",
                "tests"]:
        base = os.path.join(REPO, top)
        paths = [base] if os.path.isfile(base) else [
            os.path.join(d, n) for d, _, names in os.walk(base) for n in names]
        for path in paths:
            if not path.endswith((".md", ".h", ".cc", ".py", ".sh", ".txt")):
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                for page, anchor in link.findall(f.read()):
                    found += 1
                    assert anchor in targets[page + ".md"], (path, page, anchor)
    assert found >= 10
