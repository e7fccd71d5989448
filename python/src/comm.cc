// Comm for Python: the C++ single-rank and in-process (ranks as threads)
// Comms, and a trampoline so that a Python class can implement the
// collectives (the mpi4py and torch.distributed adapters live in
// shardpoint/comm.py).
//
// A Python subclass of `Comm` implements
//   rank() -> int, size() -> int                (constant for the object's life)
//   all_gather(data: bytes) -> list[bytes]
//   gather(data: bytes, root: int) -> list[bytes] (on root; anything elsewhere)
//   broadcast(data: bytes, root: int) -> bytes   (root's data on every rank)
//   barrier() -> None
// and optionally one of
//   all_to_all_buffer(send: bytearray, counts: list[int])
//       -> (recv: buffer, recv_counts: list[int])
//                     (send holds counts[i] bytes for rank i, back to back;
//                      recv the recv_counts[i] bytes from rank i, back to back,
//                      in any C-contiguous object with the buffer protocol: a
//                      numpy array, bytes; every count is at least 1)
//   all_to_all(send: list[bytes]) -> list[bytes]  (item i to / from rank i)
// (without either AllToAll falls back to Comm's all-gather version). The
// buffer form is preferred: C++ joins the payloads into one bytearray and
// splits the reply with the GIL released, so a cooperative load's blocks
// cross the interpreter as two buffers per round, not as a bytes object per
// payload copied twice more on each side.
// and must call Comm.__init__(self). The C++ library calls these with the GIL
// released; each call reacquires it. A Python exception in a callback becomes
// an IOError Status naming the method and the exception (it must not unwind
// through the C++ library), and the library turns that into an error on every
// rank; a shardpoint exception (DeadlineExceededError from the torch and
// mpi4py adapters) keeps its code instead. rank() and size() are asked once
// and cached.
//
// Checked here, as the C++ comms do, so that every Python comm behaves alike
// (the conformance suite runs on them: python/tests/test_comm_conformance.py):
// a root out of range is InvalidArgument without calling Python; an
// all_to_all with the wrong number of payloads still takes part, so that
// every rank fails with InvalidArgument instead of the others hanging. For
// that each payload all_to_all (or all_to_all_buffer) carries starts with one
// byte of its own: 0, or 1 from a rank with bad arguments (then the byte is
// all it sends).
#include "shardpoint/comm.h"

#include <pybind11/stl.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>

#include "python/src/bindings.h"
#include "python/src/errors.h"

namespace py = pybind11;

namespace shardpoint::python {
namespace {

class PyComm : public Comm {
 public:
  int rank() const override {
    if (rank_ < 0) rank_ = CallInt("rank");
    return rank_;
  }
  int size() const override {
    if (size_ < 0) size_ = CallInt("size");
    return size_;
  }

