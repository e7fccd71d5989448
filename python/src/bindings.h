// Registration functions of the _shardpoint module, one per binding file.
//
// The bindings convert types and errors and nothing more (STYLE rule 10):
// every behaviour lives in the C++ library or in the pure-Python package.
#pragma once

#include <pybind11/pybind11.h>

#include "shardpoint/status.h"

namespace shardpoint::python {

void RegisterErrors(pybind11::module_& m);  // errors.cc
// The StatusCode of a shardpoint exception raised in Python (a Python comm's
// callback), or kIOError for any other exception. errors.cc.
StatusCode CodeOfPythonError(const pybind11::error_already_set& e);
void RegisterTypes(pybind11::module_& m);       // types.cc
void RegisterComm(pybind11::module_& m);        // comm.cc
void RegisterCheckpoint(pybind11::module_& m);  // checkpoint.cc
void RegisterAsyncSave(pybind11::module_& m);   // async_save.cc
void RegisterLayouts(pybind11::module_& m);     // layouts.cc
void RegisterManager(pybind11::module_& m);     // manager.cc
void RegisterTiered(pybind11::module_& m);      // tiered.cc

}  // namespace shardpoint::python
