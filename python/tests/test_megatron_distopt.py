"""Megatron's distributed-optimizer state, `dp_reshardable` buckets rebuilt per
parameter (tests/dcp/fixtures/megatron_dpr_torch_dist, made by
make_megatron_distopt_fixture.py), checked against the real torch 1.13 DCP's
own load of the same state saved `fully_reshardable` (megatron_fr_torch_dist):
``sp.load`` of the buckets gives torch's tensors bit for bit, whole and as a
band across the saved TP split."""

import math
import os
import sys

import pytest
import torch

import shardpoint as sp
from shardpoint.torch import TPPlan, TrainState

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dcp_compat import import_dcp  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "dcp",
                        "fixtures")
PARAMS = {
    "embedding.word_embeddings.weight": (40, 4),
    "decoder.layers.self_attention.linear_proj.weight": (2, 4, 40),
    "decoder.layers.self_attention.linear_qkv.layer_norm_weight": (2, 4),
    "decoder.layers.self_attention.linear_qkv.weight": (2, 8, 4),
    "decoder.layers.mlp.linear_fc1.layer_norm_weight": (2, 4),
    "decoder.layers.mlp.linear_fc1.weight": (2, 36, 4),
    "decoder.layers.mlp.linear_fc2.weight": (2, 4, 18),
    "decoder.final_layernorm.weight": (4,),
    "output_layer.weight": (40, 4),
}
STATES = ["param", "exp_avg", "exp_avg_sq"]


def template(params=None):
    return {f"optimizer.state.{s}.{k}": torch.full(shape, -1.0)
            for k, shape in (params or PARAMS).items() for s in STATES}


@pytest.mark.parametrize("moe", [False, True])
def test_dp_reshardable_rebuilt_equals_torch_loading_fully_reshardable(moe):
    """Dense (one optimizer) and MoE (chained_0 dense + chained_1 experts, EP=2,
    TEGroupedMLP order) buckets, rebuilt, equal torch's DCP load of the same
    state saved fully_reshardable."""
    dcp = import_dcp()
    params = MOE_PARAMS if moe else PARAMS
    ref = template(params)
    fr, dpr = ("megatron_moe_fr_torch_dist", "megatron_moe_dpr_torch_dist") if moe else (
        "megatron_fr_torch_dist", "megatron_dpr_torch_dist")
    dcp.load_state_dict(ref, dcp.FileSystemReader(os.path.join(FIXTURES, fr)), no_dist=True)
    assert all((v != -1).all() for v in ref.values())
    got = template(params)
    dpr = os.path.join(FIXTURES, dpr)
    sp.load(got, dpr, sp.single(), allow_unexpected_keys=True, common=False)
    for k in ref:
        assert torch.equal(got[k], ref[k]), k
    # Columns 10:30 of linear_proj's exp_avg_sq: across the saved TP split at 20.
    key = "optimizer.state.exp_avg_sq.decoder.layers.self_attention.linear_proj.weight"
    band = torch.zeros(2, 4, 20)
    sp.load({key: sp.ShardedTensor(key, band, [2, 4, 40], [0, 0, 10])}, dpr, sp.single(),
            allow_unexpected_keys=True, common=False, cooperative=False)
    assert torch.equal(band, ref[key][:, :, 10:30])
    if moe:  # experts 1:3 of layer 1: across the EP split at 2
        key = "optimizer.state.exp_avg.decoder.layers.mlp.experts.linear_fc1.weight"
        band = torch.zeros(1, 2, 4, 4)
        sp.load({key: sp.ShardedTensor(key, band, [2, 4, 4, 4], [1, 1, 0, 0])}, dpr,
                sp.single(), allow_unexpected_keys=True, common=False, cooperative=False)
        assert torch.equal(band, ref[key][1:2, 1:3])


