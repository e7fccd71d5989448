"""A user's script that calls every public function of shardpoint and
shardpoint.torch as docs/python.md shows them. It is not run: test_typing.py
type-checks it with mypy (with the package), so the documented patterns
type-check; test_typing.py also checks that it names every public name."""

from __future__ import annotations

import threading

import numpy as np
import torch

import shardpoint as sp
import shardpoint.torch as spt


def tensors_and_layouts(tp_rank: int, tp: int) -> dict[str, sp.ShardedTensor]:
    local = torch.zeros(4, 6)
    out = {
        "whole": sp.whole("w", local),
        "bits": sp.whole("b", np.zeros(4, dtype=np.uint16), dtype="bf16"),
        "chunk": sp.chunk("c", local, [8, 6], 0, tp_rank, tp),
        "split": sp.split("s", local, [8, 6], 0, [4, 4], tp_rank),
        "col": sp.column_parallel("col", local, [8, 6], tp_rank, tp),
        "row": sp.row_parallel("row", local, [4, 12], tp_rank, tp),
        "vocab": sp.vocab_parallel("emb", local, sp.padded_vocab_size(7, 4, tp), 6, tp_rank, tp),
        "dt": sp.dtensor("d", local, [8, 6], [tp], [tp_rank], [sp.Shard(0)]),
        "rep": sp.dtensor("r", local, [4, 6], [tp], [tp_rank], [sp.Replicate()]),
        "strided": sp.dtensor("x", local, [8, 6], [tp], [tp_rank], [sp.StridedShard(0, 2)]),
        "fused": sp.fused([sp.FusedPart(f"{n}.weight", [6, 6]) for n in "qkv"],
                          torch.zeros(9, 6), 0, tp_rank, tp),
        "swiglu": sp.swiglu_fc1("w", "v", torch.zeros(8, 6), 8, [6], tp_rank, tp),
        "gqa": sp.gqa_qkv("q", "k", "v", torch.zeros(8, 3), sp.GqaDims(4, 2, 2), [3],
                          tp_rank, tp),
        "experts": sp.per_expert_weights(lambda e: f"experts.{e}.w", torch.zeros(2, 3, 4),
                                         [3, 4], 0, sp.ExpertParallel(4, tp_rank, tp)),
        "stacked": sp.stacked_experts("e", torch.zeros(2, 3, 4), [3, 4], 0,
                                      sp.ExpertParallel(4, tp_rank, tp)),
        "gate_up": sp.fused_gate_up_experts("gu", torch.zeros(2, 8, 4), 4, 4,
                                            sp.ExpertParallel(4, tp_rank, tp)),
        "gdn": sp.gdn_in_proj("in", None, sp.GdnDims(2, 2, 2, 2), 4, tp_rank, tp, dtype="f32"),
        "conv": sp.gdn_conv1d("conv", None, sp.GdnDims(2, 2, 2, 2), [4], tp_rank, tp,
                              dtype="f32"),
    }
    st = sp.ShardedTensor("flat", torch.zeros(10), [8, 6], flat_range=(5, 15), local_shape=[8, 6])
    out["flat"] = st.like(torch.zeros(10), prefix="optim.exp_avg.")
    out["local"] = sp.shard_local(out["col"], 1, 0, 2, torch.zeros(4, 3))
    out["range"] = sp.flat_shard(out["whole"], 0, 12, torch.zeros(12))
    out["cat"] = sp.concat([out["whole"], out["whole"]], 0, torch.zeros(8, 6))
    pieces, plan = sp.flat_buffer([sp.whole("p", None, dtype="f32", shape=[4])], tp_rank, tp,
                                  torch.zeros(4))
    out["piece"] = pieces[0]
    sizes: list[int] = sp.chunk_sizes(10, 3)
    layout = sp.PipelineLayout(4, 2)
    layers: list[int] = sp.stage_layers(layout, 0)
    key: str = sp.layer_key("decoder.layers", sp.global_layer(layout, 0, 0, 0), "mlp.weight")
    print(sizes, layers, key, plan, sp.to_dtype("bf16"), sp.DType.BF16, sp.flatten_keys(out))
    return out


