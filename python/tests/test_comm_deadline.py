"""Deadlines of the comms: a rank that died (SIGKILL) or hangs (SIGSTOP) in the middle of a
save or a load makes the other ranks raise DeadlineExceededError within the deadline, naming
the collective, instead of waiting forever. Real processes: torch.distributed (gloo) and
mpi4py under mpirun; threads for thread_comms."""

import os
import re
import shutil
import signal
import subprocess
import threading
import time

import pytest

import shardpoint as sp
from conftest import PYTHON, subprocess_env

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers",
                      "deadline_worker.py")


def test_thread_comms_deadline_names_the_ranks_that_did_not_arrive():
    comms = sp.thread_comms(3, deadline=0.3)
    got = {}

    def body(r):
        start = time.monotonic()
        try:
            comms[r].barrier()
        except sp.DeadlineExceededError as e:
            got[r] = (str(e), time.monotonic() - start)

    threads = [threading.Thread(target=body, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(got) == [0, 1], got
    for message, waited in got.values():
        assert "collective #1 (Barrier) did not complete within its deadline of 300 ms: " \
               "rank 2 did not arrive" in message, message
        assert 0.25 <= waited < 10, waited
    with pytest.raises(sp.DeadlineExceededError):  # broken for good, the late rank too
        comms[2].barrier()


def test_deadline_must_be_seconds_or_a_timedelta():
    with pytest.raises(sp.InvalidArgumentError, match="deadline"):
        sp.thread_comms(2, deadline="5")


def survivors(outs, world):
    """{rank: (seconds, exception class, message)} of the survivors' reports."""
    # mpirun forwards the ranks' output in chunks, so one rank's report may run into
    # another's line: the reports are found by their tags, not by lines.
    got = {}
    text = "\n".join(outs)
    if re.search(r"NOERROR \d+", text):
        raise AssertionError(f"a survivor's call succeeded:\n{text}")
    for m in re.finditer(r"SURVIVOR (\d+) ([\d.]+) (\w+) (.*?)(?=SURVIVOR |NOERROR |\n|$)",
                         text):
        got[int(m.group(1))] = (float(m.group(2)), m.group(3), m.group(4))
    assert sorted(got) == list(range(world - 1)), text
    return got


def run_torch(tmp_path, mode, how, deadline, world=3):
    """`world` gloo processes; the last one dies or stops mid-`mode`. Returns the survivors'
    reports once they have exited (the stopped victim is then killed)."""
    init = tmp_path / "init"
    procs = [subprocess.Popen([PYTHON, WORKER, "torch", mode, how, str(tmp_path),
                               str(deadline), str(r), str(world), str(init)],
                              env=subprocess_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(world)]
    try:
        outs = [p.communicate(timeout=deadline + 60)[0] for p in procs[:-1]]
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        procs[-1].communicate()
    assert procs[-1].returncode == -signal.SIGKILL
    return survivors(outs, world)


@pytest.mark.parametrize("mode", ["save", "load"])
def test_torch_rank_killed_mid_call_fails_the_others_at_once(tmp_path, mode):
    # A killed process closes its gloo connections: the others need not wait
    # for the 60 s deadline.
    for rank, (seconds, cls, message) in run_torch(tmp_path, mode, "kill", 60).items():
        assert cls == "DeadlineExceededError", (rank, message)
        assert "a peer rank's process is gone" in message, message
        assert "did not complete within its deadline of 60 s" in message, message
        assert re.search(r"rank 2 \(pid \d+ on this host\) exited", message), message
        assert seconds < 30, (rank, seconds)


@pytest.mark.parametrize("mode", ["save", "load"])
def test_torch_rank_hung_mid_call_fails_the_others_at_the_deadline(tmp_path, mode):
    for rank, (seconds, cls, message) in run_torch(tmp_path, mode, "stop", 3).items():
        assert cls == "DeadlineExceededError", (rank, message)
        assert "did not complete within its deadline of 3 s" in message, message
        assert re.search(r"rank 2 \(pid \d+ on this host\) is stopped", message), message
        assert 2.5 <= seconds < 30, (rank, seconds, message)


def mpirun_version():
    if shutil.which("mpirun") is None:
        return ""
    return subprocess.run(["mpirun", "--version"], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True).stdout


@pytest.mark.skipif("Open MPI" not in mpirun_version(),
                    reason="needs Open MPI's mpirun (--enable-recovery)")
@pytest.mark.parametrize("mode", ["save", "load"])
def test_mpi4py_rank_killed_mid_call_fails_the_others_at_the_deadline(tmp_path, mode):
    # Open MPI's mpirun would end the whole job at the kill; --enable-recovery
    # lets the survivors run on into their deadline.
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--enable-recovery", "-np", "3",
           PYTHON, WORKER, "mpi", mode, "kill", str(tmp_path), "3"]
    p = subprocess.run(cmd, env=subprocess_env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    for rank, (seconds, cls, message) in survivors([p.stdout], 3).items():
        assert cls == "DeadlineExceededError", (rank, message)
        assert "did not complete within its deadline of 3 s" in message, message
        assert re.search(r"rank 2 \(pid \d+ on this host\) exited", message), message
        assert 2.5 <= seconds < 30, (rank, seconds, message)