def test_buckets_whose_parameters_do_not_tile_are_data_loss_naming_the_bucket(tmp_path):
    """The generator with 32-element alignment instead of Megatron's 64 (real
    torch 1.13 DCP, 2 gloo processes): the buffer's ranges do not tile, and
    every read fails with DataLossError naming the bucket and the parameter."""
    import socket

    import torch.multiprocessing as mp
    sys.path.insert(0, FIXTURES)
    import make_megatron_distopt_fixture as gen

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = str(tmp_path / "bad")
    mp.spawn(gen.worker, args=(port, out, "dp_reshardable", 32), nprocs=2)
    with pytest.raises(sp.DataLossError) as e:
        sp.load(template(), out, sp.single(), allow_unexpected_keys=True, common=False)
    msg = str(e.value)
    assert "dp_group_idx_0.gbuf_idx_0" in msg and "bucket_idx_0." in msg, msg
    assert "linear_fc2.weight' layer 1 would occupy [192, 228)" in msg, msg
    assert "do not tile" in msg, msg


# ---------------------------------------------------------------------------
# TrainState.load(mapping="megatron_llama"): the fixtures' weights and Adam
# state into a Llama-named torch model + torch.optim.Adam, TP=1 and TP=2.

def hf_table(layers):
    """HF name -> (PARAMS key, layer or None, rows of the stored layer)."""
    hf = {
        "model.embed_tokens.weight": ("embedding.word_embeddings.weight", None, None),
        "model.norm.weight": ("decoder.final_layernorm.weight", None, None),
        "lm_head.weight": ("output_layer.weight", None, None),
    }
    for i in range(layers):
        pre, qkv = f"model.layers.{i}.", "decoder.layers.self_attention.linear_qkv.weight"
        fc1 = "decoder.layers.mlp.linear_fc1.weight"
        hf.update({
            pre + "input_layernorm.weight":
                ("decoder.layers.self_attention.linear_qkv.layer_norm_weight", i, None),
            pre + "self_attn.q_proj.weight": (qkv, i, (0, 4)),
            pre + "self_attn.k_proj.weight": (qkv, i, (4, 6)),
            pre + "self_attn.v_proj.weight": (qkv, i, (6, 8)),
            pre + "self_attn.o_proj.weight":
                ("decoder.layers.self_attention.linear_proj.weight", i, None),
            pre + "post_attention_layernorm.weight":
                ("decoder.layers.mlp.linear_fc1.layer_norm_weight", i, None),
            pre + "mlp.gate_proj.weight": (fc1, i, (0, 18)),
            pre + "mlp.up_proj.weight": (fc1, i, (18, 36)),
            pre + "mlp.down_proj.weight": ("decoder.layers.mlp.linear_fc2.weight", i, None),
        })
    return hf


HF = hf_table(2)
# The fixture's linear_qkv [2, 8, 4] is (heads + 2 groups) * head_dim = (2 + 2) * 2 rows.
GQA = {"num_attention_heads": 2, "num_key_value_heads": 1}
TP_RULES = [(r"(q|k|v|gate|up)_proj", "column"), (r"(o|down)_proj", "row"),
            (r"embed_tokens|lm_head", "vocab")]


# megatron_fsms_torch_dist (make_megatron_fixture.py's FSMS, states fp32_param,
# exp_avg, exp_avg_sq; the same value formula): its keys, their HF tensors.
FSMS_PARAMS = {"decoder.layers.mlp.linear_fc2.weight": (2, 4, 6),
               "embedding.word_embeddings.weight": (8, 4),
               "decoder.layers.mlp.linear_fc1.weight": (2, 8, 4)}
FSMS_HF = {"model.embed_tokens.weight": ("embedding.word_embeddings.weight", None, None)}
for _i in range(2):
    _l = f"model.layers.{_i}.mlp."
    FSMS_HF.update({_l + "gate_proj.weight": ("decoder.layers.mlp.linear_fc1.weight", _i, (0, 4)),
                    _l + "up_proj.weight": ("decoder.layers.mlp.linear_fc1.weight", _i, (4, 8)),
                    _l + "down_proj.weight": ("decoder.layers.mlp.linear_fc2.weight", _i, None)})
