"""One rank of a real DDP job (gloo) for test_torch_wrappers.py.

    /usr/bin/python3 ddp_worker.py RANK WORLD PORT UNWRAPPED_CKPT OUT_CKPT

Loads UNWRAPPED_CKPT (saved by an unwrapped model) into a DDP-wrapped model and
a fresh AdamW, checks every parameter and moment against what is stored, trains
one step (DDP averages the gradients: the replicas stay equal) and saves OUT_CKPT
wrapped. Prints "ok <rank>".
"""
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from gloo_init import init_gloo  # noqa: E402
from test_torch_wrappers import Net  # noqa: E402

import shardpoint as sp  # noqa: E402
import shardpoint.torch as spt  # noqa: E402


def main():
    rank, world, port, src, out = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                   sys.argv[4], sys.argv[5])
    init_gloo(rank, world, port)
    torch.manual_seed(100 + rank)  # other values on each rank: all must come from src
    ddp = torch.nn.parallel.DistributedDataParallel(Net())
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-2)
    state = spt.TrainState(ddp, opt, rng=False)
    state.load(src)
    stored = sp.read(src)
    for name, p in ddp.module.named_parameters():
        assert torch.equal(p.detach(), stored[f"model.{name}"]), name
        assert torch.equal(opt.state[p]["exp_avg"], stored[f"optim.state.{name}.exp_avg"]), name
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(rank))
    ddp(x).sum().backward()
    opt.step()
    state.save(out)
    del state, ddp  # DDP's reducer goes before its process group
    dist.barrier()
    dist.destroy_process_group()
    print(f"ok {rank}", flush=True)


if __name__ == "__main__":
    main()
