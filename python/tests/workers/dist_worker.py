"""One rank of a multi-process test: `dist_worker.py torch|torch_groups|mpi <dir> [rank world init_file]`.

Under mpirun (`mpi`) the rank comes from MPI; with `torch` from the arguments
(torch.distributed, gloo, file:// rendezvous). Each rank checks the adapter's
collectives, saves a TP-sharded state with save and save_async, and loads it
back under another layout; a cooperative load must move its blocks through
the adapter's all_to_all_buffer (its list all_to_all fails there) and read
each needed byte about once. Prints "ok <rank>" at the end.
"""

import os
import sys

import numpy as np

import shardpoint as sp

G = np.arange(12 * 4, dtype=np.float32).reshape(12, 4)


def check_collectives(comm, rank, world):
    assert comm.rank() == rank and comm.size() == world, (comm.rank(), comm.size())
    mine = bytes([rank]) * (rank * 3)  # rank 0 sends nothing
    assert comm.all_gather(mine) == [bytes([r]) * (r * 3) for r in range(world)]
    got = comm.gather(mine, world - 1)
    if rank == world - 1:
        assert got == [bytes([r]) * (r * 3) for r in range(world)], got
    assert comm.broadcast(b"root data" if rank == 1 else b"", 1) == b"root data"
    assert comm.broadcast(b"", 0) == b""
    # all_to_all: item j to rank j, uneven sizes, empty ones included; also
    # through the C++ entry point (cooperative load calls it there)
    send = [bytes([rank, j]) * (rank + j) for j in range(world)]
    want = [bytes([r, rank]) * (r + rank) for r in range(world)]
    if not getattr(comm, "buffers_only", False):
        assert comm.all_to_all(send) == want
    assert sp.Comm.all_to_all(comm, send) == want
    comm.barrier()


def buffers_only(comm_class):
    """`comm_class` whose list all_to_all fails: the C++ library must move a
    cooperative load's blocks through all_to_all_buffer."""
    class BuffersOnly(comm_class):
        buffers_only = True

        def all_to_all(self, send):
            raise AssertionError("a cooperative load's bytes went through all_to_all(list)")
    return BuffersOnly


def check_cooperative(comm, rank, world, out):
    """A 4 MiB tensor saved in row shards, loaded in column shards (every 1 MiB
    block holds bytes of every rank), cooperatively: bit for bit, and the
    ranks together read each needed byte about once (alone: `world` times)."""
    g = np.random.default_rng(38).standard_normal((512, 2048)).astype(np.float32)
    rows, cols = 512 // world, 2048 // world
    path = os.path.join(out, "coop")
    sp.save({"w": sp.column_parallel("w", g[rank * rows:(rank + 1) * rows].copy(), [512, 2048],
                                     rank, world)}, path, comm)
    x = np.zeros((512, cols), dtype=np.float32)
    r = sp.load({"w": sp.row_parallel("w", x, [512, 2048], rank, world)}, path, comm,
                cooperative=True)
    assert np.array_equal(x, g[:, rank * cols:(rank + 1) * cols])
    read = sum(int(b) for b in comm.all_gather(str(r.bytes_read).encode()))
    assert read <= 1.05 * g.nbytes, (read, g.nbytes)
    assert r.bytes_received > 0
    # A flipped byte in one block: only the rank that reads that block sees
    # it, and its error rides in the exchange's status byte to every rank.
    if rank == 0:
        name = os.path.join(path, "data", "1.safetensors")
        with open(name, "r+b") as f:
            f.seek(os.path.getsize(name) // 2)
            b = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([b[0] ^ 0x10]))
    comm.barrier()
    try:
        sp.load({"w": sp.row_parallel("w", x, [512, 2048], rank, world)}, path, comm,
                cooperative=True)
    except sp.DataLossError as e:
        message = str(e)
    else:
        raise AssertionError("a flipped byte loaded")
    assert "data/1.safetensors" in message and "checksum mismatch" in message, message
    assert comm.all_gather(message.encode()) == [message.encode()] * world