# megatron_dpr_pp2_torch_dist (make_megatron_distopt_fixture.py's VARIANTS): 3 layers
# over PP=2 (1 on the first stage), the norms' weights bfloat16 (a second gradient
# buffer per stage); the same keys and value formula.
PP2 = "megatron_dpr_pp2_torch_dist"
PP2_PARAMS = {k: (3,) + s[1:] if k.startswith("decoder.layers.") else s
              for k, s in PARAMS.items()}
PP2_BF16 = {"decoder.layers.self_attention.linear_qkv.layer_norm_weight",
            "decoder.layers.mlp.linear_fc1.layer_norm_weight", "decoder.final_layernorm.weight"}

# megatron_moe_{fr,dpr}_torch_dist: an MoE model (VARIANTS' MOE), 4 experts stacked
# under 2 layers, EP=2, TEGroupedMLP; the experts in an optimizer of their own.
MOE_PARAMS = {
    "embedding.word_embeddings.weight": (40, 4),
    "decoder.layers.self_attention.linear_proj.weight": (2, 4, 40),
    "decoder.layers.self_attention.linear_qkv.layer_norm_weight": (2, 4),
    "decoder.layers.self_attention.linear_qkv.weight": (2, 8, 4),
    "decoder.layers.pre_mlp_layernorm.weight": (2, 4),
    "decoder.layers.mlp.router.weight": (2, 4, 4),
    "decoder.layers.mlp.experts.linear_fc1.weight": (2, 4, 4, 4),
    "decoder.layers.mlp.experts.linear_fc2.weight": (2, 4, 4, 2),
    "decoder.final_layernorm.weight": (4,),
    "output_layer.weight": (40, 4),
}


def moe_hf_table(layers, experts):
    hf = {k: v for k, v in hf_table(layers).items() if ".mlp." not in k and
          "post_attention" not in k}
    for i in range(layers):
        pre, ex = f"model.layers.{i}.", "decoder.layers.mlp.experts."
        hf[pre + "post_attention_layernorm.weight"] = ("decoder.layers.pre_mlp_layernorm.weight",
                                                       i, None)
        hf[pre + "mlp.gate.weight"] = ("decoder.layers.mlp.router.weight", i, None)
        for e in range(experts):
            hf[pre + f"mlp.experts.{e}.gate_proj.weight"] = (ex + "linear_fc1.weight", (i, e),
                                                             (0, 2))
            hf[pre + f"mlp.experts.{e}.up_proj.weight"] = (ex + "linear_fc1.weight", (i, e), (2, 4))
            hf[pre + f"mlp.experts.{e}.down_proj.weight"] = (ex + "linear_fc2.weight", (i, e),
                                                             None)
    return hf


MOE_FR, MOE_DPR = "megatron_moe_fr_torch_dist", "megatron_moe_dpr_torch_dist"

# megatron_dpr_vpp_torch_dist: 4 layers over PP=2 in 2 virtual pipeline model chunks
# (stage 0: layers 0 | 2, stage 1: 1 | 3), TP=1; per chunk an fp32 and a bf16 buffer.
VPP = "megatron_dpr_vpp_torch_dist"
VPP_PARAMS = {k: (4,) + s[1:] if k.startswith("decoder.layers.") else s
              for k, s in PARAMS.items()}
VPP_BF16 = {"decoder.layers.mlp.linear_fc1.layer_norm_weight", "decoder.final_layernorm.weight"}
BF16_OF = {PP2: PP2_BF16, VPP: VPP_BF16}

# megatron_moe_shared_dpr_torch_dist: 2 experts (EP=2), Qwen-style shared experts
# (SharedExpertMLP with its gate: the dense optimizer's) and the router's expert_bias
# buffer (a model tensor without optimizer state).
SHARED = "megatron_moe_shared_dpr_torch_dist"
MOE2_PARAMS = {k: s[:1] + (2,) + s[2:] if ".router." in k or ".experts." in k else s
               for k, s in MOE_PARAMS.items()}
