"""TrainState.load(mapping=...) reads the checkpoint's manifest once per job
(issue 41): rank 0 reads it from Python (its metadata, and the mapping's
placements, place_in_hf) and broadcasts both; before, every rank read it twice
before the collective load read it again."""

import os
import sys
import threading

import torch

import shardpoint as sp
from shardpoint import _shardpoint as _C
from shardpoint.torch import TrainState

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_megatron_distopt import FIXTURES, GQA, expected, llama, local  # noqa: E402


def test_mapped_load_reads_the_manifest_on_rank_0_only(monkeypatch):
    """Two ranks (TP=2, thread comms) load megatron_dpr_torch_dist: Python reads
    the manifest once in all (describe_checkpoint, place_in_hf once each), and
    every rank's weights and Adam state equal the generator's bit for bit."""
    counts = {"describe_checkpoint": [], "place_in_hf": []}
    for name, calls in counts.items():
        real = getattr(_C, name)

        def counted(*args, _real=real, _calls=calls, **kwargs):
            _calls.append(threading.get_ident())
            return _real(*args, **kwargs)

        monkeypatch.setattr(_C, name, counted)
    comms = sp.thread_comms(2)
    path = os.path.join(FIXTURES, "megatron_dpr_torch_dist")
    errors, loaded = [], {}

    def rank(r):
        try:
            model, plan = llama(r, 2)
            opt = torch.optim.Adam(model.parameters())
            ts = TrainState(model, opt, layouts=plan, comm=comms[r], rng=False)
            res = ts.load(path, mapping="megatron_llama", variables=GQA)
            assert res.missing_keys == []
            loaded[r] = (model, plan, opt)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append((r, e))

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert {k: len(v) for k, v in counts.items()} == {"describe_checkpoint": 1, "place_in_hf": 1}
    for r, (model, plan, opt) in loaded.items():
        for name, prm in model.named_parameters():
            kind = plan.kind(name)
            assert torch.equal(prm.detach(), local(expected(name, -1), kind, r, 2)), (name, r)
            for j, s in ((1, "exp_avg"), (2, "exp_avg_sq")):
                assert torch.equal(opt.state[prm][s], local(expected(name, j), kind, r, 2)), (
                    name, s, r)
            assert float(opt.state[prm]["step"]) == 3


def test_a_rank_whose_parameter_the_checkpoint_lacks_fails_every_rank():
    """Rank 1's model has a parameter the checkpoint does not hold: both ranks
    raise NotFoundError naming it (rank 0's names rank 1), within seconds;
    before, rank 1 raised alone and rank 0 waited in the load's collectives."""
    comms = sp.thread_comms(2)
    path = os.path.join(FIXTURES, "megatron_dpr_torch_dist")
    errors = {}

    def rank(r):
        try:
            model, plan = llama(r, 2)
            if r == 1:
                model.extra = torch.nn.Parameter(torch.zeros(3))
            ts = TrainState(model, torch.optim.Adam(model.parameters()), layouts=plan,
                            comm=comms[r], rng=False)
            ts.load(path, mapping="megatron_llama", variables=GQA)
        except BaseException as e:  # noqa: BLE001 - checked below
            errors[r] = e

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a rank still waits"
    lacks = "'model.extra': the checkpoint holds 0 of its 3 elements under the mapping"
    assert isinstance(errors[1], _C.NotFoundError) and lacks in str(errors[1])
    assert isinstance(errors[0], _C.NotFoundError)
    assert str(errors[0]).startswith("rank 1: " + lacks), errors[0]