  Status AllGather(std::string_view mine, std::vector<std::string>* all) override {
    return Call("all_gather", [&](const py::function& f) {
      *all = ToStrings(f(py::bytes(mine.data(), mine.size())), "all_gather");
      if (static_cast<int>(all->size()) != size()) {
        throw std::runtime_error("returned " + std::to_string(all->size()) + " items for " +
                                 std::to_string(size()) + " ranks");
      }
    });
  }
  Status Gather(std::string_view mine, int root, std::vector<std::string>* all) override {
    SP_RETURN_IF_ERROR(CheckRoot(root));
    return Call("gather", [&](const py::function& f) {
      py::object out = f(py::bytes(mine.data(), mine.size()), root);
      if (rank() != root) return;
      *all = ToStrings(out, "gather");
      if (static_cast<int>(all->size()) != size()) {
        throw std::runtime_error("returned " + std::to_string(all->size()) + " items for " +
                                 std::to_string(size()) + " ranks");
      }
    });
  }
  Status Broadcast(std::string* data, int root) override {
    SP_RETURN_IF_ERROR(CheckRoot(root));
    return Call("broadcast", [&](const py::function& f) {
      py::object out = f(py::bytes(*data), root);
      if (!py::isinstance<py::bytes>(out)) throw std::runtime_error("did not return bytes");
      *data = std::string(out.cast<py::bytes>());
    });
  }
  Status Barrier() override {
    return Call("barrier", [&](const py::function& f) { f(); });
  }
  Status AllToAll(const std::vector<std::string>& send, std::vector<std::string>* recv) override {
    bool has = false, has_buffer = false;
    {
      py::gil_scoped_acquire gil;
      const Comm* self = this;
      has_buffer = static_cast<bool>(py::get_override(self, "all_to_all_buffer"));
      has = has_buffer || static_cast<bool>(py::get_override(self, "all_to_all"));
    }
    if (!has) return Comm::AllToAll(send, recv);
    const bool bad = static_cast<int>(send.size()) != size() || recv == nullptr;
    int bad_sender = -1;
    if (has_buffer) {
      SP_RETURN_IF_ERROR(Call("all_to_all_buffer", [&](const py::function& f) {
        // The strings of *recv are refilled: a caller passing the same vector
        // each round (cooperative load) reuses their memory.
        std::vector<std::string> parts;
        if (recv != nullptr) parts = std::move(*recv);
        parts.resize(size());
        BufferAllToAll(f, send, bad, &bad_sender, &parts);
        if (!bad) *recv = std::move(parts);  // (an error's partial payloads are not used)
      }));
      return AllToAllVerdict(send.size(), bad, bad_sender);
    }
    SP_RETURN_IF_ERROR(Call("all_to_all", [&](const py::function& f) {
      py::list out;
      for (int r = 0; r < size(); ++r) {
        out.append(bad ? py::bytes("\1", 1) : Flagged(send[r]));
      }
      py::object got = f(out);
      py::sequence items = Sequence(got, "all_to_all");
      if (static_cast<int>(items.size()) != size()) {
        throw std::runtime_error("returned " + std::to_string(items.size()) + " items for " +
                                 std::to_string(size()) + " ranks");
      }
      std::vector<std::string> parts(size());
      for (int r = 0; r < size(); ++r) {
        std::string_view item = Bytes(items[r], "all_to_all");
        if (item.empty()) {
          throw std::runtime_error("lost the payload from rank " + std::to_string(r) +
                                   " (an empty item; each one carries at least one byte)");
        }
        if (item[0] != '\0') {
          if (bad_sender < 0) bad_sender = r;
          continue;
        }
        parts[r].assign(item.substr(1));
      }
      if (!bad && bad_sender < 0) *recv = std::move(parts);
    }));
    return AllToAllVerdict(send.size(), bad, bad_sender);
  }

 private:
  Status AllToAllVerdict(size_t payloads, bool bad, int bad_sender) const {
    if (bad) {
      return InvalidArgumentError("AllToAll: expected " + std::to_string(size()) +
                                  " payloads and an output, got " + std::to_string(payloads));
    }
    if (bad_sender >= 0) {
      return InvalidArgumentError("AllToAll: rank " + std::to_string(bad_sender) +
                                  " passed bad arguments (one payload per rank and an output)");
    }
    return OkStatus();
  }

