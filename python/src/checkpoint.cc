// save / load: the collective entry points, with the GIL released for the
// whole C++ call (planning, I/O, waiting on other ranks). Python comms
// reacquire it inside their callbacks (comm.cc).
#include "shardpoint/checkpoint.h"

#include "python/src/bindings.h"
#include "python/src/errors.h"

namespace py = pybind11;

namespace shardpoint::python {

void RegisterCheckpoint(py::module_& m) {
  m.def(
      "save",
      [](const State& state, const std::string& dir, Comm& comm, const SaveOptions& options) {
        return Unwrap(Save(state, dir, comm, options));
      },
      py::arg("state"), py::arg("dir"), py::arg("comm"), py::arg("options") = SaveOptions{},
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "load",
      [](State& state, const std::string& dir, Comm& comm, const LoadOptions& options) {
        return Unwrap(Load(state, dir, comm, options));
      },
      py::arg("state"), py::arg("dir"), py::arg("comm"), py::arg("options") = LoadOptions{},
      py::call_guard<py::gil_scoped_release>());
}

}  // namespace shardpoint::python
