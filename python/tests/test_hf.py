"""shardpoint.hf: a Megatron-style TP=2 torch model loads a Llama-like HF model
(written by an independent safetensors writer below), equal to the unsharded
reference bit for bit; after a training step its checkpoint exports to an HF
model that round-trips bit for bit."""

import json
import os
import struct

import pytest
import torch

import shardpoint as sp
import shardpoint.hf as sphf
from conftest import run_ranks
from shardpoint.torch import TPPlan, gqa

CFG = {"hidden_size": 16, "num_attention_heads": 4, "num_key_value_heads": 2,
       "intermediate_size": 24, "vocab_size": 32, "num_hidden_layers": 2}
H, HEADS, GROUPS, F, V = 16, 4, 2, 24, 32
D = H // HEADS
DT = torch.bfloat16
_ST = {torch.bfloat16: "BF16", torch.float32: "F32"}
_TORCH = {v: k for k, v in _ST.items()}


def hf_tensors(seed=7):
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=g).to(DT)
    t = {"model.embed_tokens.weight": r(V, H), "model.norm.weight": r(H), "lm_head.weight": r(V, H)}
    for i in range(CFG["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": r(H), p + "post_attention_layernorm.weight": r(H),
                  p + "self_attn.q_proj.weight": r(HEADS * D, H),
                  p + "self_attn.k_proj.weight": r(GROUPS * D, H),
                  p + "self_attn.v_proj.weight": r(GROUPS * D, H),
                  p + "self_attn.o_proj.weight": r(H, HEADS * D),
                  p + "mlp.gate_proj.weight": r(F, H), p + "mlp.up_proj.weight": r(F, H),
                  p + "mlp.down_proj.weight": r(H, F)})
    return t


def write_safetensors(path, tensors):
    """A safetensors file, written here independently of shardpoint."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        raw = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": _ST[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors_dir(d):
    out = {}
    for name in sorted(os.listdir(d)):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(d, name), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            data = f.read()
        for k, v in header.items():
            if k == "__metadata__":
                continue
            b, e = v["data_offsets"]
            buf = bytearray(data[b:e])
            out[k] = torch.frombuffer(buf, dtype=_TORCH[v["dtype"]]).reshape(v["shape"])
    return out


def write_hf_dir(d, tensors):
    """Two shards and an index, as HF writes a large model."""
    os.makedirs(d)
    names = list(tensors)
    files = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
             "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    weight_map = {}
    for fname, keys in files.items():
        write_safetensors(os.path.join(d, fname), {k: tensors[k] for k in keys})
        weight_map.update({k: fname for k in keys})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(CFG, f)


def megatron_reference(hf):
    """The unsharded Megatron tensors, built here from Megatron's definitions:
    linear_qkv = per query group its query heads, its key head, its value head;
    linear_fc1 = [gate; up]."""
    ref = {"embedding.word_embeddings.weight": hf["model.embed_tokens.weight"],
           "decoder.final_layernorm.weight": hf["model.norm.weight"],
           "output_layer.weight": hf["lm_head.weight"]}
    per = HEADS // GROUPS
    for i in range(CFG["num_hidden_layers"]):
        p, m = f"model.layers.{i}.", f"decoder.layers.{i}."
        q, k, v = (hf[p + f"self_attn.{x}_proj.weight"] for x in "qkv")
        qkv = []
        for g in range(GROUPS):
            qkv += [q[g * per * D:(g + 1) * per * D], k[g * D:(g + 1) * D], v[g * D:(g + 1) * D]]
        ref[m + "self_attention.linear_qkv.weight"] = torch.cat(qkv)
        ref[m + "self_attention.linear_qkv.layer_norm_weight"] = hf[p + "input_layernorm.weight"]
        ref[m + "self_attention.linear_proj.weight"] = hf[p + "self_attn.o_proj.weight"]
        ref[m + "mlp.linear_fc1.layer_norm_weight"] = hf[p + "post_attention_layernorm.weight"]
        ref[m + "mlp.linear_fc1.weight"] = torch.cat([hf[p + "mlp.gate_proj.weight"],
                                                      hf[p + "mlp.up_proj.weight"]])
        ref[m + "mlp.linear_fc2.weight"] = hf[p + "mlp.down_proj.weight"]
    return ref


def tp_slice(name, full, r, tp):
    """Rank r's Megatron TP shard of the unsharded tensor `full`."""
    if name.endswith("linear_fc1.weight"):
        gate, up = full.chunk(2)
        return torch.cat([gate.chunk(tp)[r], up.chunk(tp)[r]])
    if name.endswith(("linear_qkv.weight", "word_embeddings.weight", "output_layer.weight")):
        return full.chunk(tp)[r]
    if name.endswith(("linear_proj.weight", "linear_fc2.weight")):
        return full.chunk(tp, dim=1)[r]
    return full


