#!/usr/bin/env python3
"""Fails when an #include crosses the module layers in a direction that
scripts/layers.txt (documented in docs/architecture.md) does not allow.

Usage: check_layers.py [REPO_ROOT]     check the tree
       check_layers.py --self-test     check that the checker catches violations

Scanned: src/<module>/** (the module is the directory), include/ (public headers:
no src/ include at all), tools/** (module "tools"), python/src/** (module
"python"). Every public header belongs to a module (its `shardpoint/<name>.h:
<module>` line in layers.txt): code under src/<module>/ may include the public
headers of its own module and of the modules it may include, and a public
header only public headers it could include as its module; tools/ and
python/src/ (the edges) include any public header. Code under src/<module>/ declares its internals in namespace
shardpoint::internal_<module> (or nested `namespace internal_<module>` inside
shardpoint), never another module's; nothing anywhere says `using namespace`
of an internal namespace (using-declarations name what they use). Only `#include "src/<module>/..."` and `#include "tests/..."` lines
matter: product code (anything but *_test.cc) never includes tests/.
"""
import os
import re
import sys
import tempfile

NAMESPACE = re.compile(r'^\s*namespace\s+([A-Za-z0-9_:]+)\s*\{')
USING_NS = re.compile(r'^\s*using\s+namespace\s+(shardpoint::)?internal\w*\s*;')
INCLUDE = re.compile(r'^\s*#\s*include\s+"((src)/([A-Za-z0-9_]+)/[^"]*|tests/[^"]*)"')
PUBLIC = re.compile(r'^\s*#\s*include\s+"shardpoint/([A-Za-z0-9_]+\.h)"')
SOURCE_EXT = (".h", ".hh", ".hpp", ".cc", ".cpp", ".cxx")


