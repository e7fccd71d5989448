"""bench/free_page_probe.py keeps working: a tiny run prints one line per pause with the
touch time, GB/s and system CPU. No timing is asserted (the figures:
bench/results/history.md#memory-this-vm-took-back)."""

import os
import re
import subprocess

from conftest import PYTHON, REPO, subprocess_env

PROBE = os.path.join(REPO, "bench", "free_page_probe.py")


def test_tiny_run_prints_a_line_per_pause():
    p = subprocess.run([PYTHON, PROBE, "--gib", "0.01", "--pauses", "0,0.1,0"],
                       env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout
    lines = [x for x in p.stdout.splitlines() if x.startswith("pause")]
    assert len(lines) == 3, p.stdout
    pattern = (r"pause +([0-9.]+) s: touch 0.01 GiB in [0-9.]+ s \([0-9.]+ GB/s, "
               r"system CPU [0-9.]+ s\)")
    assert [float(re.match(pattern, x).group(1)) for x in lines] == [0.0, 0.1, 0.0], p.stdout
