// CheckpointManager (include/shardpoint/manager.h): iteration directories,
// the `latest` tracker, retention and the lock. Held by shared_ptr so that an
// async save's after-commit step (which updates the tracker) keeps the
// manager alive until it has run, even if Python dropped it meanwhile.
#include "shardpoint/manager.h"

#include <pybind11/stl.h>

#include <memory>
#include <optional>

#include "python/src/bindings.h"
#include "python/src/errors.h"

namespace py = pybind11;

namespace shardpoint::python {

void RegisterManager(py::module_& m) {
  py::class_<CheckpointManager, std::shared_ptr<CheckpointManager>>(m, "CheckpointManager")
      .def_static(
          "open",
          // `storage` (None: DefaultStorage()) must outlive the manager: the
          // Python package keeps the ones it makes for the process.
          [](const std::string& root, Comm& comm, int keep_last, bool lock,
             const std::optional<std::shared_ptr<Storage>>& storage) {
            ManagerOptions o;
            o.storage = storage ? storage->get() : nullptr;
            o.keep_last = keep_last;
            o.lock = lock;
            return std::shared_ptr<CheckpointManager>(
                Unwrap(CheckpointManager::Open(root, comm, o)));
          },
          py::arg("root"), py::arg("comm"), py::arg("keep_last") = 0, py::arg("lock") = true,
          py::arg("storage") = std::nullopt, py::call_guard<py::gil_scoped_release>())
      .def("close", [](CheckpointManager& mg) { ThrowIfError(mg.Close()); })
      .def_property_readonly("root", &CheckpointManager::root)
      .def("path_for", &CheckpointManager::PathFor, py::arg("iteration"))
      .def("complete_iterations",
           [](const CheckpointManager& mg) { return Unwrap(mg.CompleteIterations()); })
      .def("latest_complete",
           [](const CheckpointManager& mg) { return Unwrap(mg.LatestComplete()); })
      .def("tracker", [](const CheckpointManager& mg) { return Unwrap(mg.Tracker()); })
      .def(
          "agree_on_latest",
          [](const CheckpointManager& mg, Comm& comm) { return Unwrap(mg.AgreeOnLatest(comm)); },
          py::arg("comm"), py::call_guard<py::gil_scoped_release>())
      .def(
          "mark_committed",
          [](CheckpointManager& mg, int64_t iteration, Comm& comm) {
            ThrowIfError(mg.MarkCommitted(iteration, comm));
          },
          py::arg("iteration"), py::arg("comm"), py::call_guard<py::gil_scoped_release>())
      .def(
          "save_async",
          [](const std::shared_ptr<CheckpointManager>& mg, AsyncSaver& saver, const State& state,
             int64_t iteration, Comm& comm, const SaveOptions& options) {
            // The Python caller keeps `comm` alive with the handle.
            return saver.Save(state, mg->PathFor(iteration), comm, options,
                              [mg, iteration, &comm](const SaveStats&) {
                                return mg->MarkCommitted(iteration, comm);
                              });
          },
          py::arg("saver"), py::arg("state"), py::arg("iteration"), py::arg("comm"),
          py::arg("options") = SaveOptions{}, py::call_guard<py::gil_scoped_release>());
}

}  // namespace shardpoint::python