def plan(r, tp, qkv="column"):
    return TPPlan([(r"linear_qkv\.weight$", qkv), (r"linear_fc1\.weight$", "swiglu"),
                   (r"linear_(proj|fc2)\.weight$", "row"),
                   (r"word_embeddings\.weight$|output_layer\.weight$", "vocab")], r, tp)


def megatron_model(r, tp, prefix=""):
    """A torch module with Megatron-Core GPT names, rank r's TP shapes, zeros."""
    root = torch.nn.Module()
    for name, full in megatron_reference(hf_tensors()).items():
        mod = root
        *path, leaf = (prefix + name).split(".")
        for part in path:
            if not hasattr(mod, part):
                mod.add_module(part, torch.nn.Module())
            mod = getattr(mod, part)
        local = tp_slice(name, full, r, tp)
        mod.register_parameter(leaf, torch.nn.Parameter(torch.zeros_like(local)))
    return root


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("hf") / "llama")
    write_hf_dir(d, hf_tensors())
    return d


def test_describe_names_megatron_keys(hf_dir):
    keys = sphf.describe(hf_dir, "llama")
    qkv = keys["decoder.layers.1.self_attention.linear_qkv.weight"]
    assert (qkv.dtype, qkv.shape, qkv.split, qkv.heads, qkv.groups) == \
        ("BF16", ((HEADS + 2 * GROUPS) * D, H), "gqa", HEADS, GROUPS)
    assert keys["decoder.layers.0.mlp.linear_fc1.weight"].shape == (2 * F, H)
    assert keys["decoder.layers.0.mlp.linear_fc1.weight"].hf == (
        "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight")
    assert set(keys) == set(megatron_reference(hf_tensors()))


@pytest.mark.parametrize("qkv", ["column", "gqa"])
def test_tp2_load_equals_reference_bit_for_bit(hf_dir, qkv):
    ref = megatron_reference(hf_tensors())
    kind = gqa(HEADS, GROUPS, D) if qkv == "gqa" else "column"

    def rank(r, comm):
        model = megatron_model(r, 2)
        res = sphf.load(model, hf_dir, "llama", comm, plan=plan(r, 2, kind))
        local_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        return dict(model.named_parameters()), res, local_bytes

    for r, (params, res, local_bytes) in enumerate(run_ranks(2, rank)):
        assert res.missing_keys == [] and res.unexpected_keys == []
        assert res.bytes_read == local_bytes  # each rank read its own bytes, nothing else
        for name, full in ref.items():
            assert same(params[name].detach(), tp_slice(name, full, r, 2)), (r, name)


def test_tp1_load_equals_reference(hf_dir):
    model = megatron_model(0, 1, prefix="module.")  # a DDP-style wrapper prefix
    sphf.load(model, hf_dir, "llama", sp.single(), plan=plan(0, 1), prefix="module.")
    params = dict(model.named_parameters())
    for name, full in megatron_reference(hf_tensors()).items():
        assert same(params["module." + name].detach(), full), name


def sgd_step(tensors):
    """A training step, elementwise IEEE arithmetic only: the same bits sharded or not."""
    params = [torch.nn.Parameter(t) for t in tensors]
    opt = torch.optim.SGD(params, lr=0.5, weight_decay=0.1)
    for p in params:
        p.grad = p.detach() * 0.25 + 0.125
    opt.step()


def test_export_after_training_round_trips(hf_dir, tmp_path):
    ckpt, out = str(tmp_path / "ckpt"), str(tmp_path / "out")

    def train_and_save(r, comm):
        model = megatron_model(r, 2)
        p = plan(r, 2)
        sphf.load(model, hf_dir, "llama", comm, plan=p)
        with torch.no_grad():
            sgd_step(list(model.parameters()))
        sd = sphf.state_dict(model, hf_dir, "llama", plan=p)
        sp.save(sd, ckpt, comm, metadata={"hf": {"config": CFG}})
        return {k: v.detach().clone() for k, v in model.named_parameters()}

    trained = run_ranks(2, train_and_save)
    assert sp.verify(ckpt).ok
    stats = sphf.export(ckpt, out, "llama")
    assert stats.tensors == len(hf_tensors())
    expected = hf_tensors()
    with torch.no_grad():
        sgd_step(list(expected.values()))
    exported = read_safetensors_dir(out)
    assert set(exported) == set(expected)
    for k, v in expected.items():
        assert same(exported[k], v), k
    with open(os.path.join(out, "config.json")) as f:
        assert json.load(f)["num_key_value_heads"] == GROUPS

    def reload(r, comm):
        model = megatron_model(r, 2)
        sphf.load(model, out, "llama", comm, plan=plan(r, 2))
        return dict(model.named_parameters())

    for r, params in enumerate(run_ranks(2, reload)):
        for k, v in trained[r].items():
            assert same(params[k].detach(), v), (r, k)


