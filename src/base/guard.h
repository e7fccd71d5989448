// Guarded: runs one local step of a collective and turns any exception it
// throws (std::bad_alloc included) into an error Status.
//
// A collective (save, load, cooperative load, HF load, the manager) is a
// series of local steps, each followed by an agreement (AgreeOnStatus) that
// every rank reaches. An exception escaping a step on one rank would skip that
// agreement: under MPI the other ranks would wait in it forever. Guarded keeps
// the failure a value, so it reaches the agreement and every rank returns it.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "shardpoint/status.h"

namespace shardpoint::internal_base {

// The Status for the exception being handled. REQUIRES: called in a catch.
Status StatusFromCurrentException(const std::string& step);

// `f` returns a Status or a Result<T>; so does Guarded.
template <typename F>
auto Guarded(const std::string& step, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (...) {
    return StatusFromCurrentException(step);
  }
}

}  // namespace shardpoint::internal_base