SHARED_PARAMS = dict(MOE2_PARAMS, **{
    "decoder.layers.mlp.shared_experts.gate_weight": (2, 1, 4),
    "decoder.layers.mlp.shared_experts.linear_fc1.weight": (2, 8, 4),
    "decoder.layers.mlp.shared_experts.linear_fc2.weight": (2, 4, 4),
    "decoder.layers.mlp.router.expert_bias": (2, 2)})
BUFFERS = {"decoder.layers.mlp.router.expert_bias"}
# megatron_moe_etp_dpr_torch_dist: 2 experts, EP=2 x expert TP=2 (4 expert groups).
ETP = "megatron_moe_etp_dpr_torch_dist"
# megatron_moe_ep1_dpr_torch_dist: 2 experts, EP=1, expert TP = TP = 2: the experts in
# the dense buffers after the router (one optimizer, no chained_ prefix).
EP1 = "megatron_moe_ep1_dpr_torch_dist"


def shared_hf_table(layers):
    hf = moe_hf_table(layers, 2)
    for i in range(layers):
        pre, sh = f"model.layers.{i}.mlp.", "decoder.layers.mlp.shared_experts."
        hf[pre + "shared_expert.gate_proj.weight"] = (sh + "linear_fc1.weight", i, (0, 4))
        hf[pre + "shared_expert.up_proj.weight"] = (sh + "linear_fc1.weight", i, (4, 8))
        hf[pre + "shared_expert.down_proj.weight"] = (sh + "linear_fc2.weight", i, None)
        hf[pre + "shared_expert_gate.weight"] = (sh + "gate_weight", i, None)
    return hf


TABLES = {"megatron_dpr_torch_dist": (PARAMS, HF), "megatron_fr_torch_dist": (PARAMS, HF),
          "megatron_fsms_torch_dist": (FSMS_PARAMS, FSMS_HF), PP2: (PP2_PARAMS, hf_table(3)),
          MOE_FR: (MOE_PARAMS, moe_hf_table(2, 4)), MOE_DPR: (MOE_PARAMS, moe_hf_table(2, 4)),
          VPP: (VPP_PARAMS, hf_table(4)), SHARED: (SHARED_PARAMS, shared_hf_table(2)),
          ETP: (MOE2_PARAMS, moe_hf_table(2, 2)), EP1: (MOE2_PARAMS, moe_hf_table(2, 2))}
MAPPING = {MOE_FR: "megatron_moe", MOE_DPR: "megatron_moe", SHARED: "megatron_moe",
           ETP: "megatron_moe", EP1: "megatron_moe"}


def expected(hf, state, fixture="megatron_dpr_torch_dist"):
    """What the generator stored for HF tensor ``hf`` (state -1: the model weight):
    10000 (state + 1) + 1000 p + k at flat index k of the fixture's key p."""
    params, hfmap = TABLES[fixture]
    key, layer, rows = hfmap[hf]
    p = list(params).index(key)
    full = torch.arange(math.prod(params[key]), dtype=torch.float32).reshape(params[key])
    full += 1000 * p + (10000 * (state + 1) if state >= 0 else 0)
    if state < 0 and key in BF16_OF.get(fixture, ()):
        full = full.bfloat16().float()  # stored bfloat16
    t = full if layer is None else full[layer]
    return t if rows is None else t[rows[0]:rows[1]]


def llama(tp_rank=0, tp_size=1, fixture="megatron_dpr_torch_dist"):
    """A torch module with the fixture's HF names, TP-local shapes, NaN-filled."""
    root = torch.nn.Module()
    plan = TPPlan(TP_RULES, tp_rank, tp_size)
    for name in TABLES[fixture][1]:
        shape = list(expected(name, -1, fixture).shape)
        kind = plan.kind(name)
        if kind in ("column", "vocab"):
            shape[0] //= tp_size
        elif kind == "row":
            shape[1] //= tp_size
        mod = root
        for part in name.split(".")[:-1]:
            if not hasattr(mod, part):
                mod.add_module(part, torch.nn.Module())
            mod = getattr(mod, part)
        mod.register_parameter(name.split(".")[-1],
                               torch.nn.Parameter(torch.full(shape, float("nan"))))
    return root, plan


