// Status -> Python exception: the one place where the binding turns an error
// value into an exception (STYLE rule 2).
//
// Functions bound with a released GIL call ThrowIfError / Unwrap, which throw
// StatusError (a plain C++ exception, safe without the GIL); the translator
// registered by RegisterErrors turns it into shardpoint.<Code>Error carrying
// the C++ message once pybind11 holds the GIL again.
#pragma once

#include <stdexcept>
#include <utility>

#include "shardpoint/status.h"

namespace shardpoint::python {

class StatusError : public std::runtime_error {
 public:
  explicit StatusError(Status status)
      : std::runtime_error(status.message()), status_(std::move(status)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

inline void ThrowIfError(const Status& s) {
  if (!s.ok()) throw StatusError(s);
}

template <typename T>
T Unwrap(Result<T> r) {
  if (!r.ok()) throw StatusError(r.status());
  return std::move(r).value();
}

}  // namespace shardpoint::python
