// Status and Result<T>: the error currency of duet. Owns error values only; never throws.
// Bad input from files or requests becomes a Status whose message names what was expected and
// what was found; broken internal invariants use DUET_CHECK (check.h) instead.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace duet {

enum class StatusCode { kOk, kInvalidArgument, kNotFound, kOutOfRange, kUnsupported, kIoError, kInternal };

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok() { return Status(); }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }

// Result<T> holds either a value or a non-ok Status.
template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status s) : v_(std::move(s)) {}     // NOLINT
  bool is_ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return is_ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace duet

#define DUET_RETURN_IF_ERROR(expr)        \
  do {                                    \
    ::duet::Status _st = (expr);          \
    if (!_st.is_ok()) return _st;         \
  } while (0)

#define DUET_CONCAT_INNER(a, b) a##b
#define DUET_CONCAT(a, b) DUET_CONCAT_INNER(a, b)
#define DUET_ASSIGN_OR_RETURN(lhs, expr) DUET_ASSIGN_OR_RETURN_IMPL(DUET_CONCAT(_res_, __LINE__), lhs, expr)
#define DUET_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.is_ok()) return tmp.status();           \
  lhs = std::move(tmp).value()
