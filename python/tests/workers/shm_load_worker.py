"""One rank of test_shm_exchange.py: `shm_load_worker.py <dir> <rank> <world> <init_file>`.

torch.distributed (gloo, file:// rendezvous): the ranks save a seeded matrix
in row shards, then load it in column strips (every rank needs a part of
every saved block) with sp.load's defaults. Each checks its strip bit for
bit; rank 0 prints the bytes all ranks read through read(), the needed
bytes and the largest all_to_all_buffer payload (the blocks between ranks of
one node move through shared memory, not through gloo); then the same for a
TP=2 x DP=2 load (row halves) and its number of exchanges. Prints "ok <rank>".
"""

import os
import sys

import torch
import torch.distributed as dist

import shardpoint as sp

N = 1024  # 4 MiB of f32 (1 MiB verified blocks)


class Sized(sp.TorchDistributedComm):
    largest = 0
    calls = 0

    def all_to_all_buffer(self, send, counts):
        Sized.largest = max(Sized.largest, len(send))
        Sized.calls += 1
        return super().all_to_all_buffer(send, counts)


def main():
    out, rank, world, init = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    g = torch.randn(N, N, generator=torch.Generator().manual_seed(38))
    rows, cols = N // world, N // world
    path = os.path.join(out, "ckpt")
    comm = Sized()
    sp.save({"w": sp.chunk("w", g[rank * rows:(rank + 1) * rows].clone(), [N, N], 0, rank, world)},
            path, comm)
    strip = torch.zeros(N, cols)
    r = sp.load({"w": sp.chunk("w", strip, [N, N], 1, rank, world)}, path, comm)
    assert torch.equal(strip, g[:, rank * cols:(rank + 1) * cols]), rank
    read = comm.all_gather(str(r.bytes_read).encode())
    largest = comm.all_gather(str(Sized.largest).encode())
    # TP=2 x DP=2: row halves, each held by two ranks. Reading alone puts
    # each needed byte through read() once: no exchange.
    Sized.calls = 0
    half = torch.zeros(N // 2, N)
    r2 = sp.load({"w": sp.chunk("w", half, [N, N], 0, rank // 2, 2)}, path, comm)
    assert torch.equal(half, g[(rank // 2) * (N // 2):(rank // 2 + 1) * (N // 2)]), rank
    read2 = comm.all_gather(str(r2.bytes_read).encode())
    calls2 = comm.all_gather(str(Sized.calls).encode())
    if rank == 0:
        print("read", sum(int(b) for b in read), "needed", N * N * 4,
              "largest", max(int(b) for b in largest), flush=True)
        print("tp_dp_read", sum(int(b) for b in read2), "needed", 2 * N * N * 4,
              "exchanges", sum(int(b) for b in calls2), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    print(f"ok {rank}", flush=True)


if __name__ == "__main__":
    main()
