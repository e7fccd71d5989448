"""The extension module keeps the C++ runtime it links to itself.

A toolchain may link libstdc++ into the module statically (the GPU machine's
does; so do portable-wheel toolchains). Exported, that copy's iostream and
locale symbols mix with the shared libstdc++ torch loads first, and on that
machine every error message an ostream formatted crashed the process. The
module is linked with --exclude-libs,ALL (python/CMakeLists.txt); CI's pip
stage builds the installed module with -static-libstdc++, so this runs
against such a module there."""

import re
import shutil
import subprocess

import pytest

import shardpoint as sp

# libstdc++'s stream and locale machinery: ostream, istream, ios_base, locale, facets
RUNTIME = re.compile(r"^_ZNS[oi]|^_ZNSt8ios_base|St6locale|codecvt|num_put|num_get|"
                     r"^_ZNSt5ctype|^_ZTV.*(locale|ios|ctype)")


@pytest.mark.skipif(shutil.which("nm") is None, reason="nm (binutils) is not installed")
def test_the_module_exports_no_iostream_or_locale_symbols():
    path = sp._shardpoint.__file__
    out = subprocess.run(["nm", "-D", "--defined-only", path], check=True, capture_output=True,
                         text=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    assert "PyInit__shardpoint" in names
    leaked = [n for n in names if RUNTIME.search(n)]
    assert not leaked, f"{path} exports {len(leaked)} C++ runtime symbols, e.g. {leaked[:5]}"