def test_qkv_plan_kind_is_refused_naming_the_key(hf_dir):
    model = megatron_model(0, 2)
    bad = TPPlan([(r"linear_qkv\.weight$", "qkv")], 0, 2)
    with pytest.raises(sp.InvalidArgumentError, match="linear_qkv.weight.*'qkv'|'qkv'.*linear_qkv"):
        sphf.state_dict(model, hf_dir, "llama", plan=bad)


def test_wrong_tp_shape_names_the_parameter(hf_dir):
    model = megatron_model(0, 2)  # TP=2 shapes under a TP=4 plan
    with pytest.raises(sp.InvalidArgumentError, match="linear_fc1.weight"):
        sphf.state_dict(model, hf_dir, "llama", plan=plan(0, 4))


def test_missing_key_is_reported_or_refused(hf_dir):
    model = megatron_model(0, 1)
    model.register_parameter("extra", torch.nn.Parameter(torch.zeros(3)))
    with pytest.raises(sp.NotFoundError, match="extra"):
        sphf.load(model, hf_dir, "llama", sp.single())
    res = sphf.load(model, hf_dir, "llama", sp.single(), strict=False)
    assert res.missing_keys == ["extra"]
    assert same(model.output_layer.weight.detach(), hf_tensors()["lm_head.weight"])


def test_dict_of_numpy_arrays_loads(hf_dir):
    import numpy as np
    sd = {"decoder.final_layernorm.weight": np.zeros(H, dtype=np.float32),
          "embedding.word_embeddings.weight": np.zeros((V, H), dtype=np.float32)}
    res = sphf.load(sd, hf_dir, "llama", sp.single(), strict=False, allow_dtype_conversion=True)
    assert "output_layer.weight" in res.unexpected_keys and not res.missing_keys
    want = hf_tensors()["model.norm.weight"].float().numpy()
    assert np.array_equal(sd["decoder.final_layernorm.weight"], want)


def test_mapping_specs(hf_dir, tmp_path):
    rule = {"rules": [{"sp": "head", "hf": "lm_head.weight", "split": "vocab"}]}
    path = tmp_path / "m.json"
    path.write_text(json.dumps(rule))
    for spec in (rule, json.dumps(rule), str(path), path):
        keys = sphf.describe(hf_dir, spec)
        assert keys["head"].split == "vocab" and "model.norm.weight" in keys  # keep_unmatched
    assert "llama" in sphf.mapping_names()
    with pytest.raises(sp.NotFoundError):
        sphf.mapping(str(tmp_path / "absent.json"))
    with pytest.raises(sp.InvalidArgumentError, match="<dict>"):
        sphf.mapping({"rules": [{"hf": "x"}]})


def test_write_model_and_convert_round_trip(tmp_path):
    tensors = hf_tensors(seed=3)
    d, ckpt = str(tmp_path / "w"), str(tmp_path / "c")
    sphf.write_model(d, tensors, config=CFG, max_shard_size=4096)
    assert os.path.exists(os.path.join(d, "model.safetensors.index.json"))
    got = read_safetensors_dir(d)
    assert all(same(got[k], v) for k, v in tensors.items())
    sphf.convert(d, ckpt, "llama")
    ref = megatron_reference(tensors)
    loaded = sp.read(ckpt)
    for k, v in ref.items():
        assert same(torch.as_tensor(loaded[k]) if not isinstance(loaded[k], torch.Tensor)
                    else loaded[k], v), k


E, I_MOE, H_MOE = 4, 6, 8


def moe_hf(seed=11):
    g = torch.Generator().manual_seed(seed)
    t = {"model.layers.0.mlp.gate.weight": torch.randn(E, H_MOE, generator=g)}
    for e in range(E):
        p = f"model.layers.0.mlp.experts.{e}."
        t.update({p + "gate_proj.weight": torch.randn(I_MOE, H_MOE, generator=g),
                  p + "up_proj.weight": torch.randn(I_MOE, H_MOE, generator=g),
                  p + "down_proj.weight": torch.randn(H_MOE, I_MOE, generator=g)})
    return t


