"""One rank of the torch ShardedTensor tests:
`sharded_tensor_worker.py save|load <ckpt> <rank> <world> <init_file> <w_dim> <v_dim>`.

torch.distributed (gloo) with torch 1.13's `torch.distributed._shard`
ShardedTensor, sharded with ChunkShardingSpec along `w_dim` for "w" [12, 6]
and `v_dim` for "v" [5, 7] (uneven chunks). `save` fills the local shards
from the seeded global tensors and saves them with shardpoint.save (no
layout written by hand); `load` loads into empty ShardedTensors of its own
world size and specs and checks every local shard bit for bit. Prints
"ok <rank>".
"""

import os
import sys
import warnings

import torch
import torch.distributed as dist

import shardpoint as sp

warnings.filterwarnings("ignore")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from dcp_compat import import_dcp  # noqa: E402

import_dcp()  # torch 1.13's _shard package needs the Python 3.11 import patch
from torch.distributed._shard import sharded_tensor  # noqa: E402
from torch.distributed._shard.sharding_spec import ChunkShardingSpec  # noqa: E402

SHAPES = {"w": (12, 6), "v": (5, 7)}


def global_tensor(name):
    g = torch.Generator().manual_seed(len(name) * 7 + SHAPES[name][0])
    return torch.randn(*SHAPES[name], generator=g, dtype=torch.float64).to(torch.bfloat16)


def make(name, dim, world):
    spec = ChunkShardingSpec(dim=dim, placements=[f"rank:{r}/cpu" for r in range(world)])
    return sharded_tensor.empty(spec, *SHAPES[name], dtype=torch.bfloat16)


def local_expected(st, name):
    out = []
    for shard in st.local_shards():
        md = shard.metadata
        idx = tuple(slice(o, o + n) for o, n in zip(md.shard_offsets, md.shard_sizes))
        out.append((shard.tensor, global_tensor(name)[idx]))
    return out


def main():
    mode, ckpt, rank, world, init, w_dim, v_dim = sys.argv[1:8]
    rank, world = int(rank), int(world)
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    sd = {"w": make("w", int(w_dim), world), "nested": {"v": make("v", int(v_dim), world)}}
    comm = sp.TorchDistributedComm()
    pairs = local_expected(sd["w"], "w") + local_expected(sd["nested"]["v"], "v")
    if mode == "save":
        for local, want in pairs:
            local.copy_(want)
        sp.save(sd, ckpt, comm, common={"world": world})
    else:
        for local, _ in pairs:
            local.fill_(-1)
        res = sp.load(sd, ckpt, comm)
        assert isinstance(res.common["world"], int) and res.common["world"] != world
        for local, want in pairs:
            assert torch.equal(local.view(torch.int16), want.view(torch.int16)), (local, want)
    dist.barrier()
    print(f"ok {rank}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
