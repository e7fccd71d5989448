// AsyncSaver and SaveHandle (include/shardpoint/async_save.h).
//
// AsyncSaver.save stages (copies) the state with the GIL released and returns
// a SaveHandle; the C++ background thread then runs the save, calling back
// into Python comms with the GIL reacquired. Hence every call that may wait
// for that thread (save, wait, wait_for_pending, and the AsyncSaver's
// destructor) releases the GIL, or a Python comm would deadlock.
#include "shardpoint/async_save.h"

#include "python/src/bindings.h"
#include "python/src/errors.h"

namespace py = pybind11;

namespace shardpoint::python {
namespace {

struct ReleaseGilDelete {
  void operator()(AsyncSaver* saver) const {
    if (PyGILState_Check()) {
      py::gil_scoped_release nogil;
      delete saver;
    } else {
      delete saver;
    }
  }
};

}  // namespace

void RegisterAsyncSave(py::module_& m) {
  py::class_<SaveHandle>(m, "SaveHandle")
      .def("valid", &SaveHandle::valid)
      .def("done", &SaveHandle::Done)
      .def(
          "wait", [](const SaveHandle& h) { return Unwrap(h.Wait()); },
          py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("stall_seconds", &SaveHandle::stall_seconds)
      .def_property_readonly("staged_bytes", &SaveHandle::staged_bytes)
      .def_property_readonly("pool_grew", &SaveHandle::pool_grew);

  py::class_<AsyncSaver, std::unique_ptr<AsyncSaver, ReleaseGilDelete>>(m, "AsyncSaver")
      .def(py::init([](uint64_t max_staging_bytes, bool huge_pages) {
             return std::unique_ptr<AsyncSaver, ReleaseGilDelete>(
                 new AsyncSaver(AsyncSaverOptions{max_staging_bytes, huge_pages}));
           }),
           py::arg("max_staging_bytes") = 0, py::arg("huge_pages") = false)
      .def(
          "reserve", [](AsyncSaver& s, uint64_t bytes) { ThrowIfError(s.Reserve(bytes)); },
          py::arg("bytes"), py::call_guard<py::gil_scoped_release>())
      .def(
          "reserve_state",
          [](AsyncSaver& s, const State& state) { ThrowIfError(s.Reserve(state)); },
          py::arg("state"), py::call_guard<py::gil_scoped_release>())
      .def_static(
          "staging_bytes",
          [](const State& state) { return Unwrap(AsyncSaver::StagingBytes(state)); },
          py::arg("state"))
      .def_property_readonly("pool_huge_pages", &AsyncSaver::pool_huge_pages)
      .def(
          "save",
          [](AsyncSaver& s, const State& state, const std::string& dir, Comm& comm,
             const SaveOptions& options) { return s.Save(state, dir, comm, options); },
          py::arg("state"), py::arg("dir"), py::arg("comm"), py::arg("options") = SaveOptions{},
          py::call_guard<py::gil_scoped_release>())
      .def(
          "wait_for_pending", [](AsyncSaver& s) { ThrowIfError(s.WaitForPending()); },
          py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("pool_bytes", &AsyncSaver::pool_bytes);
}

}  // namespace shardpoint::python
