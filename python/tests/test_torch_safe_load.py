"""shardpoint.torch loads that fail leave the job as it was; non-strict loads into a
changed model; saves that change nothing (a frozen layer keeps no optimizer state).

Every test trains for real (seeded) and compares bit for bit."""

import copy
import os

import pytest
import torch

import shardpoint as sp
import shardpoint.torch as spt
from conftest import run_ranks
from test_torch_state import make, same, train


def snapshot(model, opt):
    """Every model tensor and the optimizer's whole state_dict, copied."""
    return ({n: t.detach().clone() for n, t in model.state_dict().items()},
            copy.deepcopy(opt.state_dict()))


def assert_unchanged(model, opt, snap):
    tensors, opt_sd = snap
    now = model.state_dict()
    assert sorted(now) == sorted(tensors)
    for n, t in tensors.items():
        assert same(now[n], t), n
    cur = opt.state_dict()
    assert sorted(cur["state"]) == sorted(opt_sd["state"])  # no state created or dropped
    for i, st in opt_sd["state"].items():
        assert sorted(cur["state"][i]) == sorted(st), i
        for k, v in st.items():
            assert same(cur["state"][i][k], v) if torch.is_tensor(v) else cur["state"][i][k] == v
    assert cur["param_groups"] == opt_sd["param_groups"]


def trained(steps=2, **kw):
    torch.manual_seed(5)
    model, opt, s = make(**kw)
    train(model, opt, s, steps)
    return model, opt, s


@pytest.mark.parametrize("fresh", [False, True], ids=["trained", "fresh"])
def test_param_group_mismatch_changes_nothing(ckpt, fresh):
    model, opt, s = trained()
    spt.TrainState(model, opt, schedulers=s, rng=False).save(ckpt)
    model2, _, _ = make(seed=3)
    opt2 = torch.optim.AdamW(model2.parameters(), lr=1e-2)  # one group instead of two
    if not fresh:
        train(model2, opt2, torch.optim.lr_scheduler.StepLR(opt2, 1), 1)
    snap = snapshot(model2, opt2)
    with pytest.raises(sp.InvalidArgumentError, match=r"rank 0: optim.param_groups: stored "
                                                      r"group 0 holds .*nothing was loaded"):
        spt.TrainState(model2, opt2, rng=False).load(ckpt)
    assert_unchanged(model2, opt2, snap)


def test_scheduler_mismatch_changes_nothing(ckpt):
    model, opt, s = trained()
    spt.TrainState(model, opt, schedulers=s, rng=False).save(ckpt)
    model2, opt2, _ = trained(steps=1)
    s2 = torch.optim.lr_scheduler.StepLR(opt2, 3)  # another kind of scheduler
    snap = snapshot(model2, opt2)
    with pytest.raises(sp.InvalidArgumentError, match=r"'scheduler': the stored state and "
                                                      r"StepLR's differ"):
        spt.TrainState(model2, opt2, schedulers=s2, rng=False).load(ckpt)
    assert_unchanged(model2, opt2, snap)
    assert s2.last_epoch == 0


@pytest.mark.parametrize("change", ["shape", "dtype"])
def test_shape_or_dtype_mismatch_changes_nothing(ckpt, change):
    model, opt, s = trained()
    spt.TrainState(model, opt, rng=False).save(ckpt)
    model2, opt2, _ = make(seed=4)
    if change == "shape":
        model2.fc1 = torch.nn.Linear(16, 32)  # stored [64, 16]
    else:
        model2.fc1 = torch.nn.Linear(16, 64).double()  # stored float32
    opt2 = torch.optim.AdamW(model2.parameters())
    snap = snapshot(model2, opt2)
    with pytest.raises(sp.InvalidArgumentError, match="fc1"):
        spt.TrainState(model2, opt2, rng=False).load(ckpt, strict=False)
    assert_unchanged(model2, opt2, snap)
    assert not opt2.state  # the template's state is gone again