  // all_to_all_buffer (GIL held on entry and exit): the flagged payloads
  // joined into one bytearray, the reply split into `parts`, both copies
  // without the GIL. The bytearray is Python's, so an adapter that abandons a
  // collective past its deadline may keep it alive with the request
  // (MPI4PyComm does); while nothing else holds it, the next call reuses it
  // (fresh memory costs page faults, on a VM that took freed pages back
  // seconds per GiB).
  void BufferAllToAll(const py::function& f, const std::vector<std::string>& send, bool bad,
                      int* bad_sender, std::vector<std::string>* parts) {
    const int n = size();
    py::list counts;
    size_t total = 0;
    for (int r = 0; r < n; ++r) {
      const size_t c = bad ? 1 : send[r].size() + 1;
      counts.append(c);
      total += c;
    }
    py::object joined = SendBuffer(total);
    {
      char* p = PyByteArray_AS_STRING(send_buf_.ptr());
      py::gil_scoped_release nogil;
      for (int r = 0; r < n; ++r) {
        *p++ = bad ? '\1' : '\0';
        if (bad || send[r].empty()) continue;
        std::memcpy(p, send[r].data(), send[r].size());
        p += send[r].size();
      }
    }
    py::sequence reply = Sequence(f(joined, counts), "all_to_all_buffer");
    if (reply.size() != 2) throw std::runtime_error("did not return (buffer, counts)");
    std::vector<uint64_t> sizes;
    for (py::handle h : Sequence(py::object(reply[1]), "all_to_all_buffer"))
      sizes.push_back(h.cast<uint64_t>());
    if (static_cast<int>(sizes.size()) != n) {
      throw std::runtime_error("returned " + std::to_string(sizes.size()) + " counts for " +
                               std::to_string(n) + " ranks");
    }
    Py_buffer view;
    if (PyObject_GetBuffer(py::object(reply[0]).ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
      throw py::error_already_set();
    }
    std::unique_ptr<Py_buffer, void (*)(Py_buffer*)> held(&view, PyBuffer_Release);
    std::string error;
    {
      py::gil_scoped_release nogil;
      error = SplitFlagged(static_cast<const char*>(view.buf), static_cast<uint64_t>(view.len),
                           sizes, parts, bad_sender);
    }
    if (!error.empty()) throw std::runtime_error(error);
  }

  // The send bytearray of `total` bytes (GIL held): a memoryview of the
  // first `total` bytes of send_buf_, grown or made anew where another
  // reference to it is alive.
  py::object SendBuffer(size_t total) {
    const bool shared = send_buf_ && Py_REFCNT(send_buf_.ptr()) > 1;
    if (!send_buf_ || shared ||
        static_cast<size_t>(PyByteArray_GET_SIZE(send_buf_.ptr())) < total) {
      PyObject* raw = PyByteArray_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(total));
      if (raw == nullptr) throw py::error_already_set();
      send_buf_ = py::reinterpret_steal<py::object>(raw);
    }
    py::object whole = py::reinterpret_steal<py::object>(PyMemoryView_FromObject(send_buf_.ptr()));
    if (!whole) throw py::error_already_set();
    return whole[py::slice(0, static_cast<py::ssize_t>(total), 1)];
  }

  // Splits `len` bytes at `buf` into flagged payloads of `sizes` bytes: an
  // error message, or "" with *bad_sender the first rank whose flag is set.
  static std::string SplitFlagged(const char* buf, uint64_t len, const std::vector<uint64_t>& sizes,
                                  std::vector<std::string>* parts, int* bad_sender) {
    uint64_t at = 0;
    for (size_t r = 0; r < sizes.size(); ++r) {
      if (sizes[r] == 0) {
        return "lost the payload from rank " + std::to_string(r) +
               " (an empty item; each one carries at least one byte)";
      }
      if (sizes[r] > len - at) {
        return "returned " + std::to_string(len) + " bytes, fewer than its counts say";
      }
      if (buf[at] != '\0') {
        if (*bad_sender < 0) *bad_sender = static_cast<int>(r);
      } else {
        (*parts)[r].assign(buf + at + 1, sizes[r] - 1);
      }
      at += sizes[r];
    }
    if (at != len) {
      return "returned " + std::to_string(len) + " bytes, more than its counts say";
    }
    return "";
  }

  static py::sequence Sequence(const py::object& list, const char* name) {
    if (!py::isinstance<py::list>(list) && !py::isinstance<py::tuple>(list)) {
      throw std::runtime_error(std::string("did not return a list of bytes"));
    }
    return py::reinterpret_borrow<py::sequence>(list);
  }
  // The bytes of h, valid while h lives.
  static std::string_view Bytes(py::handle h, const char* name) {
    if (!py::isinstance<py::bytes>(h)) {
      throw std::runtime_error(std::string(name) + " returned a list with a non-bytes item");
    }
    char* data = nullptr;
    Py_ssize_t n = 0;
    if (PyBytes_AsStringAndSize(h.ptr(), &data, &n) != 0) throw py::error_already_set();
    return std::string_view(data, static_cast<size_t>(n));
  }
  static std::vector<std::string> ToStrings(const py::object& list, const char* name) {
    std::vector<std::string> v;
    for (py::handle h : Sequence(list, name)) v.emplace_back(Bytes(h, name));
    return v;
  }
  // A 0 byte, then s (one copy, like py::bytes(s)).
  static py::bytes Flagged(const std::string& s) {
    PyObject* b = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(s.size() + 1));
    if (b == nullptr) throw py::error_already_set();
    char* data = PyBytes_AS_STRING(b);
    data[0] = '\0';
    if (!s.empty()) std::memcpy(data + 1, s.data(), s.size());
    return py::reinterpret_steal<py::bytes>(b);
  }