def save_load_read(path: str) -> None:
    sd = {"model": torch.nn.Linear(4, 2).state_dict(), "iteration": 100,
          "rng": sp.ShardedObject("rng", {"seed": 1}, index=(0,), grid=(1,))}
    stats: sp.SaveStats = sp.save(sd, path, sp.single(), common={"iteration": 100},
                                  plan_cache=sp.SavePlanCache())
    res: sp.LoadResult = sp.load(sd, path, strict=False, all_or_nothing=True)
    missing: list[str] = res.missing_keys
    h: sp.SaveHandle = sp.save_async(sd, path + "_async")
    h.wait()
    saver = sp.AsyncSaver(max_staging_bytes=1 << 30)
    saver.save(sd, path + "_own").wait()
    sp.default_saver().reserve(sd)
    md: sp.Metadata = sp.metadata(path)
    info: sp.TensorInfo = md.tensors["model.weight"]
    chunk: sp.ChunkInfo = info.chunks[0]
    obj: sp.ObjectInfo = md.objects[0]
    everything = sp.read(path)
    rng_of_rank_0 = everything["rng"][0]
    for k, t in sp.iter_tensors(path, max_bytes=1 << 20):
        print(k, t.shape)
    report: sp.VerifyReport = sp.verify(path)
    faults: tuple[sp.Fault, ...] = report.faults
    print(stats.bytes_written, missing, chunk.file, obj.key, rng_of_rank_0, faults,
          sp.inspect(path))
    with sp.CheckpointManager(path + "_run", keep_last=2) as mgr:
        it, loaded = mgr.resume(sd)
        mgr.save(sd, 1)
        mgr.save_async(sd, 2).wait()
        print(it, loaded, mgr.iterations(), mgr.latest(), mgr.tracker(), mgr.path_for(3))
    with sp.CheckpointManager(path + "_tiers", local_root=path + "_local", local_every=1,
                              persistent_every=2, drain_bytes_per_second=1 << 30) as tiers:
        step: sp.TierStep = tiers.save(sd, 2)
        drained: int | None = tiers.flush()
        print(step.local, step.committed, drained, tiers.tiered, tiers.resume(sd))


def comms() -> list[sp.Comm]:
    out = sp.thread_comms(2) + [sp.single(), sp.default_comm()]
    if torch.distributed.is_initialized():
        out.append(sp.TorchDistributedComm())
    else:
        out.append(sp.MPI4PyComm())
    print(sp.comm.single().rank())
    return out


def errors(path: str) -> None:
    try:
        sp.load({}, path)
    except sp.NotFoundError as e:
        print(e.code)
    except (sp.InvalidArgumentError, sp.PickleNotAllowedError, sp.DataLossError,
            sp.IOFailureError, sp.PermissionDeniedError, sp.IsDirectoryError,
            sp.NotDirectoryError, sp.FailedPreconditionError, sp.InternalError,
            sp.DeadlineExceededError) as e:
        print(e)
    except sp.Error as e:
        print(e)


def training(path: str) -> None:
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=10)
    plan = spt.TPPlan([(r"qkv\.weight$", "qkv"), (r"fc1\.weight$", spt.gqa(4, 2, 2))], 0, 1)
    state = spt.TrainState(model, opt, schedulers=sched, extra={"step": 0}, layouts=plan)
    state.save(path)
    state.save_async(path + "_async").wait()
    result = state.load(path, strict=False)
    step: int = state.extra["step"]  # the documented resume
    state.extra["step"] = step + 1
    sd = state.state_dict()
    state.load_state_dict(sd)
    with sp.CheckpointManager(path + "_run") as mgr:
        it, res = state.resume(mgr)
        latest: int | None = mgr.agree_on_latest()
        print(it, res, latest)
    sd2 = spt.get_state_dict(model, opt, schedulers=sched, rng=True)
    sp.load(sd2, path)
    spt.set_state_dict(model, opt, sd2, schedulers=sched, rng=True, strict=False)
    spt.init_optimizer_state(opt)
    data = spt.scheduler_state(sched)
    spt.load_scheduler_state(sched, data)
    spt.set_rng_state(spt.rng_state())
    print(result.unexpected_keys, plan.kind("x"))


if __name__ == "__main__":
    tensors_and_layouts(0, 2)
    threading.Thread(target=comms).start()
