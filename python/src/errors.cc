// The exception classes of shardpoint and the Status -> exception translator.
//
//   shardpoint.Error                                   base of everything the library raises
//     InvalidArgumentError(Error, ValueError)
//     NotFoundError(Error, FileNotFoundError, LookupError)   a missing path, checkpoint or key
//     IOFailureError(Error, OSError)                   the OS refused (IOError status code)
//       PermissionDeniedError(IOFailureError, PermissionError)      EACCES / EPERM
//       IsDirectoryError(IOFailureError, IsADirectoryError)         EISDIR
//       NotDirectoryError(IOFailureError, NotADirectoryError)       ENOTDIR
//     DataLossError(Error, OSError)                    corrupt stored bytes
//     FailedPreconditionError(Error, RuntimeError)
//     InternalError(Error, RuntimeError)
//     DeadlineExceededError(Error, TimeoutError)       a collective could not complete in time
//
// Each class has `code` (the StatusCode name); the exception's message is the
// C++ Status message unchanged. An IOError status carries its errno only as
// the strerror text that PosixError (src/io/posix_storage.cc) appends, so the
// three OSError refinements are chosen by that text.
#include "python/src/errors.h"

#include <Python.h>

#include <array>
#include <string_view>

#include "python/src/bindings.h"

namespace py = pybind11;

namespace shardpoint::python {
namespace {

// Indexed by StatusCode. Module-lifetime references (the module is never unloaded).
std::array<PyObject*, 8> g_classes{};
PyObject* g_permission = nullptr;
PyObject* g_is_dir = nullptr;
PyObject* g_not_dir = nullptr;

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

// The OSError refinement of an IOError status, by the strerror text in its message.
PyObject* IOClass(const std::string& message) {
  auto has = [&](std::string_view s) { return message.find(s) != std::string::npos; };
  if (has(": Permission denied") || has(": Operation not permitted")) return g_permission;
  if (has(": Is a directory")) return g_is_dir;
  if (has(": Not a directory")) return g_not_dir;
  return g_classes[static_cast<int>(StatusCode::kIOError)];
}

}  // namespace

StatusCode CodeOfPythonError(const py::error_already_set& e) {
  for (size_t code = 1; code < g_classes.size(); ++code) {
    if (g_classes[code] != nullptr && e.matches(py::handle(g_classes[code]))) {
      return static_cast<StatusCode>(code);
    }
  }
  return StatusCode::kIOError;
}

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
  add(StatusCode::kNotFound, "NotFoundError",
      py::make_tuple(b, builtins.attr("FileNotFoundError"), builtins.attr("LookupError")),
      "A file, key or checkpoint does not exist.");
  add(StatusCode::kIOError, "IOFailureError", py::make_tuple(b, builtins.attr("OSError")),
      "The operating system refused an operation (or a Python comm callback raised).");
  py::handle io(g_classes[static_cast<int>(StatusCode::kIOError)]);
  const char* io_code = StatusCodeName(StatusCode::kIOError);
  g_permission = NewClass(m, "PermissionDeniedError", io_code,
                          py::make_tuple(io, builtins.attr("PermissionError")),
                          "The operating system denied access to a file or directory.");
  g_is_dir = NewClass(m, "IsDirectoryError", io_code,
                      py::make_tuple(io, builtins.attr("IsADirectoryError")),
                      "A file was expected where a directory is.");
  g_not_dir = NewClass(m, "NotDirectoryError", io_code,
                       py::make_tuple(io, builtins.attr("NotADirectoryError")),
                       "A directory was expected where a file is.");
  add(StatusCode::kDataLoss, "DataLossError", py::make_tuple(b, builtins.attr("OSError")),
      "Stored bytes are corrupt, truncated or inconsistent.");
  add(StatusCode::kFailedPrecondition, "FailedPreconditionError",
      py::make_tuple(b, builtins.attr("RuntimeError")),
      "The system is not in a state that allows the call.");
  add(StatusCode::kInternal, "InternalError", py::make_tuple(b, builtins.attr("RuntimeError")),
      "A bug in shardpoint.");
  add(StatusCode::kDeadlineExceeded, "DeadlineExceededError",
      py::make_tuple(b, builtins.attr("TimeoutError")),
      "A collective did not complete within the comm's deadline: a peer rank died, hangs or "
      "is far too slow.");
  g_classes[0] = base;

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      int code = static_cast<int>(e.status().code());
      const std::string& message = e.status().message();
      PyObject* cls =
          (code > 0 && code < static_cast<int>(g_classes.size())) ? g_classes[code] : g_classes[0];
      if (e.status().code() == StatusCode::kIOError) cls = IOClass(message);
      PyErr_SetString(cls, message.c_str());
    }
  });
}

}  // namespace shardpoint::python
