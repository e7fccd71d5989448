// Hugging Face interop (shardpoint/hf.h): mappings, DescribeHf, HfShard,
// LoadFromHf, ExportHf, ConvertHfToShardpoint and WriteHfModel for the
// Python package's shardpoint.hf. Conversion only; the GIL is released
// while a C++ call reads or writes storage or waits on other ranks.
#include "shardpoint/hf.h"

#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <tuple>

#include "python/src/bindings.h"
#include "python/src/errors.h"
#include "shardpoint/hf_placement.h"
#include "shardpoint/hf_rules.h"

namespace py = pybind11;

namespace shardpoint::python {
namespace {

using Variables = std::map<std::string, int64_t>;
// storage_options' Storage (python/shardpoint/_storage.py); None: DefaultStorage().
using OptStorage = std::optional<std::shared_ptr<Storage>>;
Storage* Get(const OptStorage& s) { return s ? s->get() : nullptr; }

ExportHfOptions ExportOptions(uint64_t max_shard_size, std::optional<DType> dtype, int io_threads,
                              size_t block_bytes, Variables variables, bool overwrite,
                              const OptStorage& storage) {
  ExportHfOptions o;
  o.storage = Get(storage);
  o.overwrite = overwrite;
  o.max_shard_size = max_shard_size;
  o.dtype = dtype;
  o.io_threads = io_threads;
  o.block_bytes = block_bytes;
  o.variables = std::move(variables);
  return o;
}

void RegisterMapping(py::module_& m) {
  py::class_<HfMapping>(m, "HfMapping")
      .def_readonly("name", &HfMapping::name)
      .def_readonly("keep_unmatched", &HfMapping::keep_unmatched)
      .def_readonly("variables", &HfMapping::variables)
      .def_readonly("skip", &HfMapping::skip)
      .def_property_readonly("num_rules", [](const HfMapping& mp) { return mp.rules.size(); });
  m.def("shipped_hf_mapping_names", &ShippedHfMappingNames);
  m.def("shipped_hf_mapping",
        [](const std::string& name) { return Unwrap(ShippedHfMapping(name)); });
  m.def(
      "parse_hf_mapping",
      [](const std::string& json, const std::string& source) {
        return Unwrap(ParseHfMapping(json, source));
      },
      py::arg("json"), py::arg("source") = "<mapping>");
  m.def(
      "read_hf_mapping", [](const std::string& path) { return Unwrap(ReadHfMapping(path)); },
      py::call_guard<py::gil_scoped_release>());
  m.def("identity_hf_mapping", &IdentityHfMapping);
}

void RegisterDescribe(py::module_& m) {
  // Writable: load() rebuilds rank 0's descriptions on the other ranks.
  py::class_<HfKeyInfo>(m, "HfKeyInfo")
      .def(py::init<>())
      .def_readwrite("key", &HfKeyInfo::key)
      .def_readwrite("dtype", &HfKeyInfo::dtype)
      .def_readwrite("shape", &HfKeyInfo::shape)
      .def_readwrite("split", &HfKeyInfo::split)
      .def_readwrite("heads", &HfKeyInfo::heads)
      .def_readwrite("groups", &HfKeyInfo::groups)
      .def_readwrite("hf", &HfKeyInfo::hf);
  m.def(
      "describe_hf",
      [](const std::string& dir, const HfMapping& mapping, Variables variables,
         const OptStorage& storage) {
        HfOptions o;
        o.variables = std::move(variables);
        o.storage = Get(storage);
        return Unwrap(DescribeHf(dir, mapping, o));
      },
      py::arg("dir"), py::arg("mapping"), py::arg("variables") = Variables{},
      py::arg("storage") = std::nullopt, py::call_guard<py::gil_scoped_release>());
  m.def(
      "hf_shard",
      [](const HfKeyInfo& info, DType dtype, uintptr_t data, int tp_rank, int tp_size, int ep_rank,
         int ep_size) {
        return Unwrap(HfShard(info, dtype, reinterpret_cast<void*>(data),
                              HfParallel{tp_rank, tp_size, ep_rank, ep_size}));
      },
      py::arg("info"), py::arg("dtype"), py::arg("data"), py::arg("tp_rank"), py::arg("tp_size"),
      py::arg("ep_rank"), py::arg("ep_size"));
  m.def("hf_default_load_options", &HfDefaultLoadOptions);
  m.def(
      "place_in_hf",
      [](const std::string& dir, const HfMapping& mapping, Variables variables,
         const OptStorage& storage) {
        HfOptions o;
        o.variables = std::move(variables);
        o.storage = Get(storage);
        std::vector<HfPlacement> places = Unwrap(PlaceInHf(dir, mapping, o));
        std::vector<std::tuple<std::string, std::string, std::string, Shape, int64_t, Shape, Shape>>
            out;
        for (HfPlacement& p : places) {
          out.emplace_back(std::move(p.key), std::move(p.state), std::move(p.hf),
                           std::move(p.hf_shape), p.hf_offset, std::move(p.box.offset),
                           std::move(p.box.shape));
        }
        return out;
      },
      py::arg("dir"), py::arg("mapping"), py::arg("variables") = Variables{},
      py::arg("storage") = std::nullopt, py::call_guard<py::gil_scoped_release>());
}

void RegisterTransfer(py::module_& m) {
  m.def(
      "load_from_hf",
      [](State& state, const std::string& dir, const HfMapping& mapping, Comm& comm,
         const LoadOptions& load, Variables variables) {
        HfLoadOptions o;
        o.load = load;
        o.variables = std::move(variables);
        return Unwrap(LoadFromHf(state, dir, mapping, comm, o));
      },
      py::arg("state"), py::arg("dir"), py::arg("mapping"), py::arg("comm"), py::arg("load"),
      py::arg("variables") = Variables{}, py::call_guard<py::gil_scoped_release>());
  py::class_<ExportHfStats>(m, "ExportHfStats")
      .def_readonly("files", &ExportHfStats::files)
      .def_readonly("tensors", &ExportHfStats::tensors)
      .def_readonly("bytes", &ExportHfStats::bytes)
      .def_readonly("seconds", &ExportHfStats::seconds);
  m.def(
      "export_hf",
      [](const std::string& src, const std::string& out, const HfMapping& mapping,
         uint64_t max_shard_size, std::optional<DType> dtype, int io_threads, size_t block_bytes,
         Variables variables, bool overwrite, const OptStorage& storage) {
        return Unwrap(ExportHf(src, out, mapping,
                               ExportOptions(max_shard_size, dtype, io_threads, block_bytes,
                                             std::move(variables), overwrite, storage)));
      },
      py::arg("src"), py::arg("out"), py::arg("mapping"), py::arg("max_shard_size"),
      py::arg("dtype"), py::arg("io_threads"), py::arg("block_bytes"), py::arg("variables"),
      py::arg("overwrite") = false, py::arg("storage") = std::nullopt,
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "convert_hf_to_shardpoint",
      [](const std::string& src, const std::string& out, const HfMapping& mapping,
         std::optional<DType> dtype, int io_threads, size_t block_bytes, Variables variables,
         bool overwrite, const OptStorage& storage) {
        return Unwrap(
            ConvertHfToShardpoint(src, out, mapping,
                                  ExportOptions(0, dtype, io_threads, block_bytes,
                                                std::move(variables), overwrite, storage)));
      },
      py::arg("src"), py::arg("out"), py::arg("mapping"), py::arg("dtype"), py::arg("io_threads"),
      py::arg("block_bytes"), py::arg("variables"), py::arg("overwrite") = false,
      py::arg("storage") = std::nullopt, py::call_guard<py::gil_scoped_release>());
}

void RegisterWrite(py::module_& m) {
  // (name, dtype, shape, bytes): the bytes are copied once into the C++ call.
  using Item = std::tuple<std::string, DType, Shape, py::bytes>;
  m.def(
      "write_hf_model",
      [](const std::string& dir, const std::vector<Item>& items, uint64_t max_shard_size,
         std::map<std::string, std::string> metadata, std::string config_json,
         const OptStorage& storage) {
        std::vector<HfTensor> tensors;
        tensors.reserve(items.size());
        for (const auto& [name, dtype, shape, bytes] : items) {
          tensors.push_back(HfTensor{name, dtype, shape, std::string(bytes)});
        }
        HfWriteOptions o;
        o.max_shard_size = max_shard_size;
        o.metadata = std::move(metadata);
        o.config_json = std::move(config_json);
        o.storage = Get(storage);
        py::gil_scoped_release release;
        ThrowIfError(WriteHfModel(dir, tensors, o));
      },
      py::arg("dir"), py::arg("tensors"), py::arg("max_shard_size"), py::arg("metadata"),
      py::arg("config_json"), py::arg("storage") = std::nullopt);
}

}  // namespace

void RegisterHf(py::module_& m) {
  RegisterMapping(m);
  RegisterDescribe(m);
  RegisterTransfer(m);
  RegisterWrite(m);
}

}  // namespace shardpoint::python