def local(t, kind, tp_rank, tp_size):
    if kind in ("column", "vocab"):
        return t.chunk(tp_size, 0)[tp_rank]
    return t.chunk(tp_size, 1)[tp_rank] if kind == "row" else t


@pytest.mark.parametrize("fixture", list(TABLES))
@pytest.mark.parametrize("tp", [1, 2])
def test_train_state_loads_megatron_weights_and_adam_state(fixture, tp):
    """Every element of every weight, exp_avg and exp_avg_sq, TP=1 and each rank of
    TP=2 (column, row and vocab parallel), equals the generator's value; the step
    is common.pt's; the fp32 master params with master_params=True; the
    unexpected keys name no bucket of a rebuilt dp_reshardable state. Layouts:
    dp_reshardable (buckets; PP=1, PP=2 with two buffers per stage, PP=2 in two
    virtual pipeline model chunks), fully_reshardable, fully_sharded_model_space;
    an MoE model's experts (each expert's gate / up / down and the router) under
    megatron_moe, fully_reshardable and dp_reshardable (the expert optimizer's own
    buffers; with expert TP 2; with shared experts and their gate; EP 1 with the
    experts in the dense buffers)."""
    for r in range(tp):
        for master in (False, True):
            model, plan = llama(r, tp, fixture)
            opt = torch.optim.Adam(model.parameters())
            ts = TrainState(model, opt, layouts=plan, comm=sp.single(), rng=False)
            # fsms's common.pt has no args: its vocabulary size is given
            variables = {"vocab_size": 8} if fixture == "megatron_fsms_torch_dist" else GQA
            res = ts.load(os.path.join(FIXTURES, fixture),
                          mapping=MAPPING.get(fixture, "megatron_llama"),
                          variables=variables, master_params=master,
                          allow_dtype_conversion=fixture in BF16_OF)  # bf16 norms: fp32 here
            assert res.missing_keys == []
            # Rebuilt buckets were read through their per-parameter views: not listed
            # as unexpected; what was not read is (the weights or the master copy).
            assert not [k for k in res.unexpected_keys if "dp_group_idx_" in k], fixture
            assert (any(k.startswith("optimizer.state.param.") for k in res.unexpected_keys)
                    != master or fixture == "megatron_fsms_torch_dist"), fixture
            for name, prm in model.named_parameters():
                kind = plan.kind(name)
                want = local(expected(name, 0 if master else -1, fixture), kind, r, tp)
                assert torch.equal(prm.detach(), want), (name, r, master)
                st = opt.state[prm]
                for j, s in ((1, "exp_avg"), (2, "exp_avg_sq")):
                    want = local(expected(name, j, fixture), kind, r, tp)
                    assert torch.equal(st[s], want), (name, s, r)
                if fixture != "megatron_fsms_torch_dist":  # its common.pt has no step
                    assert float(st["step"]) == 3


def test_train_state_mapped_load_names_what_the_checkpoint_lacks():
    """A target the mapping's keys do not cover (an extra parameter) is a
    NotFoundError naming it; nothing is applied. allow_missing_keys skips it."""
    model, plan = llama()
    model.register_parameter("extra", torch.nn.Parameter(torch.zeros(3)))
    opt = torch.optim.Adam(model.parameters())
    ts = TrainState(model, opt, comm=sp.single(), rng=False)
    path = os.path.join(FIXTURES, "megatron_dpr_torch_dist")
    with pytest.raises(sp.NotFoundError, match=r"'model\.extra'.*0 of its 3 elements"):
        ts.load(path, mapping="megatron_llama", variables=GQA)
    assert not opt.state and torch.isnan(model.lm_head.weight).all()
    res = ts.load(path, mapping="megatron_llama", variables=GQA, allow_missing_keys=True)
    assert "model.extra" in res.missing_keys and "optim.state.extra.exp_avg" in res.missing_keys
    assert model.extra not in opt.state  # no state stored for it: none set
    assert torch.equal(model.lm_head.weight.detach(), expected("lm_head.weight", -1))


