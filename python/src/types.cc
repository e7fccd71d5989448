// Value types (DType, Box, Segment, FlatRange, LocalTensor, Object, State,
// options, results) and the basic layout builders.
//
// A LocalTensor's `data` is a plain integer address here: the Python package
// takes it from a numpy array or torch tensor and keeps that object alive for
// the duration of the call (see shardpoint/_tensors.py). Vectors are converted
// by copy (pybind11/stl.h): assign a whole list, read a whole list.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <cstdint>

#include "python/src/bindings.h"
#include "python/src/errors.h"
#include "shardpoint/checkpoint.h"
#include "shardpoint/layout.h"
#include "shardpoint/plan_cache.h"
#include "shardpoint/state.h"
#include "shardpoint/tensor.h"

namespace py = pybind11;

namespace shardpoint::python {
namespace {

void* Ptr(uintptr_t address) { return reinterpret_cast<void*>(address); }

}  // namespace

void RegisterTypes(py::module_& m) {
  py::enum_<DType>(m, "DType")
      .value("BOOL", DType::kBool)
      .value("U8", DType::kU8)
      .value("I8", DType::kI8)
      .value("I16", DType::kI16)
      .value("U16", DType::kU16)
      .value("I32", DType::kI32)
      .value("U32", DType::kU32)
      .value("I64", DType::kI64)
      .value("U64", DType::kU64)
      .value("F16", DType::kF16)
      .value("BF16", DType::kBF16)
      .value("F32", DType::kF32)
      .value("F64", DType::kF64)
      .value("F8_E4M3", DType::kF8E4M3)
      .value("F8_E5M2", DType::kF8E5M2);
  m.def("dtype_size", &DTypeSize);
  m.def("dtype_name", [](DType d) { return std::string(DTypeName(d)); });
  m.def("parse_dtype", [](const std::string& s) { return Unwrap(ParseDType(s)); });

  py::class_<Box>(m, "Box")
      .def(py::init<>())
      .def(py::init<Shape, Shape>(), py::arg("offset"), py::arg("shape"))
      .def_readwrite("offset", &Box::offset)
      .def_readwrite("shape", &Box::shape)
      .def("__eq__", [](const Box& a, const Box& b) { return a == b; })
      .def("__repr__", [](const Box& b) { return "Box" + b.ToString(); });

  py::class_<Segment>(m, "Segment")
      .def(py::init<>())
      .def(py::init([](std::string key, Shape global_shape, Box global_box, Shape local_offset) {
             return Segment{std::move(key), std::move(global_shape), std::move(global_box),
                            std::move(local_offset)};
           }),
           py::arg("key"), py::arg("global_shape"), py::arg("global_box"), py::arg("local_offset"))
      .def_readwrite("key", &Segment::key)
      .def_readwrite("global_shape", &Segment::global_shape)
      .def_readwrite("global_box", &Segment::global_box)
      .def_readwrite("local_offset", &Segment::local_offset)
      .def("__repr__", [](const Segment& s) {
        return "Segment(" + s.key + " " + ShapeToString(s.global_shape) + " " +
               s.global_box.ToString() + " at " + ShapeToString(s.local_offset) + ")";
      });

  py::class_<FlatRange>(m, "FlatRange")
      .def(py::init([](int64_t b, int64_t e) {
             return FlatRange{b, e};
           }),
           py::arg("begin"), py::arg("end"))
      .def_readwrite("begin", &FlatRange::begin)
      .def_readwrite("end", &FlatRange::end)
      .def("size", &FlatRange::size)
      .def("__eq__", [](const FlatRange& a, const FlatRange& b) { return a == b; })
      .def("__repr__", [](const FlatRange& r) {
        return "FlatRange(" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ")";
      });

  py::class_<LocalTensor>(m, "LocalTensor")
      .def(py::init<>())
      .def_readwrite("dtype", &LocalTensor::dtype)
      .def_property(
          "data", [](const LocalTensor& t) { return reinterpret_cast<uintptr_t>(t.data); },
          [](LocalTensor& t, uintptr_t a) { t.data = Ptr(a); })
      .def_readwrite("shape", &LocalTensor::shape)
      .def_readwrite("strides", &LocalTensor::strides)
      .def_readwrite("segments", &LocalTensor::segments)
      .def_readwrite("flat", &LocalTensor::flat)
      .def("__copy__", [](const LocalTensor& t) { return t; })
      .def("__deepcopy__", [](const LocalTensor& t, py::dict) { return t; });
  m.def("validate_local_tensor",
        [](const LocalTensor& t) { ThrowIfError(ValidateLocalTensor(t)); });

  py::class_<Object>(m, "Object")
      .def(py::init([](std::string key, py::bytes bytes, Shape index, Shape grid) {
             return Object{std::move(key), std::string(bytes), std::move(index), std::move(grid)};
           }),
           py::arg("key"), py::arg("bytes") = py::bytes(), py::arg("index") = Shape{},
           py::arg("grid") = Shape{})
      .def_readwrite("key", &Object::key)
      .def_property(
          "bytes", [](const Object& o) { return py::bytes(o.bytes); },
          [](Object& o, py::bytes b) { o.bytes = std::string(b); })
      .def_readwrite("index", &Object::index)
      .def_readwrite("grid", &Object::grid);

  py::class_<State>(m, "State")
      .def(py::init<>())
      .def_readwrite("tensors", &State::tensors)
      .def_readwrite("objects", &State::objects)
      .def_property(
          "common",
          [](const State& s) -> py::object {
            if (!s.common) return py::none();
            return py::bytes(*s.common);
          },
          [](State& s, std::optional<py::bytes> b) {
            if (b) {
              s.common = std::string(*b);
            } else {
              s.common.reset();
            }
          })
      .def_readwrite("metadata_json", &State::metadata_json)
      // The stored text as bytes: the C++ API stores any string, UTF-8 or not.
      .def_property_readonly("metadata_bytes",
                             [](const State& s) { return py::bytes(s.metadata_json); });

  py::class_<SavePlanCache>(m, "SavePlanCache")
      .def(py::init<>())
      .def_property_readonly("hits", &SavePlanCache::hits)
      .def_property_readonly("misses", &SavePlanCache::misses)
      .def("clear", &SavePlanCache::Clear);

  py::class_<SaveOptions>(m, "SaveOptions")
      .def(py::init<>())
      // The cache object is kept alive by the options that point to it.
      .def_property(
          "plan_cache", [](const SaveOptions& o) { return o.plan_cache; },
          py::cpp_function([](SaveOptions& o, SavePlanCache* c) { o.plan_cache = c; },
                           py::keep_alive<1, 2>()),
          py::return_value_policy::reference)
      .def_readwrite("io_threads", &SaveOptions::io_threads)
      .def_readwrite("staging_bytes", &SaveOptions::staging_bytes)
      .def_readwrite("direct_io", &SaveOptions::direct_io)
      .def_readwrite("preallocate", &SaveOptions::preallocate)
      .def_readwrite("overwrite", &SaveOptions::overwrite)
      .def_readwrite("verify_replicas", &SaveOptions::verify_replicas)
      // A Storage (storage.cc; None: DefaultStorage()), kept alive by the options.
      .def(
          "set_storage", [](SaveOptions& o, Storage* s) { o.storage = s; }, py::arg("storage"),
          py::keep_alive<1, 2>())
      // A Python callable, called on rank 0 from the thread running the save
      // (pybind11 takes the GIL for the call); it must not raise.
      .def_readwrite("log", &SaveOptions::log);
  py::class_<LoadOptions>(m, "LoadOptions")
      .def(py::init<>())
      .def_readwrite("io_threads", &LoadOptions::io_threads)
      .def_readwrite("allow_missing_keys", &LoadOptions::allow_missing_keys)
      .def_readwrite("allow_unexpected_keys", &LoadOptions::allow_unexpected_keys)
      .def_readwrite("allow_dtype_conversion", &LoadOptions::allow_dtype_conversion)
      .def_readwrite("allow_shape_mismatch", &LoadOptions::allow_shape_mismatch)
      .def_readwrite("common_optional", &LoadOptions::common_optional)
      .def_readwrite("verify_checksums", &LoadOptions::verify_checksums)
      .def_readwrite("read_slice_bytes", &LoadOptions::read_slice_bytes)
      .def_readwrite("prefetch_bytes", &LoadOptions::prefetch_bytes)
      .def_readwrite("read_gap_bytes", &LoadOptions::read_gap_bytes)
      .def_readwrite("direct_io", &LoadOptions::direct_io)
      .def_readwrite("cooperative", &LoadOptions::cooperative)
      .def_readwrite("cooperative_round_bytes", &LoadOptions::cooperative_round_bytes)
      .def_readwrite("tensor_groups", &LoadOptions::tensor_groups)
      .def(
          "set_storage", [](LoadOptions& o, Storage* s) { o.storage = s; }, py::arg("storage"),
          py::keep_alive<1, 2>())
      // A Python callable, called with each group from the thread running the
      // load (pybind11 takes the GIL for the call); it must not raise.
      .def_readwrite("on_group_loaded", &LoadOptions::on_group_loaded);
  py::class_<SaveStats>(m, "SaveStats")
      .def_readonly("bytes_written", &SaveStats::bytes_written)
      .def_readonly("rank_bytes", &SaveStats::rank_bytes)
      .def_readonly("num_files", &SaveStats::num_files)
      .def_readonly("num_chunks", &SaveStats::num_chunks)
      .def_readonly("seconds", &SaveStats::seconds)
      .def_readonly("plan_seconds", &SaveStats::plan_seconds)
      .def_readonly("plan_cached", &SaveStats::plan_cached)
      .def_readonly("cleanup_error", &SaveStats::cleanup_error);
  py::class_<LoadResult>(m, "LoadResult")
      .def_readonly("missing_keys", &LoadResult::missing_keys)
      .def_readonly("unexpected_keys", &LoadResult::unexpected_keys)
      .def_readonly("bytes_read", &LoadResult::bytes_read)
      .def_readonly("bytes_received", &LoadResult::bytes_received)
      .def_readonly("requests", &LoadResult::requests)
      .def_readonly("bytes_needed", &LoadResult::bytes_needed)
      .def_readonly("bytes_local", &LoadResult::bytes_local)
      .def_readonly("bytes_peer", &LoadResult::bytes_peer)
      .def_readonly("bytes_persistent", &LoadResult::bytes_persistent)
      .def_readonly("seconds", &LoadResult::seconds);

  // Basic layout builders (include/shardpoint/layout.h). `data` is an address.
  m.def("chunk_sizes", &ChunkSizes, py::arg("n"), py::arg("count"));
  m.def(
      "whole_tensor",
      [](std::string key, DType dtype, uintptr_t data, Shape shape) {
        return WholeTensor(std::move(key), dtype, Ptr(data), std::move(shape));
      },
      py::arg("key"), py::arg("dtype"), py::arg("data"), py::arg("shape"));
  m.def(
      "split_tensor",
      [](std::string key, DType dtype, uintptr_t data, Shape global_shape, int dim, int index,
         int count) {
        return Unwrap(SplitTensor(std::move(key), dtype, Ptr(data), std::move(global_shape), dim,
                                  index, count));
      },
      py::arg("key"), py::arg("dtype"), py::arg("data"), py::arg("global_shape"), py::arg("dim"),
      py::arg("index"), py::arg("count"));
  m.def(
      "split_tensor_sizes",
      [](std::string key, DType dtype, uintptr_t data, Shape global_shape, int dim,
         std::vector<int64_t> sizes, int index) {
        return Unwrap(SplitTensorSizes(std::move(key), dtype, Ptr(data), std::move(global_shape),
                                       dim, std::move(sizes), index));
      },
      py::arg("key"), py::arg("dtype"), py::arg("data"), py::arg("global_shape"), py::arg("dim"),
      py::arg("sizes"), py::arg("index"));
  m.def(
      "flat_shard",
      [](LocalTensor full_layout, FlatRange range, uintptr_t data) {
        return Unwrap(FlatShard(std::move(full_layout), range, Ptr(data)));
      },
      py::arg("full_layout"), py::arg("range"), py::arg("data"));
  m.def(
      "concat",
      [](std::vector<LocalTensor> parts, int dim, uintptr_t data) {
        return Unwrap(Concat(std::move(parts), dim, Ptr(data)));
      },
      py::arg("parts"), py::arg("dim"), py::arg("data"));
}

}  // namespace shardpoint::python
