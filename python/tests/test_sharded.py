"""Sharded tensors and layout builders, saved by N ranks and loaded by M (ranks as threads)."""

import numpy as np
import pytest
import torch

import shardpoint as sp
from conftest import run_ranks

G = torch.arange(8 * 6, dtype=torch.float32).reshape(8, 6)


def test_column_to_row_parallel(ckpt):
    def save(r, comm):
        sp.save({"w": sp.column_parallel("w", G.chunk(4, 0)[r].clone(), [8, 6], r, 4)}, ckpt,
                comm)

    run_ranks(4, save)

    def load(r, comm):
        x = torch.zeros(8, 3)
        sp.load({"w": sp.row_parallel("w", x, [8, 6], r, 2)}, ckpt, comm)
        return x

    out = run_ranks(2, load)
    assert torch.equal(torch.cat(out, 1), G)


def test_sharded_tensor_descriptor(ckpt):
    # Megatron's vocabulary: key, local tensor, global shape and offset, replica.
    def save(r, comm):
        tp, dp = r % 2, r // 2  # TP 2 x DP 2: DP ranks are replicas
        local = G[:, tp * 3:(tp + 1) * 3].contiguous()
        st = sp.ShardedTensor("w", local, [8, 6], [0, tp * 3], replica_id=dp)
        st2 = sp.ShardedTensor.from_rank_offsets("w2", local.clone(), (1, tp, 2), replica_id=dp)
        assert st.key == "w" and st.keys == ["w"] and "w[8, 6]" in repr(st)
        sp.save({"a": st, "b": st2}, ckpt, comm, verify_replicas=True)

    run_ranks(4, save)
    x, y = torch.zeros(8, 6), torch.zeros(8, 6)
    sp.load({"a": sp.ShardedTensor("w", x), "b": sp.whole("w2", y)}, ckpt)
    assert torch.equal(x, G) and torch.equal(y, G)


def test_diverged_replicas_are_reported(ckpt):
    def save(r, comm):
        sp.save({"w": torch.full((2,), float(r))}, ckpt, comm, verify_replicas=True)

    with pytest.raises(sp.Error, match="'w'"):
        run_ranks(2, save)


def test_flat_range_shards(ckpt):
    # Flat (FSDP / distributed optimizer) shards of a [8, 6] tensor: uneven ranges.
    bounds = [0, 5, 29, 48]

    def save(r, comm):
        flat = G.reshape(-1)[bounds[r]:bounds[r + 1]].clone()
        sp.save({"w": sp.ShardedTensor("w", flat, [8, 6], flat_range=(bounds[r], bounds[r + 1]),
                                       local_shape=[8, 6])}, ckpt, comm)

    run_ranks(3, save)
    x = torch.zeros(8, 6)
    sp.load({"w": x}, ckpt)
    assert torch.equal(x, G)


def test_dtensor_placements(ckpt):
    # mesh 2 x 2, Shard(0) over dim 0 of the mesh, Shard(1) over dim 1.
    def save(r, comm):
        i, j = divmod(r, 2)
        local = G.chunk(2, 0)[i].chunk(2, 1)[j].clone()
        st = sp.dtensor("w", local, [8, 6], [2, 2], [i, j], [sp.Shard(0), sp.Shard(1)])
        sp.save({"w": st}, ckpt, comm)

    run_ranks(4, save)

    # load as (Replicate, StridedShard-free) Shard(1) over a mesh of 3
    def load(r, comm):
        x = torch.zeros(8, 2)
        sp.load({"w": sp.dtensor("w", x, [8, 6], [3], [r], [sp.Shard(1)])}, ckpt, comm)
        return x

    assert torch.equal(torch.cat(run_ranks(3, load), 1), G)
    x = torch.zeros(4, 6)
    sp.load({"w": sp.dtensor("w", x, [8, 6], [2, 2], [1, 0], [sp.Replicate(), sp.Shard(0)])},
            ckpt, strict=False)
    assert torch.equal(x, G[:4])  # mesh dim 1 (coordinate 0) shards dim 0
    assert "Shard(1)" in repr(sp.Shard(1)) and sp.StridedShard(0, 2).split_factor == 2


def test_uneven_chunk_and_split(ckpt):
    g = torch.arange(7 * 2, dtype=torch.int64).reshape(7, 2)

    def save(r, comm):
        sp.save({"w": sp.chunk("w", g.chunk(3, 0)[r].clone(), [7, 2], 0, r, 3)}, ckpt, comm)

    run_ranks(3, save)
    assert sp.chunk_sizes(7, 3) == [3, 3, 1]
    a, b = torch.zeros(2, 2, dtype=torch.int64), torch.zeros(5, 2, dtype=torch.int64)
    sp.load({"a": sp.split("w", a, [7, 2], 0, [2, 5], 0),
             "b": sp.split("w", b, [7, 2], 0, [2, 5], 1)}, ckpt)
    assert torch.equal(torch.cat([a, b]), g)


