// Layout builders of include/shardpoint/layout_{dtensor,megatron,fused,flat}.h.
//
// `data` is an integer address (0 for a layout computed before its memory
// exists; shardpoint/_tensors.py fills it in at save/load time). Errors are
// raised as shardpoint.InvalidArgumentError with the C++ message.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "python/src/bindings.h"
#include "python/src/errors.h"
#include "shardpoint/layout_dtensor.h"
#include "shardpoint/layout_flat.h"
#include "shardpoint/layout_fused.h"
#include "shardpoint/layout_megatron.h"

namespace py = pybind11;

namespace shardpoint::python {
namespace {

void* Ptr(uintptr_t address) { return reinterpret_cast<void*>(address); }

void RegisterDTensor(py::module_& m) {
  py::class_<Placement> p(m, "Placement");
  py::enum_<Placement::Kind>(p, "Kind")
      .value("REPLICATE", Placement::Kind::kReplicate)
      .value("SHARD", Placement::Kind::kShard)
      .value("STRIDED_SHARD", Placement::Kind::kStridedShard);
  p.def_readonly("kind", &Placement::kind)
      .def_readonly("dim", &Placement::dim)
      .def_readonly("split_factor", &Placement::split_factor)
      .def_static("replicate", &Placement::Replicate)
      .def_static("shard", &Placement::Shard, py::arg("dim"))
      .def_static("strided_shard", &Placement::StridedShard, py::arg("dim"),
                  py::arg("split_factor"))
      .def("__repr__", &Placement::ToString);
  m.def(
      "dtensor_local_boxes",
      [](const Shape& global_shape, Shape mesh_shape, Shape coordinate,
         const std::vector<Placement>& placements) {
        return Unwrap(DTensorLocalBoxes(
            global_shape, DeviceMesh{std::move(mesh_shape), std::move(coordinate)}, placements));
      },
      py::arg("global_shape"), py::arg("mesh_shape"), py::arg("coordinate"), py::arg("placements"));
  m.def(
      "dtensor_shard",
      [](std::string key, DType dtype, uintptr_t data, Shape global_shape, Shape mesh_shape,
         Shape coordinate, const std::vector<Placement>& placements) {
        return Unwrap(DTensorShard(std::move(key), dtype, Ptr(data), std::move(global_shape),
                                   DeviceMesh{std::move(mesh_shape), std::move(coordinate)},
                                   placements));
      },
      py::arg("key"), py::arg("dtype"), py::arg("data"), py::arg("global_shape"),
      py::arg("mesh_shape"), py::arg("coordinate"), py::arg("placements"));
  m.def(
      "shard_local",
      [](LocalTensor local, int dim, int index, int count, uintptr_t data) {
        return Unwrap(ShardLocal(std::move(local), dim, index, count, Ptr(data)));
      },
      py::arg("local"), py::arg("dim"), py::arg("index"), py::arg("count"), py::arg("data"));
}

void RegisterMegatron(py::module_& m) {
  m.def(
      "column_parallel",
      [](std::string key, DType dtype, uintptr_t data, Shape global_shape, int tp_rank,
         int tp_size) {
        return Unwrap(ColumnParallel(std::move(key), dtype, Ptr(data), std::move(global_shape),
                                     tp_rank, tp_size));
      },
      py::arg("key"), py::arg("dtype"), py::arg("data"), py::arg("global_shape"),
      py::arg("tp_rank"), py::arg("tp_size"));
  m.def(
      "row_parallel",
      [](std::string key, DType dtype, uintptr_t data, Shape global_shape, int tp_rank,
         int tp_size) {
        return Unwrap(RowParallel(std::move(key), dtype, Ptr(data), std::move(global_shape),
                                  tp_rank, tp_size));
      },
      py::arg("key"), py::arg("dtype"), py::arg("data"), py::arg("global_shape"),
      py::arg("tp_rank"), py::arg("tp_size"));
  m.def("padded_vocab_size", &PaddedVocabSize, py::arg("vocab"), py::arg("divisible_by"),
        py::arg("tp_size"));
  m.def(
      "vocab_parallel",
      [](std::string key, DType dtype, uintptr_t data, int64_t padded_vocab, int64_t hidden,
         int tp_rank, int tp_size) {
        return Unwrap(VocabParallel(std::move(key), dtype, Ptr(data), padded_vocab, hidden, tp_rank,
                                    tp_size));
      },
      py::arg("key"), py::arg("dtype"), py::arg("data"), py::arg("padded_vocab"), py::arg("hidden"),
      py::arg("tp_rank"), py::arg("tp_size"));

  py::class_<PipelineLayout>(m, "PipelineLayout")
      .def(py::init([](int num_layers, int pp_size, int vp_size, std::vector<int> chunk_layers) {
             return PipelineLayout{num_layers, pp_size, vp_size, std::move(chunk_layers)};
           }),
           py::arg("num_layers"), py::arg("pp_size") = 1, py::arg("vp_size") = 1,
           py::arg("chunk_layers") = std::vector<int>{})
      .def_readwrite("num_layers", &PipelineLayout::num_layers)
      .def_readwrite("pp_size", &PipelineLayout::pp_size)
      .def_readwrite("vp_size", &PipelineLayout::vp_size)
      .def_readwrite("chunk_layers", &PipelineLayout::chunk_layers);
  m.def(
      "stage_layers",
      [](const PipelineLayout& p, int pp_rank, int vp_stage) {
        return Unwrap(StageLayers(p, pp_rank, vp_stage));
      },
      py::arg("layout"), py::arg("pp_rank"), py::arg("vp_stage") = 0);
  m.def(
      "global_layer",
      [](const PipelineLayout& p, int pp_rank, int vp_stage, int local_index) {
        return Unwrap(GlobalLayer(p, pp_rank, vp_stage, local_index));
      },
      py::arg("layout"), py::arg("pp_rank"), py::arg("vp_stage"), py::arg("local_index"));
  m.def(
      "layer_key",
      [](const std::string& prefix, int layer, const std::string& name) {
        return LayerKey(prefix, layer, name);
      },
      py::arg("prefix"), py::arg("layer"), py::arg("name"));

  py::class_<ExpertParallel>(m, "ExpertParallel")
      .def(py::init([](int num_experts, int ep_rank, int ep_size) {
             return ExpertParallel{num_experts, ep_rank, ep_size};
           }),
           py::arg("num_experts"), py::arg("ep_rank") = 0, py::arg("ep_size") = 1)
      .def_readwrite("num_experts", &ExpertParallel::num_experts)
      .def_readwrite("ep_rank", &ExpertParallel::ep_rank)
      .def_readwrite("ep_size", &ExpertParallel::ep_size)
      .def("local_experts", &ExpertParallel::local_experts)
      .def("first_expert", &ExpertParallel::first_expert);
  // key_of is a Python callable, called with the GIL held (nothing is released here).
  m.def(
      "per_expert_weights",
      [](const std::function<std::string(int)>& key_of, DType dtype, uintptr_t data,
         Shape expert_shape, int tp_dim, const ExpertParallel& ep, int tp_rank, int tp_size) {
        return Unwrap(PerExpertWeights(key_of, dtype, Ptr(data), std::move(expert_shape), tp_dim,
                                       ep, tp_rank, tp_size));
      },
      py::arg("key_of"), py::arg("dtype"), py::arg("data"), py::arg("expert_shape"),
      py::arg("tp_dim"), py::arg("ep"), py::arg("tp_rank") = 0, py::arg("tp_size") = 1);
  m.def(
      "stacked_experts",
      [](std::string key, DType dtype, uintptr_t data, Shape expert_shape, int tp_dim,
         const ExpertParallel& ep, int tp_rank, int tp_size) {
        return Unwrap(StackedExperts(std::move(key), dtype, Ptr(data), std::move(expert_shape),
                                     tp_dim, ep, tp_rank, tp_size));
      },
      py::arg("key"), py::arg("dtype"), py::arg("data"), py::arg("expert_shape"), py::arg("tp_dim"),
      py::arg("ep"), py::arg("tp_rank") = 0, py::arg("tp_size") = 1);
  m.def(
      "fused_gate_up_experts",
      [](std::string key, DType dtype, uintptr_t data, int64_t inter, int64_t hidden,
         const ExpertParallel& ep, int tp_rank, int tp_size) {
        return Unwrap(FusedGateUpExperts(std::move(key), dtype, Ptr(data), inter, hidden, ep,
                                         tp_rank, tp_size));
      },
      py::arg("key"), py::arg("dtype"), py::arg("data"), py::arg("inter"), py::arg("hidden"),
      py::arg("ep"), py::arg("tp_rank") = 0, py::arg("tp_size") = 1);
}

void RegisterFused(py::module_& m) {
  py::class_<FusedPart>(m, "FusedPart")
      .def(py::init([](std::string key, Shape global_shape, int64_t offset, int64_t size) {
             return FusedPart{std::move(key), std::move(global_shape), offset, size};
           }),
           py::arg("key"), py::arg("global_shape"), py::arg("offset") = 0, py::arg("size") = -1)
      .def_readwrite("key", &FusedPart::key)
      .def_readwrite("global_shape", &FusedPart::global_shape)
      .def_readwrite("offset", &FusedPart::offset)
      .def_readwrite("size", &FusedPart::size);
  m.def(
      "fused_shard",
      [](DType dtype, uintptr_t data, const std::vector<FusedPart>& parts, int dim, int tp_rank,
         int tp_size) {
        return Unwrap(FusedShard(dtype, Ptr(data), parts, dim, tp_rank, tp_size));
      },
      py::arg("dtype"), py::arg("data"), py::arg("parts"), py::arg("dim"), py::arg("tp_rank"),
      py::arg("tp_size"));
  m.def(
      "swiglu_fc1",
      [](const std::string& w_key, const std::string& v_key, DType dtype, uintptr_t data,
         int64_t ffn, Shape trailing, int tp_rank, int tp_size) {
        return Unwrap(
            SwiGluFc1(w_key, v_key, dtype, Ptr(data), ffn, std::move(trailing), tp_rank, tp_size));
      },
      py::arg("w_key"), py::arg("v_key"), py::arg("dtype"), py::arg("data"), py::arg("ffn"),
      py::arg("trailing"), py::arg("tp_rank"), py::arg("tp_size"));
  py::class_<GqaDims>(m, "GqaDims")
      .def(py::init([](int64_t heads, int64_t groups, int64_t head_dim) {
             return GqaDims{heads, groups, head_dim};
           }),
           py::arg("heads"), py::arg("groups"), py::arg("head_dim"))
      .def_readwrite("heads", &GqaDims::heads)
      .def_readwrite("groups", &GqaDims::groups)
      .def_readwrite("head_dim", &GqaDims::head_dim);
  m.def(
      "gqa_qkv",
      [](const std::string& q, const std::string& k, const std::string& v, DType dtype,
         uintptr_t data, const GqaDims& dims, Shape trailing, int tp_rank, int tp_size) {
        return Unwrap(
            GqaQkv(q, k, v, dtype, Ptr(data), dims, std::move(trailing), tp_rank, tp_size));
      },
      py::arg("q_key"), py::arg("k_key"), py::arg("v_key"), py::arg("dtype"), py::arg("data"),
      py::arg("dims"), py::arg("trailing"), py::arg("tp_rank"), py::arg("tp_size"));
  py::class_<GdnDims>(m, "GdnDims")
      .def(py::init([](int64_t key_heads, int64_t key_dim, int64_t value_heads, int64_t value_dim) {
             GdnDims d;
             d.key_heads = key_heads;
             d.key_dim = key_dim;
             d.value_heads = value_heads;
             d.value_dim = value_dim;
             return d;
           }),
           py::arg("key_heads"), py::arg("key_dim"), py::arg("value_heads"), py::arg("value_dim"))
      .def("components", &GdnDims::Components);
  m.def(
      "gdn_in_proj",
      [](const std::string& key, DType dtype, uintptr_t data, const GdnDims& dims, int64_t hidden,
         int tp_rank, int tp_size) {
        return Unwrap(GdnInProj(key, dtype, Ptr(data), dims, hidden, tp_rank, tp_size));
      },
      py::arg("key"), py::arg("dtype"), py::arg("data"), py::arg("dims"), py::arg("hidden"),
      py::arg("tp_rank"), py::arg("tp_size"));
  m.def(
      "gdn_conv1d",
      [](const std::string& key, DType dtype, uintptr_t data, const GdnDims& dims, Shape trailing,
         int tp_rank, int tp_size) {
        return Unwrap(
            GdnConv1d(key, dtype, Ptr(data), dims, std::move(trailing), tp_rank, tp_size));
      },
      py::arg("key"), py::arg("dtype"), py::arg("data"), py::arg("dims"), py::arg("trailing"),
      py::arg("tp_rank"), py::arg("tp_size"));
}

void RegisterFlat(py::module_& m) {
  py::class_<FlatBufferLayout>(m, "FlatBufferLayout")
      .def_readonly("offsets", &FlatBufferLayout::offsets)
      .def_readonly("sizes", &FlatBufferLayout::sizes)
      .def_readonly("total", &FlatBufferLayout::total)
      .def_readonly("shard_size", &FlatBufferLayout::shard_size)
      .def_readonly("dp_size", &FlatBufferLayout::dp_size);
  m.def(
      "plan_flat_buffer",
      [](const std::vector<LocalTensor>& params, int64_t align, int dp_size) {
        return Unwrap(PlanFlatBuffer(params, align, dp_size));
      },
      py::arg("params"), py::arg("align"), py::arg("dp_size"));
  m.def(
      "flat_buffer_shard",
      [](const std::vector<LocalTensor>& params, const FlatBufferLayout& layout, int dp_rank,
         uintptr_t shard_data) {
        return Unwrap(FlatBufferShard(params, layout, dp_rank, Ptr(shard_data)));
      },
      py::arg("params"), py::arg("layout"), py::arg("dp_rank"), py::arg("shard_data"));
}

}  // namespace

void RegisterLayouts(py::module_& m) {
  RegisterDTensor(m);
  RegisterMegatron(m);
  RegisterFused(m);
  RegisterFlat(m);
}

}  // namespace shardpoint::python