def test_one_rank_failing_fails_every_rank_and_changes_nothing(ckpt):
    """Rank 1 alone builds another scheduler: both ranks raise, naming rank 1,
    before any byte lands on either."""
    model, opt, s = trained()  # replicated: both ranks save the same objects

    def save(r, comm):
        spt.TrainState(model, opt, schedulers=s, rng=False, comm=comm).save(ckpt)

    run_ranks(2, save)
    jobs = [make(seed=9) for _ in range(2)]
    m1, o1, _ = jobs[1]
    jobs[1] = (m1, o1, torch.optim.lr_scheduler.OneCycleLR(o1, max_lr=2e-2, total_steps=20,
                                                           anneal_strategy="linear"))
    snaps = [snapshot(m, o) for m, o, _ in jobs]

    def load(r, comm):
        model, opt, s = jobs[r]
        with pytest.raises(sp.InvalidArgumentError) as e:
            spt.TrainState(model, opt, schedulers=s, rng=False, comm=comm).load(ckpt)
        return str(e.value)

    msgs = run_ranks(2, load)
    for msg in msgs:
        assert msg.startswith("rank 1: 'scheduler.anneal_func' was the function"), msg
    for (m, o, _), snap in zip(jobs, snaps):
        assert_unchanged(m, o, snap)


class Renamed(torch.nn.Module):
    """TinyGPT's parameters, but `ln` renamed to `norm`, `pos` gone, and a new `gate`."""

    def __init__(self, src):
        super().__init__()
        self.tok, self.fc1, self.fc2, self.head = src.tok, src.fc1, src.fc2, src.head
        self.norm = torch.nn.LayerNorm(src.ln.normalized_shape)
        self.gate = torch.nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))