def test_fused_weights(ckpt):
    H, Fd = 4, 6
    q, k, v = (torch.randn(H, H) for _ in range(3))
    w, u = torch.randn(Fd, H), torch.randn(Fd, H)

    def save(r, comm):
        qkv = torch.cat([t.chunk(2, 0)[r] for t in (q, k, v)])
        parts = [sp.FusedPart(n, [H, H]) for n in ("q", "k", "v")]
        fc1 = torch.cat([w.chunk(2, 0)[r], u.chunk(2, 0)[r]])
        st = sp.fused(parts, qkv, 0, r, 2)
        assert st.keys == ["q", "k", "v"]
        sp.save({"qkv": st, "fc1": sp.swiglu_fc1("W", "V", fc1, Fd, [H], r, 2)}, ckpt, comm)

    run_ranks(2, save)
    out = {n: torch.zeros(H, H) for n in "qkv"}
    out["W"], out["V"] = torch.zeros(Fd, H), torch.zeros(Fd, H)
    sp.load(out, ckpt)
    for n, t in zip("qkvWV", (q, k, v, w, u)):
        assert torch.equal(out[n], t), n
    # TP 1: the fused local tensor is [q; k; v]
    qkv1 = torch.zeros(3 * H, H)
    sp.load({"qkv": sp.fused([sp.FusedPart(n, [H, H]) for n in "qkv"], qkv1, 0, 0, 1)}, ckpt,
            strict=False)
    assert torch.equal(qkv1, torch.cat([q, k, v]))


