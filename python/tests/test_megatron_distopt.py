"""Megatron's distributed-optimizer state, `dp_reshardable` buckets rebuilt per
parameter (tests/dcp/fixtures/megatron_dpr_torch_dist, made by
make_megatron_distopt_fixture.py), checked against the real torch 1.13 DCP's
own load of the same state saved `fully_reshardable` (megatron_fr_torch_dist):
``sp.load`` of the buckets gives torch's tensors bit for bit, whole and as a
band across the saved TP split."""

import os
import sys

import pytest
import torch

import shardpoint as sp

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


def template():
    return {f"optimizer.state.{s}.{k}": torch.full(shape, -1.0)
            for k, shape in PARAMS.items() for s in STATES}


def test_dp_reshardable_rebuilt_equals_torch_loading_fully_reshardable():
    dcp = import_dcp()
    ref = template()
    dcp.load_state_dict(ref, dcp.FileSystemReader(os.path.join(FIXTURES, "megatron_fr_torch_dist")),
                        no_dist=True)
    assert all((v != -1).all() for v in ref.values())
    got = template()
    dpr = os.path.join(FIXTURES, "megatron_dpr_torch_dist")
    sp.load(got, dpr, sp.single(), allow_unexpected_keys=True, common=False)
    for k in ref:
        assert torch.equal(got[k], ref[k]), k
    # Columns 10:30 of linear_proj's exp_avg_sq: across the saved TP split at 20.
    key = "optimizer.state.exp_avg_sq.decoder.layers.self_attention.linear_proj.weight"
    band = torch.zeros(2, 4, 20)
    sp.load({key: sp.ShardedTensor(key, band, [2, 4, 40], [0, 0, 10])}, dpr, sp.single(),
            allow_unexpected_keys=True, common=False, cooperative=False)
    assert torch.equal(band, ref[key][:, :, 10:30])


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