def test_non_strict_load_into_a_changed_model(ckpt):
    model, opt, s = trained(steps=3)
    spt.TrainState(model, opt, schedulers=s, rng=False).save(ckpt)
    base, _, _ = make(seed=11)
    model2 = Renamed(base)
    decay = [p for n, p in model2.named_parameters() if n.endswith("weight") and "gate" not in n]
    no_decay = [p for n, p in model2.named_parameters() if not n.endswith("weight")
                and "gate" not in n]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0},
              {"params": list(model2.gate.parameters()), "weight_decay": 0.5}]
    opt2 = torch.optim.AdamW(groups, lr=1.0)
    res = spt.TrainState(model2, opt2, rng=False).load(ckpt, strict=False)

    old = dict(model.named_parameters())
    new = dict(model2.named_parameters())
    for n in ("tok.weight", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"):
        assert same(new[n], old[n]), n
        for k, v in opt.state[old[n]].items():
            assert same(opt2.state[new[n]][k], v), (n, k)
    for n in ("norm.weight", "norm.bias", "gate.weight", "gate.bias"):
        assert new[n] not in opt2.state, n  # the checkpoint lacks them: fresh (no state)
    # groups matched by the names they share: the stored hyperparameters
    assert [g["lr"] for g in opt2.param_groups[:2]] == [g["lr"] for g in opt.param_groups]
    assert opt2.param_groups[2]["lr"] == 1.0 and opt2.param_groups[2]["weight_decay"] == 0.5
    assert "model.norm.weight" in res.missing_keys and "model.gate.bias" in res.missing_keys
    assert "optim.param_groups[2]" in res.missing_keys
    assert {"model.ln.weight", "model.pos.weight", "optim.state.ln.weight.exp_avg",
            "optim.state.pos.weight.exp_avg_sq", "optim.state.pos.weight.step"} <= set(
                res.unexpected_keys)
    assert res.missing_keys == sorted(res.missing_keys)
    # and it trains on
    for p in model2.parameters():
        p.grad = torch.ones_like(p)
    opt2.step()
    assert int(opt2.state[new["gate.weight"]]["step"]) == 1


def test_non_strict_stored_group_matching_nothing_is_reported(ckpt):
    model, opt, s = trained()
    spt.TrainState(model, opt, rng=False).save(ckpt)
    model2, _, _ = make(seed=2)
    only_weights = [p for n, p in model2.named_parameters() if n.endswith("weight")]
    for n, p in model2.named_parameters():
        p.requires_grad_(n.endswith("weight"))
    opt2 = torch.optim.AdamW(only_weights, lr=1.0)
    res = spt.TrainState(model2, opt2, rng=False).load(ckpt, allow_unexpected_keys=True)
    assert "optim.param_groups[1]" in res.unexpected_keys  # the biases' group
    assert "optim.state.fc1.bias.exp_avg" in res.unexpected_keys  # their state
    assert not res.missing_keys
    assert opt2.param_groups[0]["weight_decay"] == 0.1


# ---------------------------------------------------------------------------
# Saving changes nothing: parameters without state are saved without it.

def frozen_job(seed):
    torch.manual_seed(seed)
    model, _, _ = make(seed=seed)
    model.fc1.weight.requires_grad_(False)  # a frozen layer, still in the optimizer
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return model, opt


def test_save_creates_no_state_for_a_frozen_layer(ckpt):
    model, opt = frozen_job(1)
    s = torch.optim.lr_scheduler.StepLR(opt, 1)
    train(model, opt, s, 2)
    assert model.fc1.weight not in opt.state
    before = snapshot(model, opt)
    spt.TrainState(model, opt, rng=False).save(ckpt)
    assert_unchanged(model, opt, before)  # the save created no state
    keys = sp.metadata(ckpt).tensors
    assert "optim.state.fc2.weight.exp_avg" in keys
    assert not [k for k in keys if k.startswith("optim.state.fc1.weight.")]

    model2, opt2 = frozen_job(2)
    spt.TrainState(model2, opt2, rng=False).load(ckpt)  # strict
    assert model2.fc1.weight not in opt2.state  # loaded back without state, as torch has it
    assert_unchanged(model2, opt2, before)


def test_frozen_layer_resumes_bit_for_bit(ckpt):
    model, opt = frozen_job(1)
    train(model, opt, torch.optim.lr_scheduler.StepLR(opt, 1, gamma=1.0), 2)
    spt.TrainState(model, opt).save(ckpt)
    expected = train(model, opt, torch.optim.lr_scheduler.StepLR(opt, 1, gamma=1.0), 3)
    ref = snapshot(model, opt)

    model2, opt2 = frozen_job(7)
    spt.TrainState(model2, opt2).load(ckpt)  # restores the RNG too
    got = train(model2, opt2, torch.optim.lr_scheduler.StepLR(opt2, 1, gamma=1.0), 3)
    assert got == expected
    assert_unchanged(model2, opt2, ref)


def test_a_checkpoint_of_a_trained_job_loads_into_one_with_state(ckpt):
    """Loading a checkpoint without state for fc1 into a job whose optimizer has
    state for it: the parameter ends without state, as torch's load_state_dict
    leaves it."""
    model, opt = frozen_job(1)
    train(model, opt, torch.optim.lr_scheduler.StepLR(opt, 1), 1)
    spt.TrainState(model, opt, rng=False).save(ckpt)
    model2, opt2, _ = make(seed=4)
    opt2 = torch.optim.AdamW(model2.parameters(), lr=1e-2)
    train(model2, opt2, torch.optim.lr_scheduler.StepLR(opt2, 1), 1)  # fc1 has state
    spt.TrainState(model2, opt2, rng=False).load(ckpt)
    assert model2.fc1.weight not in opt2.state
    assert sorted(opt2.state_dict()["state"]) == sorted(opt.state_dict()["state"])


# ---------------------------------------------------------------------------
# A load that fails while reading data.

def corrupt_last_tensor(ckpt, key):
    """Flips one byte in the middle of ``key``'s first stored chunk."""
    c = sp.metadata(ckpt).tensors[key].chunks[0]
    path = os.path.join(ckpt, c.file)
    with open(path, "r+b") as f:
        f.seek((c.begin + c.end) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x10]))