def test_gqa_qkv(ckpt):
    dims = sp.GqaDims(heads=4, groups=2, head_dim=2)
    q, k, v = torch.randn(8, 3), torch.randn(4, 3), torch.randn(4, 3)
    sp.save({"q": q, "k": k, "v": v}, ckpt)

    def load(r, comm):
        x = torch.zeros(16 // 2, 3)
        sp.load({"qkv": sp.gqa_qkv("q", "k", "v", x, dims, [3], r, 2)}, ckpt, comm)
        return x

    a, b = run_ranks(2, load)
    # rank 0 holds group 0: its 2 query heads, then its key head, then its value head
    assert torch.equal(a, torch.cat([q[0:4], k[0:2], v[0:2]]))
    assert torch.equal(b, torch.cat([q[4:8], k[2:4], v[2:4]]))


def test_flat_buffer_distributed_optimizer(ckpt):
    # Two parameters back to back in a buffer split over 2 DP ranks.
    a, b = torch.arange(6.0).reshape(2, 3), torch.arange(10.0, 15.0)

    def save(r, comm):
        params = [sp.ShardedTensor("a", None, [2, 3], local_shape=[2, 3], dtype="f32"),
                  sp.ShardedTensor("b", None, [5], local_shape=[5], dtype=torch.float32)]
        full = torch.cat([a.reshape(-1), b, torch.zeros(1)])  # padded to 12
        plan = sp._shardpoint.plan_flat_buffer([p.layout for p in params], 1, 2)
        shard = full[r * plan.shard_size:(r + 1) * plan.shard_size].clone()
        pieces, plan2 = sp.flat_buffer(params, r, 2, shard)
        assert plan2.shard_size == 6 and len(pieces) == 2
        for p in pieces:  # zero-copy views into the shard
            if p.data.numel():
                assert shard.data_ptr() <= p.data.data_ptr() < shard.data_ptr() + 24
        sp.save({"p": pieces, "exp_avg": [p.like(p.data * 2, prefix="m.") for p in pieces]},
                ckpt, comm)

    run_ranks(2, save)
    out = {"a": torch.zeros(2, 3), "b": torch.zeros(5), "m.a": torch.zeros(2, 3),
           "m.b": torch.zeros(5)}
    sp.load(out, ckpt)
    assert torch.equal(out["a"], a) and torch.equal(out["b"], b)
    assert torch.equal(out["m.b"], 2 * b)


def test_vocab_parallel_padding(ckpt):
    vocab, hidden = 10, 2
    emb = torch.arange(vocab * hidden, dtype=torch.float32).reshape(vocab, hidden)
    padded = sp.padded_vocab_size(vocab, 4, 2)
    assert padded == 16

    def save(r, comm):
        full = torch.zeros(padded, hidden)
        full[:vocab] = emb
        sp.save({"e": sp.vocab_parallel("emb", full.chunk(2)[r].clone(), padded, hidden, r, 2)},
                ckpt, comm)

    run_ranks(2, save)
    # load under another padding (TP 3 pads 10 to 12): the overlap, zeros elsewhere
    p3 = sp.padded_vocab_size(vocab, 4, 1)
    x = torch.full((p3, hidden), 9.0)
    sp.load({"e": sp.vocab_parallel("emb", x, p3, hidden, 0, 1)}, ckpt,
            allow_shape_mismatch=True)
    assert torch.equal(x[:vocab], emb) and (x[vocab:] == 0).all()


def test_layout_errors_carry_cpp_messages():
    with pytest.raises(sp.InvalidArgumentError, match="'w': shard index 3 of 3 is out of range"):
        sp.column_parallel("w", torch.zeros(3, 6), [8, 6], 3, 3)
    with pytest.raises(sp.InvalidArgumentError, match=r"'w'.*\[6:9, 0:6\] lies outside"):
        sp.ShardedTensor("w", torch.zeros(3, 6), [8, 6], [6, 0])
    with pytest.raises(sp.InvalidArgumentError, match="'w': data has shape"):
        sp.column_parallel("w", torch.zeros(2, 6), [8, 6], 0, 2)
    with pytest.raises(sp.InvalidArgumentError, match="dtype"):
        st = sp.column_parallel("w", torch.zeros(4, 6), [8, 6], 0, 2)
        st.like(torch.zeros(4, 6, dtype=torch.int32))
    with pytest.raises(sp.InvalidArgumentError, match="flat_range needs local_shape"):
        sp.ShardedTensor("w", torch.zeros(3), [8], flat_range=(0, 3))


def test_overlapping_shards_name_both_ranks(ckpt):
    def save(r, comm):
        sp.save({"w": sp.ShardedTensor("w", torch.zeros(5), [8], [r * 3])}, ckpt, comm)

    with pytest.raises(sp.InvalidArgumentError, match="rank") as e:
        run_ranks(2, save)
    assert "'w'" in str(e.value) or "w" in str(e.value)


def test_gil_is_released_during_collective_save_and_load(ckpt):
    # Each rank is a Python thread and save/load are collective: if a rank held
    # the GIL while waiting in C++ for the others, no other rank could enter
    # and this would hang (run_ranks fails after its timeout).
    big = np.arange(1 << 20, dtype=np.float32)

    def both(r, comm):
        part = big.reshape(4, -1)[r]
        sp.save({"w": sp.chunk("w", part, [big.size], 0, r, 4)}, ckpt, comm)
        out = np.zeros_like(part)
        sp.load({"w": sp.chunk("w", out, [big.size], 0, r, 4)}, ckpt, comm)
        return np.array_equal(out, part)

    assert all(run_ranks(4, both, timeout=120))


def test_experts_and_pipeline(ckpt):
    E, I, H = 4, 6, 2
    experts = torch.arange(E * I * H, dtype=torch.float32).reshape(E, I, H)

    def save(r, comm):  # EP 2: two experts per rank, stored per expert and stacked
        ep = sp.ExpertParallel(E, r, 2)
        local = experts[ep.first_expert():ep.first_expert() + ep.local_experts()].clone()
        st = sp.per_expert_weights(lambda e: f"experts.{e}.fc1", local, [I, H], -1, ep)
        sp.save({"e": st, "s": sp.stacked_experts("stacked", local, [I, H], 0, ep)}, ckpt, comm)

    run_ranks(2, save)
    out = {f"experts.{e}.fc1": torch.zeros(I, H) for e in range(E)}
    # the stacked tensor under EP 1 x expert-TP 2 (split on I)
    out["s"] = [sp.stacked_experts("stacked", torch.zeros(E, I // 2, H), [I, H], 0,
                                   sp.ExpertParallel(E), tp, 2) for tp in range(2)]
    sp.load(out, ckpt)
    assert all(torch.equal(out[f"experts.{e}.fc1"], experts[e]) for e in range(E))
    assert torch.equal(torch.cat([st.data for st in out["s"]], 1), experts)

    pl = sp.PipelineLayout(8, pp_size=2, vp_size=2)
    assert sp.stage_layers(pl, 1, 0) == [2, 3] and sp.global_layer(pl, 1, 1, 0) == 6
    assert sp.layer_key("decoder.layers", 6, "mlp.fc1.weight") == "decoder.layers.6.mlp.fc1.weight"
    g = sp.GdnDims(2, 2, 2, 2)
    assert g.components() == [4, 4, 4, 4, 2, 2]
    st = sp.gdn_in_proj("in_proj", torch.zeros(10, 3), g, 3, 0, 2)
    assert st.keys == ["in_proj"] * len(st.layout.segments)


def test_whole_without_data_needs_a_shape():
    with pytest.raises(sp.InvalidArgumentError, match="'x': whole\\(\\) without data needs shape="):
        sp.whole("x", None, dtype="f32")
    assert sp.whole("x", None, dtype="f32", shape=[2, 3]).layout.shape == [2, 3]
