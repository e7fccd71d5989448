// TieredManager (include/shardpoint/tiered_manager.h): the two tiers under one
// manager. Options are flat keyword arguments; the Python CheckpointManager
// opens one when it is given a local root (python/shardpoint/_manager.py).
#include <pybind11/stl.h>

#include <tuple>

#include "python/src/bindings.h"
#include "python/src/errors.h"
#include "shardpoint/async_save.h"
#include "shardpoint/tiered_manager.h"

namespace py = pybind11;

namespace shardpoint::python {

void RegisterTiered(py::module_& m) {
  py::class_<TieredManager, std::shared_ptr<TieredManager>>(m, "TieredManager")
      .def_static(
          "open",
          [](const std::string& root, Comm& comm, const std::string& local_root,
             const std::string& node_id, int replicas, int64_t local_every,
             int64_t persistent_every, bool drain, uint64_t drain_bytes_per_second, int keep_local,
             int keep_last, bool lock, const std::optional<std::shared_ptr<Storage>>& storage) {
            TieredOptions o;
            // The persistent tier's storage (storage_options; it must outlive
            // the manager: python/shardpoint/_storage.py keeps it).
            o.persistent.storage = storage ? storage->get() : nullptr;
            o.persistent.keep_last = keep_last;
            o.persistent.lock = lock;
            o.local.local_root = local_root;
            o.local.node_id = node_id;
            o.local.replicas = replicas;
            o.local_every = local_every;
            o.persistent_every = persistent_every;
            o.drain = drain;
            o.drain_bytes_per_second = drain_bytes_per_second;
            o.keep_local = keep_local;
            return std::shared_ptr<TieredManager>(Unwrap(TieredManager::Open(root, comm, o)));
          },
          py::arg("root"), py::arg("comm"), py::arg("local_root"), py::arg("node_id") = "",
          py::arg("replicas") = 1, py::arg("local_every") = 1, py::arg("persistent_every") = 0,
          py::arg("drain") = true, py::arg("drain_bytes_per_second") = 0, py::arg("keep_local") = 2,
          py::arg("keep_last") = 0, py::arg("lock") = true, py::arg("storage") = std::nullopt,
          py::call_guard<py::gil_scoped_release>())
      .def_property_readonly(
          "persistent", [](TieredManager& t) -> CheckpointManager& { return t.persistent(); },
          py::return_value_policy::reference_internal)
      .def("draining", &TieredManager::draining)
      .def(
          "save",
          [](TieredManager& t, const State& state, int64_t iteration, Comm& comm,
             std::optional<AsyncSaver*> saver) {
            // With `saver` the local save runs in its background thread
            // (the Python manager keeps the saver alive and waits for the
            // handle before the Comm's next collective).
            TieredStep s = Unwrap(t.Save(state, iteration, comm, saver.value_or(nullptr)));
            std::optional<SaveHandle> handle;
            if (s.handle.valid()) handle = s.handle;
            // A C++ tuple: converted once the GIL is held again.
            return std::make_tuple(s.local, s.persistent, s.committed, handle);
          },
          py::arg("state"), py::arg("iteration"), py::arg("comm"), py::arg("saver") = std::nullopt,
          py::call_guard<py::gil_scoped_release>())
      .def(
          "flush", [](TieredManager& t, Comm& comm) { return Unwrap(t.Flush(comm)); },
          py::arg("comm"), py::call_guard<py::gil_scoped_release>())
      .def(
          "resume",
          [](TieredManager& t, State& state, Comm& comm, const LoadOptions& options) {
            // None: neither tier has a checkpoint (nothing loaded).
            std::optional<TieredResume> r = Unwrap(t.Resume(state, comm, options));
            return r ? std::optional(std::make_tuple(r->iteration, r->from_local, r->load))
                     : std::nullopt;
          },
          py::arg("state"), py::arg("comm"), py::arg("options") = LoadOptions{},
          py::call_guard<py::gil_scoped_release>());
}

}  // namespace shardpoint::python
