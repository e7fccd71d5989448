"""The Comm conformance suite on the Comms Python users hand to shardpoint.

The same test bodies as on the C++ single, thread and MPI comms
(tests/comm/comm_conformance.h: all-gather, gather, broadcast, all-to-all,
agreement, large and empty payloads, bad arguments), run through the test-only
module _shardpoint_testing (python/tests/native/) on the torch.distributed
adapter over gloo and on the mpi4py adapter under mpirun, each at 3 and at 2
processes (one launch of 3: workers/conformance_worker.py), and on a Comm
written in Python. A failing case is reported by name, rank and group size; a
hung one by the case it hung in.
"""

import json
import os
import re
import shutil
import signal
import subprocess

import pytest

import shardpoint as sp
from conftest import PYTHON, native_module, run_ranks, subprocess_env
from test_comm import PyThreadComm, PyThreadGroup

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers",
                      "conformance_worker.py")
LARGE = "CommConformance.LargePayloads"  # 64 MiB: run at 2 processes only (seconds)
TIMEOUT = 180
RUN_LINE = re.compile(r"^(== \d+ ranks)$|\[ RUN      \] Python/CommConformance\.(\w+)/Python",
                      re.M)


@pytest.fixture(scope="module")
def cases():
    """The case names each group size runs (the worker's CASES)."""
    names = native_module().comm_conformance_cases()
    assert len(names) >= 10 and LARGE in names, names
    return {3: [n for n in names if n != LARGE], 2: names}


def check(results_by_size, cases):
    """Fails naming every failing case (with its group size, rank and messages),
    every rank that did not report and every case a rank did not run."""
    problems, failing = [], set()
    for size, want in sorted(cases.items()):
        for rank in range(size):
            results = results_by_size.get(size, {}).get(rank)
            if results is None:
                problems.append(f"{size} ranks, rank {rank}: no results")
                continue
            ran = [name for name, _, _ in results]
            if ran != want:
                problems.append(f"{size} ranks, rank {rank} ran {ran}, expected {want}")
            for name, ok, failures in results:
                if not ok:
                    failing.add(f"{name} ({size} ranks)")
                    problems.append(f"{size} ranks, rank {rank}: {name} FAILED\n{failures}")
    assert not problems, f"failing cases: {sorted(failing)}\n" + "\n".join(problems)


def read_results(where):
    results = {}
    for size in (2, 3):
        for rank in range(size):
            path = where / f"np{size}_rank{rank}.json"
            if path.exists():
                results.setdefault(size, {})[rank] = [tuple(r) for r in
                                                      json.loads(path.read_text())]
    return results


def hung_in(output):
    """Where a worker's GoogleTest output stopped: "<N> ranks, CommConformance.<case>"."""
    where, case = "before the first run", "no case started"
    for run, name in RUN_LINE.findall(output):
        if run:
            where, case = run[3:], "no case started"
        else:
            case = f"CommConformance.{name}"
    return f"{where}, {case}"


def test_torch_distributed_gloo(tmp_path, cases):
    procs = [subprocess.Popen([PYTHON, WORKER, "torch", str(tmp_path), str(r), str(tmp_path)],
                              env=subprocess_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
             for r in range(3)]
    try:
        outs = [p.communicate(timeout=TIMEOUT)[0] for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
        outs = [p.communicate()[0] for p in procs]
        pytest.fail("; ".join(f"rank {r} hung ({hung_in(out)})" for r, out in enumerate(outs))
                    + "\n" + outs[0][-3000:])
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {r} exited with {p.returncode}:\n{out[-3000:]}"
    check(read_results(tmp_path), cases)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun")
def test_mpi4py(tmp_path, cases):
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--tag-output", "-np", "3",
           PYTHON, WORKER, "mpi", str(tmp_path)]
    p = subprocess.Popen(cmd, env=subprocess_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out = p.communicate(timeout=TIMEOUT)[0]
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out = p.communicate()[0]
        per_rank = {}  # --tag-output prefixes each line with [job,rank]<stdout>:
        for line in out.splitlines():
            m = re.match(r"\[\d+,(\d+)\]<std\w+>:(.*)", line)
            if m:
                per_rank.setdefault(int(m.group(1)), []).append(m.group(2))
        pytest.fail("; ".join(f"rank {r} hung ({hung_in(chr(10).join(lines))})"
                              for r, lines in sorted(per_rank.items())) + "\n" + out[-3000:])
    assert p.returncode == 0, out[-3000:]
    check(read_results(tmp_path), cases)


def test_comm_written_in_python(cases):
    # Ranks as Python threads, without all_to_all (Comm's all-gather version runs).
    group = PyThreadGroup(3)
    comms = [PyThreadComm(group, r) for r in range(3)]
    results = native_module().run_comm_conformance(comms, "*-LargePayloads")
    check({3: dict.fromkeys(range(3), results)}, {3: cases[3]})  # one run hosts all 3


class PyThreadBufferComm(PyThreadComm):
    """A Python comm with all_to_all_buffer (one buffer and its counts each way)."""

    def all_to_all_buffer(self, send, counts):
        self.g.calls.append("all_to_all_buffer")
        data, at, mine = bytes(send), 0, []
        for c in counts:
            mine.append(data[at:at + c])
            at += c
        assert at == len(data), (at, len(data))
        every = self._exchange(mine)
        got = [every[r][self.r] for r in range(self.g.n)]
        return bytearray(b"".join(got)), [len(x) for x in got]


def test_comm_written_in_python_with_all_to_all_buffer(cases):
    group = PyThreadGroup(3)
    comms = [PyThreadBufferComm(group, r) for r in range(3)]
    results = native_module().run_comm_conformance(comms, "*-LargePayloads")
    check({3: dict.fromkeys(range(3), results)}, {3: cases[3]})
    assert "all_to_all_buffer" in group.calls


class WrongRootBroadcast(PyThreadComm):
    """Broadcasts rank 0's data whatever the root."""

    def broadcast(self, data, root):
        return self._exchange(data)[0]


def test_a_failing_case_is_reported_by_name():
    group = PyThreadGroup(2)
    comms = [WrongRootBroadcast(group, r) for r in range(2)]
    results = native_module().run_comm_conformance(comms, "AllGather:Broadcast")
    assert [(name, ok) for name, ok, _ in results] == [
        ("CommConformance.AllGather", True), ("CommConformance.Broadcast", False)]
    assert "root 1" in results[1][2], results[1][2]
    with pytest.raises(AssertionError,
                       match=r"failing cases: \['CommConformance.Broadcast \(2 ranks\)'\]"):
        check({2: {0: results, 1: results}},
              {2: ["CommConformance.AllGather", "CommConformance.Broadcast"]})
    # The group is still usable afterwards.
    assert run_ranks(2, lambda r, c: c.all_gather(b"%d" % r), comms=comms) == [[b"0", b"1"]] * 2
