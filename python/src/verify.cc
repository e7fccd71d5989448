// DescribeCheckpoint and VerifyCheckpoint (shardpoint/verify.h): read a
// checkpoint's manifest, or re-read and check all of it, without a template.
// Results are copied into plain Python-visible values; the GIL is released
// while the C++ call reads storage.
#include "shardpoint/verify.h"

#include <pybind11/stl.h>

#include <memory>
#include <optional>

#include "python/src/bindings.h"
#include "python/src/errors.h"

namespace py = pybind11;

namespace shardpoint::python {

void RegisterVerify(py::module_& m) {
  py::class_<ChunkDescription>(m, "ChunkDescription")
      .def_readonly("box", &ChunkDescription::box)
      .def_readonly("file", &ChunkDescription::file)
      .def_readonly("offset", &ChunkDescription::offset)
      .def_readonly("nbytes", &ChunkDescription::nbytes)
      .def_readonly("checksum", &ChunkDescription::checksum);
  py::class_<TensorDescription>(m, "TensorDescription")
      .def_readonly("key", &TensorDescription::key)
      .def_readonly("dtype", &TensorDescription::dtype)
      .def_readonly("shape", &TensorDescription::shape)
      .def_readonly("chunks", &TensorDescription::chunks)
      .def("nbytes", &TensorDescription::nbytes);
  py::class_<ObjectDescription>(m, "ObjectDescription")
      .def_readonly("key", &ObjectDescription::key)
      .def_readonly("index", &ObjectDescription::index)
      .def_readonly("grid", &ObjectDescription::grid)
      .def_readonly("file", &ObjectDescription::file)
      .def_readonly("offset", &ObjectDescription::offset)
      .def_readonly("nbytes", &ObjectDescription::nbytes);
  py::class_<CheckpointDescription>(m, "CheckpointDescription")
      .def_readonly("format_version", &CheckpointDescription::format_version)
      .def_readonly("files", &CheckpointDescription::files)
      .def_readonly("tensors", &CheckpointDescription::tensors)
      .def_readonly("objects", &CheckpointDescription::objects)
      .def_readonly("has_common", &CheckpointDescription::has_common)
      .def_readonly("common_bytes", &CheckpointDescription::common_bytes)
      // bytes: the C++ API stores any string as metadata
      .def_property_readonly(
          "metadata_bytes",
          [](const CheckpointDescription& d) { return py::bytes(d.metadata_json); })
      .def_property_readonly("json",
                             [](const CheckpointDescription& d) { return py::bytes(d.json); });
  m.def(
      "describe_checkpoint",
      [](const std::string& dir, const std::optional<std::shared_ptr<Storage>>& storage) {
        DescribeOptions o;
        o.storage = storage ? storage->get() : nullptr;
        return Unwrap(DescribeCheckpoint(dir, o));
      },
      py::arg("dir"), py::arg("storage") = std::nullopt, py::call_guard<py::gil_scoped_release>());
  // What a directory holds, decided by the door (shardpoint/checkpoint_kind.h).
  m.def(
      "checkpoint_kind",
      [](const std::string& dir, const std::optional<std::shared_ptr<Storage>>& storage) {
        return std::string(CheckpointKindName(
            Unwrap(DetectCheckpointKind(dir, storage ? storage->get() : nullptr))));
      },
      py::arg("dir"), py::arg("storage") = std::nullopt, py::call_guard<py::gil_scoped_release>());

  py::enum_<VerifyFault::Kind>(m, "VerifyFaultKind")
      .value("TILING", VerifyFault::Kind::kTiling)
      .value("FILE_HEADER", VerifyFault::Kind::kFileHeader)
      .value("CHUNK", VerifyFault::Kind::kChunk)
      .value("OBJECT", VerifyFault::Kind::kObject);
  py::class_<VerifyFault>(m, "VerifyFault")
      .def_readonly("kind", &VerifyFault::kind)
      .def_readonly("key", &VerifyFault::key)
      .def_readonly("chunk", &VerifyFault::chunk)
      .def_readonly("object_index", &VerifyFault::object_index)
      .def_readonly("file", &VerifyFault::file)
      .def_readonly("begin", &VerifyFault::begin)
      .def_readonly("end", &VerifyFault::end)
      .def_readonly("message", &VerifyFault::message);
  py::class_<VerifyReport>(m, "VerifyReport")
      .def_readonly("tensors", &VerifyReport::tensors)
      .def_readonly("chunks_checked", &VerifyReport::chunks_checked)
      .def_readonly("objects_checked", &VerifyReport::objects_checked)
      .def_readonly("bytes_checked", &VerifyReport::bytes_checked)
      .def_readonly("files", &VerifyReport::files)
      .def_readonly("seconds", &VerifyReport::seconds)
      .def_readonly("faults", &VerifyReport::faults);
  m.def(
      "verify_checkpoint",
      [](const std::string& dir, int io_threads, uint64_t read_slice_bytes, uint64_t prefetch_bytes,
         const std::optional<std::shared_ptr<Storage>>& storage) {
        VerifyOptions o;
        o.storage = storage ? storage->get() : nullptr;
        o.io_threads = io_threads;
        o.read_slice_bytes = read_slice_bytes;
        o.prefetch_bytes = prefetch_bytes;
        return Unwrap(VerifyCheckpoint(dir, o));
      },
      py::arg("dir"), py::arg("io_threads") = VerifyOptions{}.io_threads,
      py::arg("read_slice_bytes") = VerifyOptions{}.read_slice_bytes,
      py::arg("prefetch_bytes") = VerifyOptions{}.prefetch_bytes, py::arg("storage") = std::nullopt,
      py::call_guard<py::gil_scoped_release>());
}

}  // namespace shardpoint::python
