"""Joins this process to a gloo process group of `world` ranks on this machine,
meeting at 127.0.0.1:`port`: how the DCP and FSDP2 test workers start."""
import os

import torch.distributed as dist


def init_gloo(rank, world, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