def test_train_state_mapped_load_of_buckets_not_rebuilt_says_why(tmp_path):
    """The dp_reshardable fixture with common.pt's args saying PP = 2 with a
    pipeline_model_parallel_layout: its buckets are not rebuilt, and the mapped load's
    NotFoundError names the optimizer state it lacks and why the buckets were
    read as stored."""
    import argparse
    import shutil
    path = str(tmp_path / "pp2")
    shutil.copytree(os.path.join(FIXTURES, "megatron_dpr_torch_dist"), path)
    common = torch.load(os.path.join(path, "common.pt"))
    assert isinstance(common["args"], argparse.Namespace)
    common["args"].pipeline_model_parallel_size = 2
    common["args"].pipeline_model_parallel_layout = "Et|tL"
    torch.save(common, os.path.join(path, "common.pt"))
    model, _ = llama()
    ts = TrainState(model, torch.optim.Adam(model.parameters()), comm=sp.single(), rng=False)
    with pytest.raises(sp.NotFoundError) as e:
        ts.load(path, mapping="megatron_llama", variables=GQA)
    msg = str(e.value)
    assert "state 'exp_avg'" in msg or "state 'param'" in msg, msg
    assert "buckets are read as stored" in msg, msg
    assert "args.pipeline_model_parallel_layout is set" in msg, msg
    assert "its stages' layers are not derived" in msg, msg


def test_train_state_mapped_load_is_collective_over_tp_ranks():
    """Two ranks (threads, one comm) of TP=2 load the dp_reshardable fixture
    together, cooperative reads included: each gets its own shards, bit for bit."""
    from conftest import run_ranks

    def rank(r, comm):
        model, plan = llama(r, 2)
        opt = torch.optim.Adam(model.parameters())
        TrainState(model, opt, layouts=plan, comm=comm, rng=False).load(
            os.path.join(FIXTURES, "megatron_dpr_torch_dist"), mapping="megatron_llama",
            variables=GQA, cooperative=True)
        for name, prm in model.named_parameters():
            kind = plan.kind(name)
            assert torch.equal(prm.detach(), local(expected(name, -1), kind, r, 2)), name
            assert torch.equal(opt.state[prm]["exp_avg_sq"], local(expected(name, 2), kind, r, 2))
        return True

    assert run_ranks(2, rank) == [True, True]


# ---------------------------------------------------------------------------
# dp_reshardable over PP=2 with two gradient buffers per stage (fp32 weights,
# bfloat16 norms): rebuilt per parameter on every read path.

def gen_value(fixture, key, state):
    """The generator's value of ``key`` (state -1: the stored weight) in ``fixture``."""
    params = TABLES[fixture][0]
    p = list(params).index(key)
    full = torch.arange(math.prod(params[key]), dtype=torch.float32).reshape(params[key])
    full += 1000 * p + (10000 * (state + 1) if state >= 0 else 0)
    return full.bfloat16() if state < 0 and key in BF16_OF.get(fixture, ()) else full


def gen_template(fixture):
    params = TABLES[fixture][0]
    sd = {f"optimizer.state.{s}.{k}": torch.full(shape, -1.0)
          for k, shape in params.items() if k not in BUFFERS for s in STATES}
    sd.update({k: torch.full(shape, -1.0, dtype=torch.bfloat16 if k in BF16_OF.get(fixture, ())
                             else torch.float32) for k, shape in params.items()})
    return sd


def check_gen(fixture, sd):
    for k, t in sd.items():
        key = k.split(".", 3)[3] if k.startswith("optimizer.state.") else k
        state = STATES.index(k.split(".")[2]) if key != k else -1
        assert torch.equal(t, gen_value(fixture, key, state)), k


