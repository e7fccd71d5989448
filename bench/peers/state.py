"""The sharded state every peer saves and loads.

A transformer-like model (Megatron names, as tests/testing/transformer.cc): bf16
parameters and, per parameter, fp32 main parameter, Adam exp_avg and
exp_avg_sq (14 bytes per parameter), tensor-parallel over W ranks. Layouts:

  same       TP=W as saved: column-parallel tensors (QKV, fc1 and its bias,
             embedding, output layer) cut on dim 0, row-parallel ones
             (attention projection, fc2) on dim 1, as Megatron does; norms
             replicated.
  tp_dp      TP=W/2 x DP=2: the same cuts into half as many pieces; ranks r
             and r + W/2 hold the same piece (data-parallel replicas).
  other_dim  TP=W with every matrix cut along its other dimension: every rank
             needs a strip of every saved shard (the hardest resharding for a
             reader).

Values are a function of the global element index, so any box of any tensor
can be generated or checked without the rest of the tensor.
"""

import zlib

import torch

OPTIMIZER_STATES = ("fp32_param", "exp_avg", "exp_avg_sq")
LAYOUTS = ("same", "tp_dp", "other_dim")


class Spec:
    """A global tensor: key, dtype, shape, the dim it is cut on per layout (None: replicated)."""

    def __init__(self, key, dtype, shape, dim):
        self.key, self.dtype, self.shape = key, dtype, tuple(shape)
        other = dim if dim is None or len(shape) == 1 else 1 - dim
        self.dims = {"same": dim, "tp_dp": dim, "other_dim": other}
        self.seed = zlib.crc32(key.encode())

    def nbytes(self):
        n = 1
        for s in self.shape:
            n *= s
        return n * torch.empty((), dtype=self.dtype).element_size()

    def box(self, layout, rank, world):
        """[(lo, hi)] per axis of the piece `rank` holds under `layout`."""
        d = self.dims[layout]
        out = [(0, s) for s in self.shape]
        if d is not None:
            count = tp_size(layout, world)
            n, index = self.shape[d] // count, rank % count
            out[d] = (index * n, (index + 1) * n)
        return out

    def local_shape(self, layout, world):
        return tuple(hi - lo for lo, hi in self.box(layout, 0, world))


def tp_size(layout, world):
    return world // 2 if layout == "tp_dp" else world


def model_specs(hidden, layers, world):
    h, f, v = hidden, 4 * hidden, 16 * hidden
    params = [("embedding.word_embeddings.weight", (v, h), 0)]
    for layer in range(layers):
        p = f"decoder.layers.{layer}."
        params += [(p + "input_layernorm.weight", (h,), None),
                   (p + "self_attention.linear_qkv.weight", (3 * h, h), 0),
                   (p + "self_attention.linear_proj.weight", (h, h), 1),
                   (p + "pre_mlp_layernorm.weight", (h,), None),
                   (p + "mlp.linear_fc1.weight", (f, h), 0),
                   (p + "mlp.linear_fc1.bias", (f,), 0),
                   (p + "mlp.linear_fc2.weight", (h, f), 1)]
    params += [("decoder.final_layernorm.weight", (h,), None),
               ("output_layer.weight", (v, h), 0)]
    specs = [Spec(k, torch.bfloat16, s, d) for k, s, d in params]
    for state in OPTIMIZER_STATES:
        specs += [Spec(f"optimizer.state.{state}.{k}", torch.float32, s, d) for k, s, d in params]
    for s in specs:
        for d in range(len(s.shape)):
            if s.dims["same"] is not None and s.shape[d] % world:
                raise ValueError(f"{s.key}: dim {d} of {s.shape} is not divisible by {world} ranks")
    return specs


def scale_model(target_bytes, world, layers=8):
    """Smallest hidden size (a multiple of 64) whose state holds >= target_bytes."""
    h = 64
    while True:
        specs = model_specs(h, layers, world)
        if sum(s.nbytes() for s in specs) >= target_bytes:
            return h, specs
        h += 64


_BITS = {torch.bfloat16: (torch.int16, -16385), torch.float32: (torch.int32, -1073741825)}


def _values(spec, box, out):
    """Fills `out` (the tensor of `box`) with bit patterns of its global
    indices: hash(i) (1-D), hash(row) ^ hash'(column) (2-D: one broadcast xor,
    so filling and checking run at memory speed; rows and columns differ from
    each other, so a shifted, transposed or missing piece does not match). The
    exponent's top bit is cleared: every value is finite."""
    itype, mask = _BITS[spec.dtype]
    bits = out.view(itype)
    if len(spec.shape) == 1:
        bits.copy_(_hash(spec.seed, torch.arange(*box[0]), itype))
    else:
        rows = _hash(spec.seed, torch.arange(*box[0]), itype)
        cols = _hash(spec.seed + 1, torch.arange(*box[1]), itype)
        torch.bitwise_xor(rows[:, None], cols[None, :], out=bits)
    bits.bitwise_and_(mask)


def _hash(seed, idx, itype):
    """Pseudo-random `itype` integers of int64 indices (Fibonacci hashing; int64 wraps)."""
    return (((idx + seed) * -7046029254386353131) >> 24).to(itype)


def fill(spec, layout, rank, world, out):
    _values(spec, spec.box(layout, rank, world), out)


def check(spec, layout, rank, world, got):
    """Raises AssertionError naming the key unless `got` holds this rank's piece bit for bit."""
    want = torch.empty_like(got)
    _values(spec, spec.box(layout, rank, world), want)
    itype = _BITS[spec.dtype][0]
    if not torch.equal(want.view(itype), got.view(itype)):
        raise AssertionError(f"rank {rank}: '{spec.key}' ({layout} layout) loaded wrong values")


def overlap(a, b):
    """Intersection of two boxes ([(lo, hi)] per axis), or None."""
    out = [(max(x[0], y[0]), min(x[1], y[1])) for x, y in zip(a, b)]
    return out if all(lo < hi for lo, hi in out) else None


def slices(box, within):
    """Slices selecting `box` from a tensor holding `within`."""
    return tuple(slice(lo - w[0], hi - w[0]) for (lo, hi), w in zip(box, within))
