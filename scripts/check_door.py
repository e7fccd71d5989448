#!/usr/bin/env python3
"""Fails when a file outside the door tests whether a directory holds
`manifest`, `.metadata` or `config.json` (issue 36: one door for every
checkpoint directory; docs/architecture.md "Load").

Usage: check_door.py [REPO_ROOT]     check the tree
       check_door.py --self-test     check that the checker catches violations

What a directory is (a shardpoint checkpoint, a PyTorch DCP directory, an HF
model) is decided in src/source/ (the door: DetectCheckpointKind,
HasManifest, the HF directory reader), and nowhere else. A *test* is a
presence check of one of the three names: a call that asks whether a path
exists or what it is (Storage::Exists / IsDirectory, std::filesystem::exists,
stat, access; Python's os.path.exists / isfile / isdir, Path.exists) on a path
built from the name (directly, or through a variable assigned from it earlier
in the file), or a comparison of a listed name with it (`name ==
"manifest"`). Not tests: writing the files (the writers create them: commit,
export, convert --to dcp), reading a file the door has already found, error
messages, comments.

Scanned: src/ (but src/source/), include/, tools/, python/src/,
python/shardpoint/. Tests are exempt (*_test.cc, tests/, python/tests/): they
check what the product wrote.
"""
import os
import re
import sys
import tempfile

SCANNED = ("src", "include", "tools", os.path.join("python", "src"),
           os.path.join("python", "shardpoint"))
DOOR = os.path.join("src", "source") + os.sep
CPP_EXT = (".h", ".hh", ".hpp", ".cc", ".cpp", ".cxx")

CPP_NAME = re.compile(r'"/?manifest"|\bkManifestName\b|"/?\.metadata"|\bkDcpMetadataName\b'
                      r'|"/?config\.json"|\bkHfConfigName\b')
CPP_PRESENCE = re.compile(r'\b(Exists|IsDirectory|IsRegularFile|exists|is_regular_file|'
                          r'is_directory|stat|lstat|access)\s*\(')
CPP_COMPARE = re.compile(r'(==|!=)\s*(' + CPP_NAME.pattern + r')|(' + CPP_NAME.pattern +
                         r')\s*(==|!=)')
CPP_ASSIGN = re.compile(r'\b([A-Za-z_]\w*)\s*=(?!=)')

PY_NAME = re.compile(r'''["']/?(manifest|\.metadata|config\.json)["']''')
PY_PRESENCE = re.compile(r'os\.path\.(exists|lexists|isfile|isdir)\s*\(|\.(exists|is_file|is_dir)'
                         r'\s*\(\s*\)|os\.(stat|access)\s*\(|\bin\s+os\.listdir\s*\(')
PY_COMPARE = re.compile(r'(==|!=)\s*' + PY_NAME.pattern + r'|' + PY_NAME.pattern + r'\s*(==|!=)')
PY_ASSIGN = re.compile(r'^\s*([A-Za-z_]\w*)\s*=[^=]')


