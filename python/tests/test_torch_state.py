"""shardpoint.torch: model + optimizer + scheduler + scaler + RNG state dicts.

Every test trains for real (seeded), saves, rebuilds the objects from scratch,
loads, and compares bit for bit with the uninterrupted run."""

import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import shardpoint as sp
import shardpoint.torch as spt
from conftest import run_ranks

V, H, T, B = 32, 16, 8, 4


class TinyGPT(torch.nn.Module):
    """Embedding tied to the output layer, one attention-free block, a LayerNorm."""

    def __init__(self, order=("tok", "pos", "fc1", "fc2", "ln")):
        super().__init__()
        make = {"tok": lambda: torch.nn.Embedding(V, H), "pos": lambda: torch.nn.Embedding(T, H),
                "fc1": lambda: torch.nn.Linear(H, 4 * H), "fc2": lambda: torch.nn.Linear(4 * H, H),
                "ln": lambda: torch.nn.LayerNorm(H)}
        for name in order:  # registration order decides parameter positions
            setattr(self, name, make[name]())
        self.head = torch.nn.Linear(H, V, bias=False)
        self.head.weight = self.tok.weight  # tied
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        self.calls += 1
        h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        h = h + self.fc2(F.gelu(self.fc1(self.ln(h))))
        return self.head(h)


def make(seed=0, order=("tok", "pos", "fc1", "fc2", "ln"), sched="onecycle", opt_kind="adamw"):
    torch.manual_seed(seed)
    model = TinyGPT(order)
    # initialise by name so that any registration order gives the same values
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    decay = [p for n, p in model.named_parameters() if n.endswith("weight")]
    no_decay = [p for n, p in model.named_parameters() if not n.endswith("weight")]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    if opt_kind == "adamw":
        opt = torch.optim.AdamW(groups, lr=1e-2, betas=(0.9, 0.95))
    elif opt_kind == "adam_amsgrad":
        opt = torch.optim.Adam(groups, lr=1e-2, amsgrad=True)
    elif opt_kind == "sgd":
        opt = torch.optim.SGD(groups, lr=1e-2, momentum=0.9)
    else:
        opt = torch.optim.RMSprop(groups, lr=1e-3)
    if sched == "onecycle":
        s = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-2, total_steps=20)
    else:
        s = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (1 + step))
    return model, opt, s