def run(comm, rank, world, out):
    check_collectives(comm, rank, world)
    check_cooperative(comm, rank, world, out)
    # the C++ binding of the same methods goes through the Python callbacks too
    assert sp.Comm.all_gather(comm, b"x") == [b"x"] * world
    local = G.reshape(world, -1, 4)[rank].copy()
    sd = {"w": sp.column_parallel("w", local, [12, 4], rank, world),
          "rng": sp.ShardedObject("rng", {"rank": rank}, index=(rank,), grid=(world,))}
    stats = sp.save(sd, os.path.join(out, "sync"), comm, common={"world": world})
    h = sp.save_async(sd, os.path.join(out, "async"), comm)
    local[:] = -1
    stats2 = h.wait()
    assert stats.bytes_written == stats2.bytes_written
    for name in ("sync", "async"):
        x = np.zeros((12, 4 // world), dtype=np.float32)
        r = sp.load({"w": sp.row_parallel("w", x, [12, 4], rank, world)},
                    os.path.join(out, name), comm, strict=False)
        assert np.array_equal(x, G[:, rank * (4 // world):(rank + 1) * (4 // world)]), name
        assert r.unexpected_keys == ["rng"], r.unexpected_keys
        assert r.common == ({"world": world} if name == "sync" else None)
    # a manager with a local tier saves in the background over the same comm
    local[:] = G.reshape(world, -1, 4)[rank]
    with sp.CheckpointManager(os.path.join(out, "tiers"), comm, node_id=f"n{rank}",
                              local_root=os.path.join(out, f"node{rank}")) as m:
        step = m.save_async(sd, 5)
        local[:] = -1
        assert step.local and step.persistent and step.handle.wait().bytes_written > 0
        assert m.flush() == 5
    x = np.zeros((12, 4), dtype=np.float32)
    sp.load({"w": x}, os.path.join(out, "tiers", "iter_0000005"), comm, strict=False)
    assert np.array_equal(x, G)
    # an error on one rank is an error on every rank
    bad = np.zeros(3, dtype=np.float64 if rank == 0 else np.float32)
    try:
        sp.save({"bad": bad}, os.path.join(out, "bad"), comm)
    except sp.InvalidArgumentError as e:
        assert "'bad'" in str(e), e
    else:
        raise AssertionError("mixed dtypes were accepted")
    print(f"ok {rank}", flush=True)


def run_groups(rank, world, out):
    """Every process passes its own tensor-parallel group (pairs {0,1}, {2,3}, ...),
    then all pass the first pair, which half of them are not in."""
    import torch.distributed as dist
    pairs = [dist.new_group([2 * p, 2 * p + 1]) for p in range(world // 2)]
    comm = sp.TorchDistributedComm(pairs[rank // 2])
    check_collectives(comm, rank % 2, 2)
    local = G.reshape(2, -1, 4)[rank % 2].copy() + rank // 2  # each pair its own values
    path = os.path.join(out, f"pair{rank // 2}")
    sp.save({"w": sp.column_parallel("w", local, [12, 4], rank % 2, 2)}, path, comm)
    x = np.zeros((12, 2), dtype=np.float32)
    sp.load({"w": sp.row_parallel("w", x, [12, 4], rank % 2, 2)}, path, comm)
    assert np.array_equal(x, G[:, 2 * (rank % 2):2 * (rank % 2) + 2] + rank // 2), rank
    try:
        first = sp.TorchDistributedComm(pairs[0])
    except sp.FailedPreconditionError as e:
        assert rank >= 2 and f"process {rank} is not a member" in str(e), (rank, e)
    else:
        assert rank < 2 and first.rank() == rank and first.size() == 2
        assert first.all_gather(bytes([rank])) == [b"\0", b"\1"]
    dist.barrier()
    print(f"ok {rank}", flush=True)


def main():
    kind, out = sys.argv[1], sys.argv[2]
    if kind == "mpi":
        from mpi4py import MPI
        rank, world = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
        comm = buffers_only(sp.MPI4PyComm)()
        assert isinstance(sp.default_comm(), sp.MPI4PyComm)
        check_collectives(sp.default_comm(), rank, world)  # its list all_to_all too
        run(comm, rank, world, out)
        comm.free()
        return
    import torch.distributed as dist
    rank, world, init = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    if kind == "torch_groups":
        run_groups(rank, world, out)
    else:
        default = sp.default_comm()
        assert isinstance(default, sp.TorchDistributedComm)
        check_collectives(default, rank, world)  # its list all_to_all too
        run(buffers_only(sp.TorchDistributedComm)(), rank, world, out)
        # over a group given by the caller
        sub = dist.new_group(list(range(world)))
        c = sp.TorchDistributedComm(sub)
        assert c.rank() == rank and c.size() == world
        dist.barrier()
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
