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
// and optionally
//   all_to_all(send: list[bytes]) -> list[bytes]  (item i to / from rank i)
// (without it AllToAll falls back to Comm's all-gather version)
// and must call Comm.__init__(self). The C++ library calls these with the GIL
// released; each call reacquires it. A Python exception in a callback becomes
// an IOError Status naming the method and the exception (it must not unwind
// through the C++ library), and the library turns that into an error on every
// rank. rank() and size() are asked once and cached.
#include "shardpoint/comm.h"

#include <pybind11/stl.h>

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
    bool has = false;
    {
      py::gil_scoped_acquire gil;
      has = static_cast<bool>(py::get_override(static_cast<const Comm*>(this), "all_to_all"));
    }
    if (!has) return Comm::AllToAll(send, recv);
    if (static_cast<int>(send.size()) != size()) {
      return InvalidArgumentError("AllToAll: " + std::to_string(send.size()) + " messages for " +
                                  std::to_string(size()) + " ranks");
    }
    return Call("all_to_all", [&](const py::function& f) {
      py::list out;
      for (const std::string& s : send) out.append(py::bytes(s));
      *recv = ToStrings(f(out), "all_to_all");
      if (static_cast<int>(recv->size()) != size()) {
        throw std::runtime_error("returned " + std::to_string(recv->size()) + " items for " +
                                 std::to_string(size()) + " ranks");
      }
    });
  }

 private:
  static std::vector<std::string> ToStrings(const py::object& list, const char* name) {
    if (!py::isinstance<py::list>(list) && !py::isinstance<py::tuple>(list)) {
      throw std::runtime_error(std::string("did not return a list of bytes"));
    }
    std::vector<std::string> v;
    for (py::handle h : list) {
      if (!py::isinstance<py::bytes>(h)) {
        throw std::runtime_error(std::string(name) + " returned a list with a non-bytes item");
      }
      v.push_back(std::string(py::reinterpret_borrow<py::bytes>(h)));
    }
    return v;
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
  m.def("make_thread_comms", &MakeThreadComms, py::arg("n"),
        "n connected Comms for ranks as threads of this process (comms[i] is rank i).");
}

}  // namespace shardpoint::python