def train(model, opt, sched, steps):
    losses = []
    for _ in range(steps):
        x = torch.randint(V, (B, T))  # the data comes from the RNG: restored with it
        loss = F.cross_entropy(model(x)[:, :-1].reshape(-1, V), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


def bits(t):
    return t.detach().reshape(-1).contiguous().view(torch.uint8) if t.dtype != torch.bool else t


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


@pytest.mark.parametrize("opt_kind", ["adamw", "adam_amsgrad", "sgd", "rmsprop"])
@pytest.mark.parametrize("sched", ["onecycle", "lambda"])
def test_resume_is_bit_for_bit(ckpt, opt_kind, sched):
    torch.manual_seed(123)
    model, opt, s = make(sched=sched, opt_kind=opt_kind)
    train(model, opt, s, 3)
    spt.TrainState(model, opt, schedulers=s).save(ckpt)
    expected = train(model, opt, s, 4)
    ref = {n: t.clone() for n, t in model.state_dict().items()}

    # a fresh job: new objects, other RNG state, optimizer never stepped
    torch.manual_seed(999)
    random.seed(999)
    np.random.seed(999)
    model2, opt2, s2 = make(seed=7, sched=sched, opt_kind=opt_kind)
    assert not opt2.state
    spt.TrainState(model2, opt2, schedulers=s2).load(ckpt)
    assert model2.head.weight is model2.tok.weight
    got = train(model2, opt2, s2, 4)
    assert got == expected  # floats compared exactly
    for n, t in model2.state_dict().items():
        assert same(t, ref[n]), n
    assert s2.get_last_lr() == s.get_last_lr()


def test_tied_parameters_stored_once(ckpt):
    model, opt, s = make()
    sd = spt.get_state_dict(model, opt)
    keys = sp.flatten_keys(sd)
    assert "model.tok.weight" in keys and "model.head.weight" not in keys
    assert sd["model_aliases"].value == {"head.weight": "tok.weight"}
    assert "optim.state.tok.weight.exp_avg" in keys
    assert not any(k.startswith("optim.state.head.") for k in keys)
    assert "optim.state.0.exp_avg" not in keys  # never by position


def test_untied_model_is_a_clear_error(ckpt):
    model, opt, s = make()
    spt.TrainState(model, opt, rng=False).save(ckpt)
    model2, opt2, _ = make()
    model2.head.weight = torch.nn.Parameter(model2.tok.weight.detach().clone())
    with pytest.raises(sp.NotFoundError, match="lacks requested keys 'model.head.weight'"):
        spt.TrainState(model2, torch.optim.AdamW(model2.parameters()), rng=False).load(ckpt)


def test_optimizer_state_follows_names_not_positions(ckpt):
    model, opt, s = make(order=("tok", "pos", "fc1", "fc2", "ln"))
    train(model, opt, s, 2)
    spt.TrainState(model, opt, schedulers=s).save(ckpt)
    # the same model with its modules registered in another order: positions differ
    model2, opt2, s2 = make(seed=5, order=("ln", "fc2", "fc1", "pos", "tok"))
    assert [n for n, _ in model2.named_parameters()] != [n for n, _ in model.named_parameters()]
    spt.TrainState(model2, opt2, schedulers=s2).load(ckpt)
    names = dict(model.named_parameters())
    names2 = dict(model2.named_parameters())
    for n, p in names.items():
        for k, v in opt.state[p].items():
            assert same(opt2.state[names2[n]][k], v), (n, k)
    for g, g2 in zip(opt.param_groups, opt2.param_groups):
        assert g["lr"] == g2["lr"] and g["betas"] == g2["betas"] and isinstance(g2["betas"], tuple)


def test_param_groups_must_match_by_name(ckpt):
    model, opt, s = make()
    spt.TrainState(model, opt, rng=False).save(ckpt)
    model2, _, _ = make()
    opt2 = torch.optim.AdamW(model2.parameters(), lr=1e-2)  # one group instead of two
    with pytest.raises(sp.InvalidArgumentError, match="param_groups: stored group 0 holds"):
        spt.TrainState(model2, opt2, rng=False).load(ckpt)


def test_init_optimizer_state_matches_lazy_init():
    model, opt, _ = make(opt_kind="adamw")
    spt.init_optimizer_state(opt)
    model_ref, opt_ref, _ = make(opt_kind="adamw")
    for p in model_ref.parameters():
        p.grad = torch.zeros_like(p)
    for g in opt_ref.param_groups:
        g["lr"], g["weight_decay"] = 0.0, 0.0
    opt_ref.step()  # torch's own lazy initialization (then step 1)
    for p, q in zip(model.parameters(), model_ref.parameters()):
        a, b = opt.state[p], opt_ref.state[q]
        assert sorted(a) == sorted(b)
        for k in a:
            assert a[k].shape == b[k].shape and a[k].dtype == b[k].dtype, k
    with pytest.raises(sp.InvalidArgumentError, match="allow_dry_step"):
        spt.init_optimizer_state(make(opt_kind="rmsprop")[1])


def test_onecycle_function_is_rebuilt_not_pickled(ckpt):
    model, opt, s = make(sched="onecycle")
    sd = spt.get_state_dict(model, opt, schedulers=s)
    assert sd["scheduler"].value["anneal_func"] == {"__shardpoint__": "function",
                                              "name": "OneCycleLR._annealing_cos"}
    sp.save(sd, ckpt)  # JSON, no allow_pickle
    model2, opt2, _ = make()
    s2 = torch.optim.lr_scheduler.OneCycleLR(opt2, max_lr=2e-2, total_steps=20,
                                             anneal_strategy="linear")
    with pytest.raises(sp.InvalidArgumentError, match=r"'scheduler.anneal_func' was the function "
                                                      r"OneCycleLR._annealing_cos"):
        spt.TrainState(model2, opt2, schedulers=s2, rng=False).load(ckpt)


def warmup(step):
    return min(1.0, (step + 1) / 4)


def test_lambda_lr_function_is_compared_by_name(ckpt):
    """torch's LambdaLR.state_dict() stores a function as None; shardpoint stores its
    qualified name, so a different function is an error, not a silent resume."""
    model, opt, _ = make()
    s = torch.optim.lr_scheduler.LambdaLR(opt, warmup)
    sd = spt.get_state_dict(model, opt, schedulers=s)
    assert sd["scheduler"].value["lr_lambdas"] == [{"__shardpoint__": "function",
                                                    "name": "warmup"}] * 2  # one per group
    spt.TrainState(model, opt, schedulers=s, rng=False).save(ckpt)
    model2, opt2, _ = make(seed=3)
    w = model2.fc1.weight.detach().clone()
    other = torch.optim.lr_scheduler.LambdaLR(opt2, lambda step: 1.0)
    with pytest.raises(sp.InvalidArgumentError, match=r"'scheduler.lr_lambdas\[0\]' was the "
                                                      r"function warmup .* holds "
                                                      r"test_lambda_lr_function_is_compared_by_"
                                                      r"name.<locals>.<lambda>"):
        spt.TrainState(model2, opt2, schedulers=other, rng=False).load(ckpt)
    assert same(model2.fc1.weight, w)
    # the same function loads
    s3 = torch.optim.lr_scheduler.LambdaLR(opt2, warmup)
    spt.TrainState(model2, opt2, schedulers=s3, rng=False).load(ckpt)
    assert s3.lr_lambdas == [warmup, warmup] and s3.last_epoch == s.last_epoch


def test_lambda_inside_sequential_lr_is_compared(ckpt):
    model, opt, _ = make()
    seq = torch.optim.lr_scheduler.SequentialLR(
        opt, [torch.optim.lr_scheduler.LambdaLR(opt, warmup),
              torch.optim.lr_scheduler.StepLR(opt, 2)], milestones=[3])
    spt.TrainState(model, opt, schedulers=seq, rng=False).save(ckpt)
    model2, opt2, _ = make()
    seq2 = torch.optim.lr_scheduler.SequentialLR(
        opt2, [torch.optim.lr_scheduler.LambdaLR(opt2, lambda e: 1.0),
               torch.optim.lr_scheduler.StepLR(opt2, 2)], milestones=[3])
    with pytest.raises(sp.InvalidArgumentError,
                       match=r"'scheduler._schedulers\[0\].lr_lambdas\[0\]' was the function "
                             r"warmup"):
        spt.TrainState(model2, opt2, schedulers=seq2, rng=False).load(ckpt)


def test_reduce_on_plateau_with_tensor_metric(ckpt):
    model, opt, _ = make()
    s = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0)
    for loss in (1.0, 2.0, 3.0):
        s.step(torch.tensor(loss))
    spt.TrainState(model, opt, schedulers=s, rng=False).save(ckpt)
    model2, opt2, _ = make()
    s2 = torch.optim.lr_scheduler.ReduceLROnPlateau(opt2, patience=0)
    spt.TrainState(model2, opt2, schedulers=s2, rng=False).load(ckpt)
    assert s2.best == s.best and s2.num_bad_epochs == s.num_bad_epochs
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"] < 1e-2