def strip_cpp(text):
    """The code without comments (string contents kept: the names are strings)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            out.append("\n" * text.count("\n", i, n if j < 0 else j))
            i = n if j < 0 else j + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def statements_cpp(text):
    """(line, statement) pairs: the code split at ; { and }."""
    code = strip_cpp(text)
    line, start, out = 1, 1, []
    cur = []
    for c in code:
        if c in ";{}":
            out.append((start, "".join(cur)))
            cur, start = [], line
        else:
            if not cur and c.isspace():
                start = line + (c == "\n")
            else:
                cur.append(c)
        if c == "\n":
            line += 1
    out.append((start, "".join(cur)))
    return out


CPP = (CPP_NAME, CPP_PRESENCE, CPP_COMPARE, CPP_ASSIGN, "DetectCheckpointKind, HasManifest")
PY = (PY_NAME, PY_PRESENCE, PY_COMPARE, PY_ASSIGN, "_shardpoint.checkpoint_kind")


def statements_py(text):
    """(line, code) pairs: each line without its comment."""
    return [(n, raw.split("#", 1)[0]) for n, raw in enumerate(text.splitlines(), 1)]


def check(rel, statements, lang):
    """Errors for the presence tests and comparisons of the names in `statements`
    (a name reaches a statement directly or through a variable assigned from it)."""
    name, presence, compare, assign, door = lang
    errors, named = [], set()
    for line, st in statements:
        shown = " ".join(st.split())[:120]
        has_name = bool(name.search(st)) or any(
            re.search(r"\b" + re.escape(v) + r"\b", st) for v in named)
        if has_name and presence.search(st):
            errors.append(f"{rel}:{line}: tests for a checkpoint file outside src/source/ "
                          f"(use the door: {door}): {shown}")
        elif compare.search(st):
            errors.append(f"{rel}:{line}: compares a name with a checkpoint file outside "
                          f"src/source/: {shown}")
        if name.search(st):
            m = assign.search(st)
            if m:
                named.add(m.group(1))
    return errors


def exempt(rel):
    base = os.path.basename(rel)
    return (rel.startswith(DOOR) or base.endswith("_test.cc") or base.startswith("test_") or
            (os.sep + "tests" + os.sep) in (os.sep + rel))


def check_tree(root):
    errors = []
    for top in SCANNED:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                if exempt(rel):
                    continue
                if name.endswith(CPP_EXT):
                    with open(path, encoding="utf-8") as f:
                        errors += check(rel, statements_cpp(f.read()), CPP)
                elif name.endswith(".py"):
                    with open(path, encoding="utf-8") as f:
                        errors += check(rel, statements_py(f.read()), PY)
    return errors


def self_test():
    bad = {
        "src/checkpoint/a.cc":
            'Status F(Storage* s) {\n  SP_ASSIGN_OR_RETURN(bool e,\n'
            '      s->Exists(JoinPath(dir, kManifestName)));\n  return OkStatus();\n}\n',
        "src/checkpoint/b.cc":
            'void F() {\n  const std::string p = JoinPath(dir, ".metadata");\n'
            '  if (*s->Exists(p)) G();\n}\n',
        "tools/lib/c.cc": 'bool F() { return s->Exists(d + "/config.json").value(); }\n',
        "src/local/d.cc": 'void F() {\n  for (auto& n : names) if (n == kManifestName) G();\n}\n',
        "python/shardpoint/e.py": 'if os.path.exists(os.path.join(path, ".metadata")):\n    pass\n',
        "python/shardpoint/f.py": 'p = os.path.join(d, "manifest")\nif os.path.isfile(p):\n    pass\n',
        "include/shardpoint/g.h": 'inline bool F(const std::string& d) {\n'
                                  '  return std::filesystem::exists(d + "/" + "manifest");\n}\n',
    }
    good = {
        "src/source/kind.cc": 'void F() { s->Exists(JoinPath(dir, kManifestName)); }\n',
        "src/checkpoint/commit.cc":
            'void F() { s->CommitFile(JoinPath(w, kManifestName), bytes, true); }\n',
        "src/convert/to_hf.cc":
            'void F() { s->WriteStringToFile(JoinPath(d, "config.json"), c); }\n',
        "src/checkpoint/x.cc": '// s->Exists(JoinPath(dir, kManifestName))\n'
                               'void F() { Exists(other); return Err("no manifest"); }\n',
        "src/checkpoint/y_test.cc": 'TEST(A, B) { s->Exists(JoinPath(d, kManifestName)); }\n',
        "tests/checkpoint/z.cc": 'void F() { s->Exists(JoinPath(d, kManifestName)); }\n',
        "python/shardpoint/ok.py": 'if _C.checkpoint_kind(path) == "pytorch_dcp":  # .metadata\n'
                                   '    pass\n',
    }
    with tempfile.TemporaryDirectory() as root:
        for files in (bad, good):
            for rel, text in files.items():
                path = os.path.join(root, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
        errors = check_tree(root)
    flagged = {e.split(":", 1)[0] for e in errors}
    failures = [f"not caught: {rel}" for rel in bad if rel not in flagged]
    failures += [f"flagged wrongly: {e}" for e in errors if e.split(":", 1)[0] in good]
    for f in failures:
        print("check_door self-test:", f)
    if not failures:
        print(f"check_door self-test: OK ({len(bad)} violations caught, {len(good)} allowed)")
    return 1 if failures else 0


def main(argv):
    if len(argv) > 1 and argv[1] == "--self-test":
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    errors = check_tree(root)
    for e in errors:
        print(e)
    print("check_door: " + ("OK" if not errors else f"{len(errors)} violation(s)"))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