def moe_local(hf, tp_rank, tp, ep_rank, ep):
    """Megatron's grouped-GEMM expert tensors of one (TP, EP) rank, built here:
    fc1 [local experts, 2I/tp, H] = per expert [gate_i; up_i], fc2 [local experts,
    H, I/tp]; the router whole."""
    p = "model.layers.0.mlp."
    mine = range(ep_rank * E // ep, (ep_rank + 1) * E // ep)
    fc1 = torch.stack([torch.cat([hf[p + f"experts.{e}.gate_proj.weight"].chunk(tp)[tp_rank],
                                  hf[p + f"experts.{e}.up_proj.weight"].chunk(tp)[tp_rank]])
                       for e in mine])
    fc2 = torch.stack([hf[p + f"experts.{e}.down_proj.weight"].chunk(tp, dim=1)[tp_rank]
                       for e in mine])
    m = "decoder.layers.0.mlp."
    return {m + "router.weight": hf[p + "gate.weight"], m + "experts.linear_fc1.weight": fc1,
            m + "experts.linear_fc2.weight": fc2}


def test_expert_parallel_load_tp2_ep2(tmp_path):
    hf = moe_hf()
    d = str(tmp_path / "moe")
    os.makedirs(d)
    write_safetensors(os.path.join(d, "model.safetensors"), hf)
    assert sphf.describe(d, "qwen_moe")["decoder.layers.0.mlp.experts.linear_fc1.weight"].shape \
        == (E, 2 * I_MOE, H_MOE)

    def rank(r, comm):
        tp_rank, ep_rank = r % 2, r // 2
        want = moe_local(hf, tp_rank, 2, ep_rank, 2)
        sd = {k: torch.zeros_like(v) for k, v in want.items()}
        res = sphf.load(sd, d, "qwen_moe", comm, plan=TPPlan([], tp_rank, 2), ep=(ep_rank, 2))
        assert res.bytes_read == sum(v.numel() * 4 for v in want.values())
        return sd, want

    for r, (got, want) in enumerate(run_ranks(4, rank)):
        for k, v in want.items():
            assert same(got[k], v), (r, k)


def test_one_rank_with_a_wrong_shape_fails_every_rank(hf_dir):
    def rank(r, comm):
        model = megatron_model(r, 2)
        if r == 1:  # rank 1's fc1 has TP=4's shape: its layout fails in Python, on rank 1
            fc1 = model.decoder.layers._modules["1"].mlp.linear_fc1
            fc1.weight = torch.nn.Parameter(torch.zeros(2 * F // 4, H, dtype=DT))
        try:
            sphf.load(model, hf_dir, "llama", comm, plan=plan(r, 2))
        except sp.InvalidArgumentError as e:
            return str(e)
        return None

    msgs = run_ranks(2, rank)
    assert all(m is not None and "decoder.layers.1.mlp.linear_fc1.weight" in m for m in msgs)
    assert msgs[0].startswith("rank 1: ")


def test_export_refuses_an_existing_output_unless_overwrite(tmp_path):
    """A second export into a non-empty directory raises naming it and changes
    nothing; overwrite=True replaces it whole (no file of the first one left)."""
    first, second = hf_tensors(seed=5), hf_tensors(seed=6)
    src1, src2 = str(tmp_path / "src1"), str(tmp_path / "src2")
    sphf.write_model(src1, first, config=CFG)
    sphf.write_model(src2, second, config=CFG)
    out = str(tmp_path / "out")
    sphf.export(src1, out, max_shard_size=4096)  # sharded: index + shards
    shards = sorted(os.listdir(out))
    with pytest.raises(sp.FailedPreconditionError, match="exists and is not empty"):
        sphf.export(src2, out)
    assert sorted(os.listdir(out)) == shards
    sphf.export(src2, out, overwrite=True)
    assert sorted(os.listdir(out)) == ["config.json", "model.safetensors"]
    got = read_safetensors_dir(out)
    assert all(same(got[k], v) for k, v in second.items())
    assert not os.path.exists(out + ".partial") and not os.path.exists(out + ".old")
    ckpt = str(tmp_path / "ckpt")
    sphf.convert(src1, ckpt)
    with pytest.raises(sp.FailedPreconditionError, match="exists and is not empty"):
        sphf.convert(src2, ckpt)
    sphf.convert(src2, ckpt, overwrite=True)
    assert all(same(torch.as_tensor(sp.read(ckpt)[k]), v) for k, v in second.items())