def test_grad_scaler_state(ckpt, monkeypatch):
    # CPU-only torch disables GradScaler; its state is what matters here
    monkeypatch.setattr(torch.cuda.amp.grad_scaler, "amp_definitely_not_available", lambda: False)

    def scaler(init):
        sc = torch.cuda.amp.GradScaler(init_scale=init)
        sc._lazy_init_scale_growth_tracker(torch.device("cpu"))
        return sc
    a = scaler(1024.0)
    a._scale.fill_(256.0)
    a._growth_tracker.fill_(7)
    model, opt, _ = make()
    spt.TrainState(model, opt, scaler=a, rng=False).save(ckpt)
    b = scaler(65536.0)
    model2, opt2, _ = make()
    spt.TrainState(model2, opt2, scaler=b, rng=False).load(ckpt)
    assert b.get_scale() == 256.0 and b._get_growth_tracker() == 7


def test_rng_state_restored(ckpt):
    model, opt, _ = make()
    torch.manual_seed(1)
    random.seed(2)
    np.random.seed(3)
    spt.TrainState(model, opt).save(ckpt)
    expected = (torch.rand(5), random.random(), np.random.rand(3))
    torch.manual_seed(10)
    random.seed(20)
    np.random.seed(30)
    spt.TrainState(model, opt).load(ckpt)
    got = (torch.rand(5), random.random(), np.random.rand(3))
    assert same(got[0], expected[0]) and got[1] == expected[1]
    assert np.array_equal(got[2], expected[2])