def test_dp_reshardable_pp2_several_buffers_rebuilt_bit_for_bit():
    """The PP=2 fixture (groups 0-1 stage 0 with layer 0 and the embedding, groups
    2-3 stage 1 with layers 1-2, the final norm and the output layer; each stage
    an fp32 and a bf16 buffer): inspect says rebuilt; every element of every
    weight and state equals the generator's value; a band across both the stage
    boundary (layers 0:2) and the TP split (columns 10:30) reads right."""
    from shardpoint._read import metadata
    path = os.path.join(FIXTURES, PP2)
    md = metadata(path).metadata["megatron_torch_dist"]
    assert md["dp_reshardable"] == {"rebuilt_tensors": 27}, md["dp_reshardable"]
    sd = gen_template(PP2)
    sp.load(sd, path, sp.single(), allow_unexpected_keys=True, common=False)
    check_gen(PP2, sd)
    key = "optimizer.state.exp_avg.decoder.layers.self_attention.linear_proj.weight"
    band = torch.zeros(2, 4, 20)
    sp.load({key: sp.ShardedTensor(key, band, [3, 4, 40], [0, 0, 10])}, path, sp.single(),
            allow_unexpected_keys=True, common=False, cooperative=False)
    assert torch.equal(band, gen_value(PP2, key.split(".", 3)[3], 1)[0:2, :, 10:30])


@pytest.mark.parametrize("fixture,rebuilt", [(VPP, 27), (SHARED, 39), (ETP, 30), (EP1, 30)])
def test_dp_reshardable_vpp_shared_experts_and_expert_tp_rebuilt_bit_for_bit(fixture, rebuilt):
    """Virtual pipeline model chunks (each chunk's buffers, chunk 0's first in
    gbuf_idx; layers 0 | 2 on stage 0, 1 | 3 on stage 1), shared experts with
    their gate beside the router in the dense optimizer (and the router's
    expert_bias, a buffer without state), experts split over expert TP 2, experts
    in the dense buffers (EP 1, expert TP = TP): inspect says rebuilt; every
    weight and state equals the generator's value."""
    from shardpoint._read import metadata
    path = os.path.join(FIXTURES, fixture)
    md = metadata(path).metadata["megatron_torch_dist"]
    assert md["dp_reshardable"] == {"rebuilt_tensors": rebuilt}, md["dp_reshardable"]
    sd = gen_template(fixture)
    sp.load(sd, path, sp.single(), allow_unexpected_keys=True, common=False)
    check_gen(fixture, sd)


def test_shared_experts_and_expert_bias_export_under_megatron_moe(tmp_path):
    """export-hf of the shared-experts fixture through megatron_moe: each layer's
    shared_expert gate / up / down and shared_expert_gate, and the router's
    expert_bias as DeepSeek-V3's e_score_correction_bias, hold the stored values."""
    from shardpoint import hf as sphf
    from test_hf import read_safetensors_dir
    sphf.export(os.path.join(FIXTURES, SHARED), tmp_path / "hf", "megatron_moe", variables=GQA)
    got = read_safetensors_dir(str(tmp_path / "hf"))
    for name in shared_hf_table(2):
        assert torch.equal(got[name], expected(name, -1, SHARED)), name
    bias = gen_value(SHARED, "decoder.layers.mlp.router.expert_bias", -1)
    for i in range(2):
        assert torch.equal(got[f"model.layers.{i}.mlp.gate.e_score_correction_bias"], bias[i])


@pytest.mark.parametrize("fixture", [PP2, MOE_DPR, VPP, SHARED, ETP, EP1])
def test_dp_reshardable_pp2_and_moe_export_and_convert_per_parameter(fixture, tmp_path):
    """export-hf of the PP=2 and of the MoE dp_reshardable fixture (identity
    mapping) writes every rebuilt state and weight; convert of that HF model back
    into a shardpoint checkpoint loads them all bit for bit (the generator's
    values)."""
    from shardpoint import hf as sphf
    hf_dir, ck = tmp_path / "hf", tmp_path / "ck"
    sphf.export(os.path.join(FIXTURES, fixture), hf_dir)
    sphf.convert(hf_dir, ck)
    sd = gen_template(fixture)
    sp.load(sd, str(ck), sp.single(), allow_unexpected_keys=True)
    check_gen(fixture, sd)