def read_layers(path):
    """Returns ({module: modules it may include}, {public header name: its module})."""
    allowed, owners = {}, {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if ":" not in line:
                raise SystemExit(f"{path}:{n}: expected 'module: deps...' or "
                                 f"'shardpoint/<name>.h: module'")
            mod, deps = line.split(":", 1)
            mod = mod.strip()
            if mod.startswith("shardpoint/"):
                header = mod[len("shardpoint/"):]
                if header in owners:
                    raise SystemExit(f"{path}:{n}: public header '{mod}' listed twice")
                if len(deps.split()) != 1:
                    raise SystemExit(f"{path}:{n}: '{mod}' needs exactly one module")
                owners[header] = deps.strip()
                continue
            if mod in allowed:
                raise SystemExit(f"{path}:{n}: module '{mod}' listed twice")
            allowed[mod] = set(deps.split())
    return allowed, owners


def find_cycle(allowed):
    state = {}

    def visit(m, stack):
        state[m] = 1
        for d in sorted(allowed.get(m, ())):
            if state.get(d) == 1:
                return stack + [m, d]
            if d not in state:
                c = visit(d, stack + [m])
                if c:
                    return c
        state[m] = 2
        return None

    for m in sorted(allowed):
        if m not in state:
            c = visit(m, [])
            if c:
                return c
    return None


def files_under(root, rel):
    base = os.path.join(root, rel)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(SOURCE_EXT):
                yield os.path.relpath(os.path.join(dirpath, name), root)


def check(root):
    """Returns a list of violation strings (empty: the tree is clean)."""
    errors = []
    layers = os.path.join(root, "scripts", "layers.txt")
    allowed, owners = read_layers(layers)
    for header, mod in sorted(owners.items()):
        if mod not in allowed or mod in ("tools", "python"):
            errors.append(f"scripts/layers.txt: public header 'shardpoint/{header}' belongs to "
                          f"unknown module '{mod}'")
    include_dir = os.path.join(root, "include", "shardpoint")
    public = sorted(n for n in os.listdir(include_dir) if n.endswith(".h")) \
        if os.path.isdir(include_dir) else []
    for name in public:
        if name not in owners:
            errors.append(f"include/shardpoint/{name} is not in scripts/layers.txt (add its "
                          f"'shardpoint/{name}: <module>' line)")
    for mod, deps in sorted(allowed.items()):
        for d in sorted(deps):
            if d not in allowed:
                errors.append(f"scripts/layers.txt: '{mod}' may include unknown module '{d}'")
    cycle = find_cycle(allowed)
    if cycle:
        errors.append("scripts/layers.txt: cycle " + " -> ".join(cycle))

    scanned = []  # (file, module or None for public headers)
    src = os.path.join(root, "src")
    if os.path.isdir(src):
        for mod in sorted(os.listdir(src)):
            if not os.path.isdir(os.path.join(src, mod)):
                continue
            if mod not in allowed:
                errors.append(f"src/{mod}/ is not in scripts/layers.txt (add its line)")
                continue
            scanned += [(f, mod) for f in files_under(root, os.path.join("src", mod))]
    scanned += [(f, None) for f in files_under(root, "include")]
    scanned += [(f, "tools") for f in files_under(root, "tools")]
    scanned += [(f, "python") for f in files_under(root, os.path.join("python", "src"))]

    for path, mod in scanned:
        is_test = path.endswith("_test.cc")
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                u = USING_NS.match(line)
                if u:
                    errors.append(f"{path}:{n}: 'using namespace' of an internal namespace "
                                  f"(name what you use with using-declarations)")
                ns = NAMESPACE.match(line)
                if ns and mod not in (None, "tools", "python"):
                    parts = ns.group(1).split("::")
                    bad = [p for p in parts if p.startswith("internal") and p != "internal_" + mod]
                    if bad:
                        errors.append(f"{path}:{n}: namespace '{ns.group(1)}' in module '{mod}' "
                                      f"(its internals live in shardpoint::internal_{mod})")
                p = PUBLIC.match(line)
                if p:
                    errors += check_public_include(path, n, mod, p.group(1), allowed, owners,
                                                   public)
                    continue
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = m.group(1)
                where = f"{path}:{n}: #include \"{target}\""
                if target.startswith("tests/"):
                    if not is_test:
                        errors.append(f"{where}: product code includes test code")
                    continue
                dep = m.group(3)
                if mod is None:
                    errors.append(f"{where}: a public header includes an internal one")
                elif dep != mod and dep not in allowed.get(mod, ()):
                    errors.append(f"{where}: '{mod}' may not include '{dep}' "
                                  f"(scripts/layers.txt allows: "
                                  f"{' '.join(sorted(allowed.get(mod, ()))) or 'nothing'})")
    for rel in ("tests", "bench", "fuzz"):
        for path in files_under(root, rel):
            with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                for n, line in enumerate(f, 1):
                    if USING_NS.match(line):
                        errors.append(f"{path}:{n}: 'using namespace' of an internal namespace "
                                      f"(name what you use with using-declarations)")
    return errors


def check_public_include(path, n, mod, header, allowed, owners, public):
    """The errors of `path` (module `mod`; None for a public header) including
    public header `header` (`public`: the headers under include/shardpoint/)."""
    if mod in ("tools", "python"):
        return []  # the edges use the public API, all of it
    where = f"{path}:{n}: #include \"shardpoint/{header}\""
    dep = owners.get(header)
    if dep is None:  # a header on disk without its line is reported once, above
        return [] if header in public else [f"{where}: no such public header"]
    if mod is None:  # a public header: its own module's rule
        mod = owners.get(os.path.basename(path))
        if mod is None:
            return []  # reported as a header without a line
    if dep == mod or dep in allowed.get(mod, ()):
        return []
    return [f"{where}: '{mod}' may not include '{dep}' (the public header belongs to '{dep}'; "
            f"scripts/layers.txt allows: {' '.join(sorted(allowed.get(mod, ()))) or 'nothing'})"]


def self_test():
    """Builds small trees and checks each violation is caught, and a clean tree passes."""
    def tree(files, layers):
        d = tempfile.mkdtemp(prefix="check_layers_")
        files = dict(files)
        files["scripts/layers.txt"] = layers
        for rel, text in files.items():
            p = os.path.join(d, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w", encoding="utf-8") as f:
                f.write(text)
        return d

    layers = ("base:\ncomm: base\nplan: base\ncheckpoint: base comm plan\ntools: checkpoint\n"
              "python:\nshardpoint/x.h: base\nshardpoint/y.h: base\nshardpoint/comm.h: comm\n"
              "shardpoint/checkpoint.h: checkpoint\n")
    clean = {
        "src/base/a.h": "#pragma once\n",
        "src/plan/p.cc": '#include "src/base/a.h"\n#include "src/plan/p.h"\n'
                         'namespace shardpoint::internal_plan {\n}\n',
        "src/checkpoint/c.cc": '#include "src/plan/p.h"\n#include <vector>\n',
        "src/checkpoint/c_test.cc": '#include "tests/testing/x.h"\n',
        "include/shardpoint/x.h": '#include "shardpoint/y.h"\n',
        "include/shardpoint/y.h": "#pragma once\n",
        "include/shardpoint/comm.h": '#include "shardpoint/x.h"\n',
        "include/shardpoint/checkpoint.h": '#include "shardpoint/comm.h"\n',
        "src/checkpoint/d.cc": '#include "shardpoint/comm.h"\n#include "shardpoint/checkpoint.h"\n',
        "src/plan/q.h": '#include "shardpoint/x.h"\n',
        "python/src/b.cc": '#include "shardpoint/checkpoint.h"\n',
        "tools/t.cc": '#include "src/checkpoint/c.h"\n',
    }
    cases = [
        ("upward include", {"src/plan/q.cc": '#include "src/checkpoint/c.h"\n'},
         layers, "'plan' may not include 'checkpoint'"),
        ("public header includes src", {"include/shardpoint/z.h": '#include "src/base/a.h"\n'},
         layers, "a public header includes an internal one"),
        ("product includes tests", {"src/base/b.cc": '#include "tests/testing/x.h"\n'},
         layers, "product code includes test code"),
        ("python includes src", {"python/src/m.cc": '  #  include "src/plan/p.h"\n'},
         layers, "'python' may not include 'plan'"),
        ("other module's namespace", {"src/plan/r.cc": "namespace shardpoint::internal_base {\n"},
         layers, "namespace 'shardpoint::internal_base' in module 'plan'"),
        ("shared internal namespace", {"src/plan/s.cc": "namespace shardpoint {\nnamespace internal {\n"},
         layers, "namespace 'internal' in module 'plan'"),
        ("using namespace in a test", {"tests/plan/t_test.cc": "using namespace shardpoint::internal;\n"},
         layers, "'using namespace' of an internal namespace"),
        ("using namespace internal", {"tools/u.cc": "  using namespace shardpoint::internal_plan;\n"},
         layers, "'using namespace' of an internal namespace"),
        ("module missing from layers", {"src/dcp/d.cc": "\n"}, layers,
         "src/dcp/ is not in scripts/layers.txt"),
        ("public header of a module not below", {"src/plan/c.cc": '#include "shardpoint/comm.h"\n'},
         layers, "'plan' may not include 'comm' (the public header belongs to 'comm'"),
        ("public header includes one above it",
         {"include/shardpoint/y.h": '#include "shardpoint/checkpoint.h"\n'}, layers,
         "'base' may not include 'checkpoint'"),
        ("public header missing from layers", {"include/shardpoint/new.h": "#pragma once\n"},
         layers, "include/shardpoint/new.h is not in scripts/layers.txt"),
        ("include of an unknown public header", {"src/base/e.cc": '#include "shardpoint/gone.h"\n'},
         layers, "no such public header"),
    ]
    failures = []
    errs = check(tree(clean, layers))
    if errs:
        failures.append(f"clean tree reported: {errs}")
    for name, extra, lay, want in cases:
        files = dict(clean)
        files.update(extra)
        errs = check(tree(files, lay))
        if not any(want in e for e in errs):
            failures.append(f"{name}: expected an error containing {want!r}, got {errs}")
    errs = check(tree(clean, layers.replace("base:\n", "base: plan\n", 1)))
    if not any("cycle" in e for e in errs):
        failures.append(f"cycle: not reported, got {errs}")
    for f in failures:
        print("SELF-TEST FAILED:", f)
    if not failures:
        print("check_layers self-test: OK")
    return 1 if failures else 0


def main(argv):
    if len(argv) > 1 and argv[1] == "--self-test":
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    errors = check(os.path.abspath(root))
    for e in errors:
        print(e)
    if errors:
        print(f"check_layers: {len(errors)} violation(s); the allowed directions are in "
              f"scripts/layers.txt and docs/architecture.md")
        return 1
    print("check_layers: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