def test_all_or_nothing_keeps_everything_when_a_checksum_fails(ckpt):
    model, opt, s = trained()
    spt.TrainState(model, opt, schedulers=s, rng=False).save(ckpt)
    keys = sorted(sp.metadata(ckpt).tensors)
    corrupt_last_tensor(ckpt, "model.tok.weight")
    model2, opt2, s2 = trained(steps=1)
    snap = snapshot(model2, opt2)
    lr = s2.get_last_lr()
    with pytest.raises(sp.DataLossError, match="model.tok.weight"):
        spt.TrainState(model2, opt2, schedulers=s2, rng=False).load(ckpt, all_or_nothing=True,
                                                                     io_threads=1)
    assert_unchanged(model2, opt2, snap)
    assert s2.get_last_lr() == lr
    # without it, what docs/python.md says: the tensors read before the failure
    # are written, values and the optimizer's hyperparameters are not
    with pytest.raises(sp.DataLossError, match="model.tok.weight"):
        spt.TrainState(model2, opt2, schedulers=s2, rng=False).load(ckpt, io_threads=1)
    written = [n for n, t in snap[0].items() if not same(model2.state_dict()[n], t)]
    assert written
    assert s2.get_last_lr() == lr and opt2.param_groups[0]["lr"] == snap[1]["param_groups"][0]["lr"]
    assert len(keys) > 10


def test_sp_load_all_or_nothing_numpy_and_sharded(ckpt):
    import numpy as np
    g = torch.Generator().manual_seed(0)
    full = torch.randn(8, 6, generator=g)
    src = {"a": np.arange(20, dtype=np.float32), "w": sp.column_parallel("w", full[:4].clone(),
                                                                          [8, 6], 0, 2),
           "w1": sp.column_parallel("w", full[4:].clone(), [8, 6], 1, 2), "v": 3}
    sp.save(src, ckpt)
    corrupt_last_tensor(ckpt, "w")
    a = np.zeros(20, dtype=np.float32)
    cols = torch.full((8, 3), 7.0)
    dst = {"a": a, "w": sp.chunk("w", cols, [8, 6], 1, 0, 2), "v": 0}
    with pytest.raises(sp.DataLossError):
        sp.load(dst, ckpt, allow_unexpected_keys=True, all_or_nothing=True)
    assert not a.any() and bool((cols == 7).all()) and dst["v"] == 0
    sp.load(dst, ckpt, allow_unexpected_keys=True, all_or_nothing=True, verify_checksums=False)
    assert np.array_equal(a, np.arange(20, dtype=np.float32)) and dst["v"] == 3


def test_resume_through_a_checkpoint_manager_with_a_frozen_layer(tmp_path):
    """state.resume(mgr): the template follows the checkpoint (mgr.resume with
    state.state_dict() of a fresh optimizer would ask for fc1's state)."""
    model, opt = frozen_job(1)
    train(model, opt, torch.optim.lr_scheduler.StepLR(opt, 1), 2)
    state = spt.TrainState(model, opt, rng=False)
    with sp.CheckpointManager(tmp_path / "run") as mgr:
        assert state.resume(mgr) == (None, None)
        mgr.save(state.state_dict(), 7)
    ref = snapshot(model, opt)
    model2, opt2 = frozen_job(2)
    with sp.CheckpointManager(tmp_path / "run") as mgr:
        it, res = spt.TrainState(model2, opt2, rng=False).resume(mgr)
        assert it == 7 and not res.missing_keys and not res.unexpected_keys
        with pytest.raises(sp.NotFoundError, match="optim.state.fc1.weight"):
            mgr.resume(spt.TrainState(*make(seed=3)[:2], rng=False).state_dict())
    assert model2.fc1.weight not in opt2.state
    assert_unchanged(model2, opt2, ref)
