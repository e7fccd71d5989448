// The exception classes of shardpoint and the Status -> exception translator.
//
//   shardpoint.Error                       base of everything the library raises
//     InvalidArgumentError(Error, ValueError)
//     NotFoundError(Error, LookupError)    (not KeyError: KeyError quotes its message)
//     IOError(Error, OSError)
//     DataLossError(Error)
//     FailedPreconditionError(Error, RuntimeError)
//     InternalError(Error, RuntimeError)
//
// Each class has `code` (the StatusCode name); the exception's message is the
// C++ Status message unchanged.
#include "python/src/errors.h"

#include <Python.h>

#include <array>

#include "python/src/bindings.h"

namespace py = pybind11;

namespace shardpoint::python {
namespace {

// Indexed by StatusCode. Module-lifetime references (the module is never unloaded).
std::array<PyObject*, 7> g_classes{};

PyObject* NewClass(py::module_& m, const char* name, const char* code, py::tuple bases,
                   const char* doc) {
  std::string full = std::string("shardpoint.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(full.c_str(), doc, bases.ptr(), nullptr);
  if (!cls) throw py::error_already_set();
  py::handle h(cls);
  h.attr("code") = code;
  m.attr(name) = h;
  return cls;
}

}  // namespace

void RegisterErrors(py::module_& m) {
  py::handle builtins = py::module_::import("builtins");
  PyObject* base = NewClass(
      m, "Error", "Unknown", py::make_tuple(builtins.attr("Exception")),
      "Base class of the errors shardpoint raises; the message is the C++ Status message.");
  py::handle b(base);
  auto add = [&](StatusCode c, const char* name, py::tuple bases, const char* doc) {
    g_classes[static_cast<int>(c)] = NewClass(m, name, StatusCodeName(c), bases, doc);
  };
  add(StatusCode::kInvalidArgument, "InvalidArgumentError",
      py::make_tuple(b, builtins.attr("ValueError")), "The caller's input is wrong.");
  add(StatusCode::kNotFound, "NotFoundError", py::make_tuple(b, builtins.attr("LookupError")),
      "A file, key or checkpoint does not exist.");
  add(StatusCode::kIOError, "IOError", py::make_tuple(b, builtins.attr("OSError")),
      "The operating system refused an operation.");
  add(StatusCode::kDataLoss, "DataLossError", py::make_tuple(b),
      "Stored bytes are corrupt, truncated or inconsistent.");
  add(StatusCode::kFailedPrecondition, "FailedPreconditionError",
      py::make_tuple(b, builtins.attr("RuntimeError")),
      "The system is not in a state that allows the call.");
  add(StatusCode::kInternal, "InternalError", py::make_tuple(b, builtins.attr("RuntimeError")),
      "A bug in shardpoint.");
  g_classes[0] = base;

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      int code = static_cast<int>(e.status().code());
      PyObject* cls =
          (code > 0 && code < static_cast<int>(g_classes.size())) ? g_classes[code] : g_classes[0];
      PyErr_SetString(cls, e.status().message().c_str());
    }
  });
}

}  // namespace shardpoint::python
