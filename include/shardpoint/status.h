// Status and Result<T>: errors as values.
//
// Every fallible function in shardpoint returns a Status or a Result<T>. A
// Status carries one of a small fixed set of codes and a message that names
// the key, rank, file and byte range at fault. Both types are cheap to move
// and are not thread-safe to mutate concurrently (ordinary value semantics).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace shardpoint {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // the caller's input is wrong (layouts, keys, options)
  kNotFound,            // a file, key or checkpoint does not exist
  kIOError,             // the OS refused an operation (errno is in the message)
  kDataLoss,            // stored bytes are corrupt, truncated or inconsistent
  kFailedPrecondition,  // the system is not in a state that allows the call
  kInternal,            // a bug in shardpoint
  // A collective did not complete within the Comm's deadline, or cannot: a
  // peer rank died, hangs or is far too slow (comm.h, "Deadlines").
  kDeadlineExceeded,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  // User-provided (not = default): `Status()` then skips value-initialization's
  // zero-fill of the whole object (a `rep stos` per OkStatus() on hot paths).
  Status() noexcept {}
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: message", or "OK".
  std::string ToString() const;
  // Returns a copy whose message is prefixed with `context + ": "`.
  Status WithContext(const std::string& context) const;
  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgumentError(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
inline Status NotFoundError(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
inline Status IOError(std::string m) { return Status(StatusCode::kIOError, std::move(m)); }
inline Status DataLossError(std::string m) { return Status(StatusCode::kDataLoss, std::move(m)); }
inline Status FailedPreconditionError(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}
inline Status InternalError(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
inline Status DeadlineExceededError(std::string m) {
  return Status(StatusCode::kDeadlineExceeded, std::move(m));
}

namespace internal_base {
// Prints "shardpoint: Result accessed without a value: <status>" to stderr
// and aborts: reading the value of an error is a bug in the caller.
[[noreturn]] void DieOnResultWithoutValue(const Status& status);
}  // namespace internal_base

// A value or an error. REQUIRES: a Result is never constructed from an OK Status.
// value(), operator* and operator-> are checked: on an error they abort with
// the status text (as TensorStore's Result does), never read an empty value.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {
    if (status_.ok()) status_ = InternalError("Result constructed from an OK Status");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return Checked(); }
  const T& value() const& { return Checked(); }
  T&& value() && { return std::move(Checked()); }
  T& operator*() & { return Checked(); }
  const T& operator*() const& { return Checked(); }
  T* operator->() { return &Checked(); }
  const T* operator->() const { return &Checked(); }

 private:
  T& Checked() {
    if (!value_.has_value()) [[unlikely]]
      internal_base::DieOnResultWithoutValue(status_);
    return *value_;
  }
  const T& Checked() const {
    if (!value_.has_value()) [[unlikely]]
      internal_base::DieOnResultWithoutValue(status_);
    return *value_;
  }

  Status status_;
  std::optional<T> value_;
};

#define SP_CONCAT_INNER_(a, b) a##b
#define SP_CONCAT_(a, b) SP_CONCAT_INNER_(a, b)

#define SP_RETURN_IF_ERROR(expr)              \
  do {                                        \
    ::shardpoint::Status sp_status_ = (expr); \
    if (!sp_status_.ok()) return sp_status_;  \
  } while (0)

#define SP_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

// SP_ASSIGN_OR_RETURN(auto x, MakeX()); declares x or returns the error.
#define SP_ASSIGN_OR_RETURN(lhs, expr) \
  SP_ASSIGN_OR_RETURN_IMPL_(SP_CONCAT_(sp_result_, __LINE__), lhs, expr)

}  // namespace shardpoint
