"""shardpoint.torch stores canonical names whatever wraps the model: DDP's
``module.``, torch.compile's ``_orig_mod.``, FSDP1's ``_fsdp_wrapped_module.``
and activation checkpointing's ``_checkpoint_wrapped_module.`` are dropped on
save and mapped on load, so a checkpoint saved wrapped loads unwrapped and the
other way round.

torch 1.13 has no torch.compile (the real one is tested where torch has it): its
wrapper (OptimizedModule, which holds the model as ``_orig_mod``) is rebuilt here
with that attribute structure."""

import os
import subprocess

import pytest
import torch

import shardpoint as sp
import shardpoint.torch as spt
from conftest import PYTHON, free_port, subprocess_env


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 8)
        self.out = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.out(torch.relu(self.fc(x)))


class OptimizedModule(torch.nn.Module):
    """What torch.compile returns (torch >= 2.0): the model as ``_orig_mod``."""

    def __init__(self, mod):
        super().__init__()
        self._orig_mod = mod

    def forward(self, x):
        return self._orig_mod(x)


def trained(wrap=lambda m: m, seed=0):
    torch.manual_seed(seed)
    model = wrap(Net())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(2):
        model(torch.randn(4, 6, requires_grad=True)).sum().backward()
        opt.step()
        opt.zero_grad()
    return model, opt


def assert_same_state(a, opt_a, b, opt_b):
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    assert len(pa) == len(pb)
    for (na, x), (nb, y) in zip(sorted(pa.items()), sorted(pb.items())):
        assert torch.equal(x, y), (na, nb)
        for k in opt_a.state[x]:
            assert torch.equal(opt_a.state[x][k], opt_b.state[y][k]), (na, k)


def checkpoint_wrapped(m):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    m.fc = checkpoint_wrapper(m.fc)
    return m


WRAPPERS = {"compile": OptimizedModule, "checkpoint": checkpoint_wrapped,
            "both": lambda m: OptimizedModule(checkpoint_wrapped(m))}
CANONICAL = ["model.fc.bias", "model.fc.weight", "model.out.bias", "model.out.weight",
             "optim.state.fc.bias.exp_avg", "optim.state.fc.bias.exp_avg_sq",
             "optim.state.fc.bias.step", "optim.state.fc.weight.exp_avg",
             "optim.state.fc.weight.exp_avg_sq", "optim.state.fc.weight.step",
             "optim.state.out.bias.exp_avg", "optim.state.out.bias.exp_avg_sq",
             "optim.state.out.bias.step", "optim.state.out.weight.exp_avg",
             "optim.state.out.weight.exp_avg_sq", "optim.state.out.weight.step"]


def real_compile(m):
    if not hasattr(torch, "compile"):
        pytest.skip(f"torch {torch.__version__} has no torch.compile (added in 2.0)")
    return torch.compile(m, backend="eager")  # the real OptimizedModule, no code generated


WRAPPERS["torch.compile"] = real_compile


@pytest.mark.parametrize("kind", sorted(WRAPPERS))
def test_saved_wrapped_loads_unwrapped_and_back(tmp_path, kind):
    wrap = WRAPPERS[kind]
    model, opt = trained(wrap)
    spt.TrainState(model, opt, rng=False).save(tmp_path / "wrapped")
    assert sorted(sp.metadata(tmp_path / "wrapped").tensors) == CANONICAL
    plain, plain_opt = trained(seed=5)
    spt.TrainState(plain, plain_opt, rng=False).load(tmp_path / "wrapped")
    assert_same_state(model, opt, plain, plain_opt)

    spt.TrainState(plain, plain_opt, rng=False).save(tmp_path / "plain")
    again, again_opt = trained(wrap, seed=9)
    spt.TrainState(again, again_opt, rng=False).load(tmp_path / "plain")
    assert_same_state(plain, plain_opt, again, again_opt)


def test_fsdp1_prefix_is_dropped_and_a_flat_parameter_is_refused(tmp_path):
    # torch 1.13's FSDP does not import on Python 3.11: a module with its naming
    class FullyShardedDataParallel(torch.nn.Module):
        def __init__(self, mod):
            super().__init__()
            self._fsdp_wrapped_module = mod

        def forward(self, x):
            return self._fsdp_wrapped_module(x)

    model, opt = trained(FullyShardedDataParallel)
    spt.TrainState(model, opt, rng=False).save(tmp_path / "fsdp")
    assert sorted(sp.metadata(tmp_path / "fsdp").tensors) == CANONICAL
    flat = FullyShardedDataParallel(torch.nn.Module())
    flat._fsdp_wrapped_module._flat_param = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(sp.InvalidArgumentError, match="_flat_param': an FSDP1 flat parameter"):
        spt.get_state_dict(flat)


def test_a_submodule_called_module_keeps_its_name():
    m = torch.nn.Module()
    m.module = torch.nn.Linear(2, 2)  # the user's own name, not a DDP wrapper
    assert sorted(sp.flatten_keys(spt.get_state_dict(m))) == [
        "model.module.bias", "model.module.weight", "model_aliases"]


def test_real_ddp_over_gloo(tmp_path):
    """Saved unwrapped here, loaded by 2 DDP processes (gloo), trained a step and
    saved wrapped there, loaded unwrapped here: the names never carry `module.`."""
    model, opt = trained()
    src, out = str(tmp_path / "plain"), str(tmp_path / "ddp")
    spt.TrainState(model, opt, rng=False).save(src)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers", "ddp_worker.py")
    port = free_port()
    procs = [subprocess.Popen([PYTHON, script, str(r), "2", str(port), src, out],
                              env=subprocess_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(2)]
    try:
        outs = [p.communicate(timeout=180)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:  # a hang: never leave a rank behind
                p.kill()
                p.wait()
    for r, (p, text) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and f"ok {r}" in text, text
    assert sorted(sp.metadata(out).tensors) == CANONICAL
    plain, plain_opt = trained(seed=3)
    spt.TrainState(plain, plain_opt, rng=False).load(out)
    stored = sp.read(out)
    for name, p in plain.named_parameters():
        assert torch.equal(p.detach(), stored[f"model.{name}"]), name
        assert not torch.equal(p.detach(), dict(model.named_parameters())[name]), name  # stepped
        assert torch.equal(plain_opt.state[p]["exp_avg"], stored[f"optim.state.{name}.exp_avg"])