# ---------------------------------------------------------------------------
# Tensor parallelism: a TPPlan reshards the model and its AdamW state.

HID, FFN, HEADS = 8, 16, 4
PLAN = [(r"qkv\.weight$", "qkv"), (r"fc1\.weight$", "swiglu"), (r"fc2\.weight$", "row"),
        (r"out\.weight$", "row"), (r"up\.(weight|bias)$", "column"), (r"emb\.weight$", "vocab")]


def global_tensors(seed):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    return {"emb.weight": r(V, HID), "q": r(HID, HID), "k": r(HID, HID), "v": r(HID, HID),
            "out.weight": r(HID, HID), "w": r(FFN, HID), "vv": r(FFN, HID),
            "fc2.weight": r(HID, FFN), "up.weight": r(FFN, HID), "up.bias": r(FFN),
            "norm.weight": r(HID)}


class TPBlock(torch.nn.Module):
    """Parameters hold this TP rank's pieces (Megatron's local shapes)."""

    def __init__(self, glob, r, n):
        super().__init__()
        P = torch.nn.Parameter

        def ch(t, d):
            return t.chunk(n, d)[r].clone()
        self.emb = torch.nn.Module()
        self.emb.weight = P(ch(glob["emb.weight"], 0))
        self.qkv = torch.nn.Module()
        self.qkv.weight = P(torch.cat([ch(glob[c], 0) for c in ("q", "k", "v")]))
        self.out = torch.nn.Module()
        self.out.weight = P(ch(glob["out.weight"], 1))
        self.fc1 = torch.nn.Module()
        self.fc1.weight = P(torch.cat([ch(glob["w"], 0), ch(glob["vv"], 0)]))
        self.fc2 = torch.nn.Module()
        self.fc2.weight = P(ch(glob["fc2.weight"], 1))
        self.up = torch.nn.Module()
        self.up.weight = P(ch(glob["up.weight"], 0))
        self.up.bias = P(ch(glob["up.bias"], 0))
        self.norm = torch.nn.Module()
        self.norm.weight = P(glob["norm.weight"].clone())


