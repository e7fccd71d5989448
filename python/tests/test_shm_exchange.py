"""A load over torch.distributed reads each needed byte once (issue 38): with
sp.load's defaults, a load cut along another dim exchanges blocks, those
between ranks of one node through shared memory (src/comm/shm_exchange.h),
not through gloo; a load whose ranks read no more than they need alone
(TP=2 x DP=2) does not exchange blocks (src/checkpoint/exchange_choice.h)."""

import os
import subprocess

from conftest import PYTHON, subprocess_env

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers",
                      "shm_load_worker.py")


def test_gloo_other_dim_load_reads_each_needed_byte_once(tmp_path):
    world = 4
    init = tmp_path / "init"
    procs = [subprocess.Popen([PYTHON, WORKER, str(tmp_path), str(r), str(world), str(init)],
                              env=subprocess_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(world)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and f"ok {r}" in out, out
    words = next(line for line in outs[0].splitlines() if line.startswith("read ")).split()
    read, needed, largest = int(words[1]), int(words[3]), int(words[5])
    # Every rank needs a strip of every 1 MiB block: reading alone, each
    # would read all of them (4.00 per needed byte).
    assert read <= 1.05 * needed, (read, needed)
    # The blocks did not cross gloo: its payloads are status bytes and places.
    assert largest < 1024, largest
    # TP=2 x DP=2: reading alone reads each needed byte once (the page cache
    # shares the replicas' blocks), so there is no block exchange: the one
    # all_to_all per rank is the request check's (src/checkpoint/requests.h).
    words = next(line for line in outs[0].splitlines() if line.startswith("tp_dp_read ")).split()
    read, needed, exchanges = int(words[1]), int(words[3]), int(words[5])
    assert read <= 1.05 * needed, (read, needed)
    assert exchanges == world, exchanges
    # Nothing is left in /dev/shm.
    assert not [f for f in os.listdir("/dev/shm") if f.startswith("shardpoint-")]
