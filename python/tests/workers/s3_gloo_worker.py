"""One rank of test_s3's multi-process save: `s3_gloo_worker.py PATH RANK WORLD PORT`.

Joins a gloo group and saves this rank's column-parallel shard of G (and a
per-rank value) to PATH, an s3:// prefix, through the default storage: the
AWS environment variables the test passes. Prints "saved <rank>".
"""
import sys

import numpy as np

import shardpoint as sp
from gloo_init import init_gloo

ROWS, COLS = 24, 1000  # 96 KB of float32: a few chunks per rank


def global_tensor():
    return np.random.default_rng(39).standard_normal((ROWS, COLS)).astype(np.float32)


def main():
    path, rank, world, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    init_gloo(rank, world, port)
    g = global_tensor()
    rows = ROWS // world
    sd = {"w": sp.column_parallel("w", g[rank * rows:(rank + 1) * rows].copy(), [ROWS, COLS],
                                  rank, world),
          "rank_value": sp.ShardedObject("rank_value", {"rank": rank}, (rank,), (world,))}
    sp.save(sd, path, sp.TorchDistributedComm(), common={"step": 7})
    print(f"saved {rank}", flush=True)
    # as every gloo worker does: torch 1.13's gloo threads, left to the
    # interpreter's exit, once aborted rank 0 ("terminate called without an
    # active exception") after its save had returned
    import torch.distributed as dist
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
