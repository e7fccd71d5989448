"""The local tier through CheckpointManager options and TrainState: thread ranks
grouped into nodes, each node with a local root of its own; save on a
schedule, drain to the persistent root, lose nodes, resume under another split
bit for bit, and count where the bytes came from."""

import os
import shutil

import numpy as np
import torch

import shardpoint as sp
import shardpoint.torch as spt
from conftest import run_ranks

FULL = np.random.default_rng(5).standard_normal((8, 6)).astype(np.float32)


def node_root(tmp_path, node):
    return os.fspath(tmp_path / f"node{node}")


def manager(tmp_path, comm, per_node, **kw):
    node = comm.rank() // per_node
    return sp.CheckpointManager(tmp_path / "persistent", comm, local_root=node_root(tmp_path, node),
                                node_id=f"node{node}", **kw)


def save_job(tmp_path, iterations, flush, **kw):
    """4 ranks on 2 nodes save a row-sharded tensor (times the iteration)."""
    def rank(r, comm):
        steps = []
        with manager(tmp_path, comm, 2, **kw) as m:
            for it in iterations:
                shard = np.ascontiguousarray(FULL[2 * r:2 * r + 2] * it)
                steps.append(m.save({"w": sp.ShardedTensor("w", shard, (8, 6), (2 * r, 0))}, it,
                                    common={"it": it}))
            if flush:
                m.flush()
        return steps
    return run_ranks(4, rank)


def resume_job(tmp_path, **kw):
    """2 ranks (node 0 and the wiped node 1's ranks are gone: 1 rank per node)
    resume under a column split."""
    def rank(r, comm):
        with manager(tmp_path, comm, 1, **kw) as m:
            out = np.zeros((8, 3), np.float32)
            it, res = m.resume({"w": sp.ShardedTensor("w", out, (8, 6), (0, 3 * r))})
            return it, res, out
    return run_ranks(2, rank)


def test_schedule_drain_and_resume_from_either_tier(tmp_path):
    steps = save_job(tmp_path, [1, 2, 3, 4], flush=True, local_every=1, persistent_every=2)
    assert steps[0][1] == sp.TierStep(local=True, persistent=True, committed=None)
    assert steps[0][0].persistent is False
    # the drained iterations are ordinary committed checkpoints
    assert sorted(os.listdir(tmp_path / "persistent")) == ["iter_0000002", "iter_0000004",
                                                            "latest"]
    out = np.zeros((8, 6), np.float32)
    sp.load({"w": out}, tmp_path / "persistent" / "iter_0000004")
    np.testing.assert_array_equal(out, FULL * 4)
    save_job(tmp_path, [5], flush=False, local_every=1, persistent_every=2)  # then killed
    shutil.rmtree(node_root(tmp_path, 1))  # node 1's memory lost
    results = resume_job(tmp_path)
    for r, (it, res, out) in enumerate(results):
        assert it == 5
        np.testing.assert_array_equal(out, FULL[:, 3 * r:3 * r + 3] * 5)
        assert res.common == {"it": 5}
        assert res.bytes_persistent == 0
    assert results[1][1].bytes_local == 0 and results[1][1].bytes_peer > 0
    assert results[0][1].bytes_local > 0
    shutil.rmtree(node_root(tmp_path, 0))  # every node lost: the persistent 4
    for r, (it, res, out) in enumerate(resume_job(tmp_path)):
        assert it == 4
        np.testing.assert_array_equal(out, FULL[:, 3 * r:3 * r + 3] * 4)
        assert res.bytes_local == res.bytes_peer == 0 and res.bytes_persistent > 0


def test_save_async_with_a_local_tier_saves_what_it_was_given(tmp_path):
    """save_async through a tiered manager: the caller overwrites its tensor as
    soon as the call returns; the local checkpoints, the drained persistent one
    and a recovery after a lost node hold the values of the call."""
    def rank(r, comm):
        saver = sp.AsyncSaver()
        steps = []
        with manager(tmp_path, comm, 2, local_every=1, persistent_every=2) as m:
            shard = np.empty((2, 6), np.float32)
            for it in [1, 2, 3]:
                shard[:] = FULL[2 * r:2 * r + 2] * it
                steps.append(m.save_async({"w": sp.ShardedTensor("w", shard, (8, 6), (2 * r, 0))},
                                          it, saver=saver, common={"it": it}))
                shard[:] = -1  # staged: the save no longer reads it
            stats = steps[-1].handle.wait()
            committed = m.flush()
        return steps, stats, committed

    for steps, stats, committed in run_ranks(4, rank):
        assert [(s.local, s.persistent) for s in steps] == [(True, False), (True, True),
                                                            (True, False)]
        assert all(isinstance(s.handle, sp.SaveHandle) for s in steps)
        assert stats.bytes_written > 0
        assert committed == 2 or steps[2].committed == 2
    out = np.zeros((8, 6), np.float32)
    sp.load({"w": out}, tmp_path / "persistent" / "iter_0000002")
    np.testing.assert_array_equal(out, FULL * 2)
    shutil.rmtree(node_root(tmp_path, 1))  # node 1's memory lost
    for r, (it, res, out) in enumerate(resume_job(tmp_path)):
        assert it == 3 and res.common == {"it": 3}
        np.testing.assert_array_equal(out, FULL[:, 3 * r:3 * r + 3] * 3)
        assert res.bytes_persistent == 0


def test_nothing_to_resume_is_none(tmp_path):
    for it, res, _ in resume_job(tmp_path):
        assert it is None and res is None


class Net(torch.nn.Module):
    def __init__(self, seed):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)
        g = torch.Generator().manual_seed(seed)  # threads share torch's global RNG
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g))


def test_train_state_resumes_from_the_local_tier(tmp_path):
    def train(model, opt, steps):
        g = torch.Generator().manual_seed(1)
        for _ in range(steps):
            opt.zero_grad()
            model.fc(torch.randn(3, 8, generator=g)).square().sum().backward()
            opt.step()

    def rank(r, comm):
        model = Net(11)
        opt = torch.optim.AdamW(model.parameters())
        train(model, opt, 2)
        ts = spt.TrainState(model, opt, rng=False, comm=comm)
        with sp.CheckpointManager(tmp_path / "p", comm, local_root=node_root(tmp_path, r),
                                  node_id=f"n{r}", persistent_every=0) as m:
            m.save(ts.state_dict(init_state=False), 7)
        return {k: v.clone() for k, v in model.state_dict().items()}

    saved = run_ranks(2, rank)
    shutil.rmtree(node_root(tmp_path, 1))

    def load(r, comm):
        model = Net(99)
        opt = torch.optim.AdamW(model.parameters())
        ts = spt.TrainState(model, opt, rng=False, comm=comm)
        with sp.CheckpointManager(tmp_path / "p", comm, local_root=node_root(tmp_path, r),
                                  node_id=f"n{r}", persistent_every=0) as m:
            it, res = ts.resume(m)
        assert opt.state  # the optimizer state came back too
        return it, res, model.state_dict()

    for r, (it, res, sd) in enumerate(run_ranks(2, load)):
        assert it == 7
        assert res.bytes_persistent == 0
        for k, v in sd.items():
            assert torch.equal(v, saved[r][k]), k
    assert not os.path.exists(tmp_path / "p" / "iter_0000007")
