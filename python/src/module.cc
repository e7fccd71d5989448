// _shardpoint: the pybind11 module under the `shardpoint` Python package.
#include "python/src/bindings.h"

namespace shardpoint::python {
void RegisterVerify(pybind11::module_& m);   // verify.cc
void RegisterHf(pybind11::module_& m);       // hf.cc
void RegisterStorage(pybind11::module_& m);  // storage.cc
}  // namespace shardpoint::python

PYBIND11_MODULE(_shardpoint, m) {
  m.doc() = "C++ core of shardpoint; use the `shardpoint` package instead.";
  shardpoint::python::RegisterErrors(m);
  shardpoint::python::RegisterStorage(m);
  shardpoint::python::RegisterTypes(m);
  shardpoint::python::RegisterComm(m);
  shardpoint::python::RegisterCheckpoint(m);
  shardpoint::python::RegisterAsyncSave(m);
  shardpoint::python::RegisterLayouts(m);
  shardpoint::python::RegisterManager(m);
  shardpoint::python::RegisterTiered(m);
  shardpoint::python::RegisterVerify(m);
  shardpoint::python::RegisterHf(m);
}
