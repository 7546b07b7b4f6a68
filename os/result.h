// The one error convention for code that touches the OS: a value or a std::error_code with a
// line of context a user can act on ("bind veth0 queue 0: Device or resource busy").
#pragma once

#include <cerrno>
#include <string>
#include <system_error>
#include <utility>
#include <variant>

namespace xdpfwd {

struct Error {
  std::error_code code;
  std::string context;

  // "context: strerror" — the form every log line and CLI error uses.
  std::string message() const { return code ? context + ": " + code.message() : context; }
};

// Error from errno (or an explicit errno value) with context.
inline Error SystemError(std::string context, int err = errno) {
  return Error{std::error_code(err, std::system_category()), std::move(context)};
}

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}  // NOLINT

  bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }
  T& value() & { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  T* operator->() { return &value(); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

// Result of an operation that yields nothing but success or an Error.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT

  bool ok() const noexcept { return ok_; }
  explicit operator bool() const noexcept { return ok_; }
  const Error& error() const { return error_; }

 private:
  Error error_;
  bool ok_ = true;
};

}  // namespace xdpfwd