def tp_job(glob, r, n, comm, path, mode, steps=2):
    """Builds rank r of TP n; "save": steps AdamW with grads that are slices of global
    grads (the same on every TP size) and saves; "load": loads into fresh objects."""
    block = TPBlock(glob, r, n)
    opt = torch.optim.AdamW(block.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
    state = spt.TrainState(block, opt, schedulers=sched, rng=False,
                           layouts=spt.TPPlan(PLAN, r, n), comm=comm)
    if mode == "save":
        for step in range(steps):
            grads = TPBlock(global_tensors(100 + step), r, n)
            for p, gp in zip(block.parameters(), grads.parameters()):
                p.grad = gp.detach().clone()
            opt.step()
            sched.step()
        state.save(path)
    else:
        state.load(path)
    return block, opt, sched


@pytest.mark.parametrize("save_tp,load_tp", [(2, 4), (2, 1), (4, 2), (1, 2)])
def test_tp_plan_reshards_model_and_adamw(tmp_path, save_tp, load_tp):
    glob = global_tensors(0)
    path = str(tmp_path / "ckpt")
    run_ranks(save_tp, lambda r, c: tp_job(glob, r, save_tp, c, path, "save"))
    ref = tp_job(glob, 0, 1, sp.single(), str(tmp_path / "ref"), "save")  # TP 1 reference
    ref_block, ref_opt, ref_sched = ref
    fresh = global_tensors(42)  # other initial values: everything must come from the checkpoint
    out = run_ranks(load_tp, lambda r, c: tp_job(fresh, r, load_tp, c, path, "load"))
    for r, (block, opt, sched) in enumerate(out):
        ref_local = dict(TPBlock(_globals_of(ref_block), r, load_tp).named_parameters())
        ref_state = {n: {k: TPslice(n, v, r, load_tp) if v.dim() else v
                         for k, v in ref_opt.state[p].items()}
                     for n, p in ref_block.named_parameters()}
        for n, p in block.named_parameters():
            assert same(p, ref_local[n]), n
            for k, v in opt.state[p].items():
                assert same(v, ref_state[n][k]), (n, k)
        assert opt.param_groups[0]["lr"] == ref_opt.param_groups[0]["lr"] == 2.5e-3
        assert sched.last_epoch == ref_sched.last_epoch == 2


def TPslice(name, t, r, n):  # noqa: N802 - this rank's piece of a TP1 tensor
    kind = spt.TPPlan(PLAN, 0, 1).kind(name)
    if kind in ("column", "vocab"):
        return t.chunk(n, 0)[r]
    if kind == "row":
        return t.chunk(n, 1)[r]
    if kind in ("qkv", "swiglu"):
        parts = t.chunk(3 if kind == "qkv" else 2, 0)
        return torch.cat([p.chunk(n, 0)[r] for p in parts])
    return t


def _globals_of(block):
    p = dict(block.named_parameters())
    q, k, v = p["qkv.weight"].detach().chunk(3, 0)
    w, vv = p["fc1.weight"].detach().chunk(2, 0)
    return {"emb.weight": p["emb.weight"].detach(), "q": q, "k": k, "v": v,
            "out.weight": p["out.weight"].detach(), "w": w, "vv": vv,
            "fc2.weight": p["fc2.weight"].detach(), "up.weight": p["up.weight"].detach(),
            "up.bias": p["up.bias"].detach(), "norm.weight": p["norm.weight"].detach()}


def test_tp_plan_rejects_unknown_kind():
    with pytest.raises(sp.InvalidArgumentError, match="unknown kind 'diagonal'"):
        spt.TPPlan([("x", "diagonal")], 0, 2)


def test_import_shardpoint_without_torch():
    import subprocess
    from conftest import PYTHON, subprocess_env
    code = ("import sys; sys.modules['torch'] = None\n"
            "import shardpoint, shardpoint.torch\n"
            "assert shardpoint.save and shardpoint.torch.TrainState\n"
            "print('ok')")
    r = subprocess.run([PYTHON, "-c", code], env=subprocess_env(), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_rng_under_another_world_size(ckpt, monkeypatch):
    """Saved by 2 ranks, loaded by 3: ranks 0 and 1 get their own RNG back, rank 2 is
    warned and keeps its own. (Thread ranks share one process RNG, so the test records
    what each rank saves and restores.)"""
    import threading
    me = threading.local()
    restored = {}
    monkeypatch.setattr(spt, "rng_state", lambda: {"saved by": me.rank})
    monkeypatch.setattr(spt, "set_rng_state", lambda s: restored.__setitem__(me.rank, s))

    def save(r, comm):
        me.rank = r
        model, opt, _ = make()
        spt.TrainState(model, opt, comm=comm).save(ckpt)

    warned = {}
    monkeypatch.setattr("warnings.warn", lambda msg, cat=None, stacklevel=1: warned.setdefault(
        me.rank, []).append((cat, msg)))

    def load(r, comm):
        me.rank = r
        model, opt, _ = make()
        spt.TrainState(model, opt, comm=comm).load(ckpt)

    run_ranks(2, save)
    run_ranks(3, load)
    assert restored == {0: {"saved by": 0}, 1: {"saved by": 1}}
    assert list(warned) == [2] and len(warned[2]) == 1
    cat, msg = warned[2][0]
    assert cat is RuntimeWarning
    assert msg.startswith("rank 2: checkpoint") and "holds the RNG of 2 ranks, none for this" in msg


def test_load_reads_the_manifest_once_for_all_ranks(ckpt, monkeypatch):
    """TrainState.load learns the stored keys from rank 0 (one metadata read, then a
    broadcast), not from a read of the manifest on every rank; rank 0's error (no
    checkpoint) is every rank's, of the same class."""
    import shardpoint._read as rd
    reads = []
    real = rd.metadata
    monkeypatch.setattr(rd, "metadata", lambda path, **kw: reads.append(path) or real(path, **kw))

    def save(r, comm):
        model, opt, _ = make()
        spt.TrainState(model, opt, rng=False, comm=comm).save(ckpt)

    def load(r, comm, path):
        model, opt, _ = make()
        spt.TrainState(model, opt, rng=False, comm=comm).load(path)

    run_ranks(3, save)
    run_ranks(3, lambda r, c: load(r, c, ckpt))
    assert len(reads) == 1
    errors = []

    def missing(r, comm):
        try:
            load(r, comm, ckpt + "-none")
        except sp.NotFoundError as e:
            errors.append(str(e))
    run_ranks(3, missing)
    assert len(errors) == 3 and len(set(errors)) == 1 and "no checkpoint at" in errors[0]


def _gqa_local(q, k, v, groups, tp_rank, tp):
    """Megatron's interleaved local QKV: per local group its query heads, then k, then v."""
    hpg = q.shape[0] // k.shape[0]  # query rows per key row (heads per group)
    d = k.shape[0] // groups
    rows = []
    for g in range(tp_rank * groups // tp, (tp_rank + 1) * groups // tp):
        rows += [q[g * hpg * d:(g + 1) * hpg * d], k[g * d:(g + 1) * d], v[g * d:(g + 1) * d]]
    return torch.cat(rows)


def test_tp_plan_gqa_kind_reshards(tmp_path):
    heads, groups, d, hid = 8, 4, 2, 3
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(n * d, hid, generator=g) for n in (heads, groups, groups))
    grad = [torch.randn(n * d, hid, generator=g) for n in (heads, groups, groups)]
    plan = [(r"qkv\.weight$", spt.gqa(heads, groups, d))]

    def job(r, comm, n, mode):
        m = torch.nn.Module()
        m.qkv = torch.nn.Module()
        m.qkv.weight = torch.nn.Parameter(_gqa_local(q, k, v, groups, r, n) * (mode == "save"))
        opt = torch.optim.AdamW(m.parameters(), lr=0.1)
        state = spt.TrainState(m, opt, rng=False, layouts=spt.TPPlan(plan, r, n), comm=comm)
        if mode == "save":
            m.qkv.weight.grad = _gqa_local(*grad, groups, r, n)
            opt.step()
            state.save(tmp_path / "gqa")
        else:
            state.load(tmp_path / "gqa")
        return m.qkv.weight.detach().clone(), opt.state[m.qkv.weight]["exp_avg"].clone()

    saved = run_ranks(2, lambda r, c: job(r, c, 2, "save"))
    (w1, m1), = run_ranks(1, lambda r, c: job(r, c, 1, "load"))
    # TP 1 holds the groups of rank 0 then those of rank 1, each interleaved
    assert same(w1, torch.cat([saved[0][0], saved[1][0]]))
    assert same(m1, torch.cat([saved[0][1], saved[1][1]]))
    keys = sp.metadata(tmp_path / "gqa").tensors
    assert keys["model.qkv.weight.q"].shape == (heads * d, hid)
    assert keys["optim.state.qkv.weight.q.exp_avg"].shape == (heads * d, hid)