  Status CheckRoot(int root) const {
    if (root < 0 || root >= size()) {
      return InvalidArgumentError("root " + std::to_string(root) + " out of range for " +
                                  std::to_string(size()) + " ranks");
    }
    return OkStatus();
  }

  template <typename F>
  Status Call(const char* name, F&& body) {
    py::gil_scoped_acquire gil;
    try {
      py::function f = py::get_override(static_cast<const Comm*>(this), name);
      if (!f) return InternalError(std::string("Python comm does not implement ") + name + "()");
      body(f);
      return OkStatus();
    } catch (py::error_already_set& e) {
      // A shardpoint error keeps its code (a comm's DeadlineExceededError
      // must reach the caller as one); anything else is the transport's.
      const StatusCode code = CodeOfPythonError(e);
      if (code != StatusCode::kIOError) {
        return Status(
            code, std::string("Python comm ") + name + "(): " + std::string(py::str(e.value())));
      }
      return IOError(std::string("Python comm ") + name + "() raised " + e.what());
    } catch (const std::exception& e) {
      return IOError(std::string("Python comm ") + name + "() failed: " + e.what());
    }
  }

  // rank() and size() cannot fail in the C++ interface: a broken Python
  // implementation reports -1, which the library rejects as an invalid rank.
  int CallInt(const char* name) const {
    py::gil_scoped_acquire gil;
    try {
      py::function f = py::get_override(static_cast<const Comm*>(this), name);
      return f ? f().cast<int>() : -1;
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable(name);
      return -1;
    } catch (const std::exception&) {
      return -1;
    }
  }

  mutable int rank_ = -1;
  mutable int size_ = -1;
  py::object send_buf_;  // all_to_all_buffer's bytearray, reused (GIL held to touch it)
};

}  // namespace

void RegisterComm(py::module_& m) {
  py::class_<Comm, PyComm>(m, "Comm", "Collectives over bytes; subclass to implement in Python.")
      .def(py::init<>())
      .def("rank", &Comm::rank)
      .def("size", &Comm::size)
      .def(
          "all_gather",
          [](Comm& c, py::bytes mine) {
            std::string in(mine);
            std::vector<std::string> all;
            {
              py::gil_scoped_release nogil;
              ThrowIfError(c.AllGather(in, &all));
            }
            py::list out;
            for (const std::string& s : all) out.append(py::bytes(s));
            return out;
          },
          py::arg("data"))
      .def(
          "gather",
          [](Comm& c, py::bytes mine, int root) -> py::object {
            std::string in(mine);
            std::vector<std::string> all;
            {
              py::gil_scoped_release nogil;
              ThrowIfError(c.Gather(in, root, &all));
            }
            if (c.rank() != root) return py::none();
            py::list out;
            for (const std::string& s : all) out.append(py::bytes(s));
            return out;
          },
          py::arg("data"), py::arg("root"))
      .def(
          "broadcast",
          [](Comm& c, py::bytes data, int root) {
            std::string s(data);
            {
              py::gil_scoped_release nogil;
              ThrowIfError(c.Broadcast(&s, root));
            }
            return py::bytes(s);
          },
          py::arg("data"), py::arg("root"))
      .def("barrier",
           [](Comm& c) {
             py::gil_scoped_release nogil;
             ThrowIfError(c.Barrier());
           })
      .def(
          "all_to_all",
          [](Comm& c, const std::vector<py::bytes>& send) {
            std::vector<std::string> in(send.begin(), send.end());
            std::vector<std::string> out;
            {
              py::gil_scoped_release nogil;
              ThrowIfError(c.AllToAll(in, &out));
            }
            py::list res;
            for (const std::string& s : out) res.append(py::bytes(s));
            return res;
          },
          py::arg("send"));
  m.def("make_single_comm", &MakeSingleComm);
  m.def(
      "make_thread_comms",
      [](int n, int64_t deadline_ms) {
        return MakeThreadComms(n, std::chrono::milliseconds(deadline_ms));
      },
      py::arg("n"), py::arg("deadline_ms") = kDefaultCommDeadline.count(),
      "n connected Comms for ranks as threads of this process (comms[i] is rank i); each "
      "collective waits at most deadline_ms (0: no deadline).");
}

}  // namespace shardpoint::python
