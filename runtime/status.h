// Status and Result<T>: recoverable failures (I/O, config, resources, collectives) with context.
#pragma once

#include <fmt/format.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "runtime/check.h"

namespace sluice {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // bad input from a user: config, flags, data files
  kNotFound,          // a file, key or tensor that does not exist
  kOutOfRange,        // an offset or index past the end
  kResourceExhausted, // memory budget, disk space, queue slots
  kIoError,           // a system call failed
  kDataLoss,          // checksum mismatch, truncated or torn file
  kDeadlineExceeded,  // a collective or wait that timed out
  kUnavailable,       // hardware or backend not present on this machine
  kUnimplemented,     // a known feature Sluice does not support yet
  kFailedPrecondition,
  kInternal,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prepends what the caller was doing: "loading swap file /x: pread failed: ...". The rvalue
  // overload returns by value so `SLUICE_RETURN_IF_ERROR(F().WithContext(..))` holds no
  // reference into a temporary.
  Status& WithContext(std::string_view context) &;
  Status WithContext(std::string_view context) &&;

  // "IoError: message", or "OK".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }

#define SLUICE_DEFINE_STATUS_FACTORY(Name, Code)                             \
  template <typename... Args>                                                \
  Status Name(fmt::format_string<Args...> format, Args&&... args) {          \
    return Status(StatusCode::Code, fmt::format(format, std::forward<Args>(args)...)); \
  }
SLUICE_DEFINE_STATUS_FACTORY(InvalidArgumentError, kInvalidArgument)
SLUICE_DEFINE_STATUS_FACTORY(NotFoundError, kNotFound)
SLUICE_DEFINE_STATUS_FACTORY(OutOfRangeError, kOutOfRange)
SLUICE_DEFINE_STATUS_FACTORY(ResourceExhaustedError, kResourceExhausted)
SLUICE_DEFINE_STATUS_FACTORY(IoError, kIoError)
SLUICE_DEFINE_STATUS_FACTORY(DataLossError, kDataLoss)
SLUICE_DEFINE_STATUS_FACTORY(DeadlineExceededError, kDeadlineExceeded)
SLUICE_DEFINE_STATUS_FACTORY(UnavailableError, kUnavailable)
SLUICE_DEFINE_STATUS_FACTORY(UnimplementedError, kUnimplemented)
SLUICE_DEFINE_STATUS_FACTORY(FailedPreconditionError, kFailedPrecondition)
SLUICE_DEFINE_STATUS_FACTORY(InternalError, kInternal)
#undef SLUICE_DEFINE_STATUS_FACTORY

// Result<T> holds a T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    SLUICE_CHECK(!status_.ok()) << "Result constructed from an OK status without a value";
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const& { return status_; }
  Status status() && { return std::move(status_); }

  T& value() & {
    SLUICE_CHECK(ok()) << "Result::value() on error: " << status_.ToString();
    return *value_;
  }
  const T& value() const& {
    SLUICE_CHECK(ok()) << "Result::value() on error: " << status_.ToString();
    return *value_;
  }
  T&& value() && {
    SLUICE_CHECK(ok()) << "Result::value() on error: " << status_.ToString();
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  // Prepends context to the error, if any; returns *this for chaining.
  Result WithContext(std::string_view context) && {
    if (!ok()) status_.WithContext(context);
    return std::move(*this);
  }

 private:
  std::optional<T> value_;
  Status status_;
};

namespace internal {
inline Status AsStatus(const Status& s) { return s; }
template <typename T>
Status AsStatus(const Result<T>& r) { return r.status(); }
}  // namespace internal

}  // namespace sluice

#define SLUICE_STATUS_CONCAT_INNER(a, b) a##b
#define SLUICE_STATUS_CONCAT(a, b) SLUICE_STATUS_CONCAT_INNER(a, b)

// Returns the error of a Status or Result expression from the enclosing function.
#define SLUICE_RETURN_IF_ERROR(expr)                                           \
  do {                                                                         \
    auto&& sluice_status_or_ = (expr);                                         \
    if (!sluice_status_or_.ok()) return ::sluice::internal::AsStatus(sluice_status_or_); \
  } while (0)

// `SLUICE_ASSIGN_OR_RETURN(auto x, MakeX());` binds the value or returns the error.
#define SLUICE_ASSIGN_OR_RETURN(lhs, expr) \
  SLUICE_ASSIGN_OR_RETURN_IMPL(SLUICE_STATUS_CONCAT(sluice_result_, __LINE__), lhs, expr)
#define SLUICE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return std::move(tmp).status();     \
  lhs = std::move(tmp).value()
