// Errors as values. A function that can fail for a reason the user can fix (a bad config, a
// missing file, a malformed kernel) returns Status or Expected<T>; the caller checks it. A broken
// invariant inside tessel is a bug and stops the program through TESSEL_CHECK instead.
// Reading the value of a failed Expected without checking it is the caller's mistake, not
// tessel's: value(), * and -> throw BadExpectedAccess (as std::expected throws
// bad_expected_access) whose what() is the Status, so an unchecked error still says what failed.
//
//   Expected<Tensor> t = load("x.safetensors");
//   if (!t) return t.status();          // or: TESSEL_ASSIGN_OR_RETURN(Tensor x, load(...));
//   return invalid_argument("config key '{}': expected one of {}", key, allowed);
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace tessel {

enum class Code {
  kOk = 0,
  kInvalidArgument,  // the caller passed something malformed (config, kernel, shape)
  kNotFound,         // a file, key, device or symbol that is not there
  kAlreadyExists,
  kOutOfRange,          // an index or size outside what is allowed
  kFailedPrecondition,  // the system is not in a state where the call makes sense
  kResourceExhausted,   // out of memory, tile does not fit fast memory, ...
  kUnavailable,         // a backend or device not present here (no OpenCL, no CUDA)
  kDeadlineExceeded,    // a timeout, e.g. a peer rank that stopped answering
  kAborted,             // the operation was cancelled, e.g. a communicator was aborted
  kIoError,             // the operating system refused a read or write
  kUnimplemented,       // a combination tessel does not support (yet); says which
  kInternal,            // a bug reported as a value because the caller can still go on
};

const char* code_name(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid argument: config key 'lr': expected a number"
  std::string to_string() const;

  // Prefixes context, e.g. status.with_context("loading {}", path).
  template <typename... Args>
  Status with_context(fmt::format_string<Args...> f, Args&&... args) const {
    if (ok()) return *this;
    return Status(code_, fmt::format(f, std::forward<Args>(args)...) + ": " + message_);
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status ok_status() {
  return Status();
}

#define TESSEL_DEFINE_STATUS_MAKER(fn, code)                                \
  template <typename... Args>                                               \
  Status fn(fmt::format_string<Args...> f, Args&&... args) {                \
    return Status(Code::code, fmt::format(f, std::forward<Args>(args)...)); \
  }
TESSEL_DEFINE_STATUS_MAKER(invalid_argument, kInvalidArgument)
TESSEL_DEFINE_STATUS_MAKER(not_found, kNotFound)
TESSEL_DEFINE_STATUS_MAKER(already_exists, kAlreadyExists)
TESSEL_DEFINE_STATUS_MAKER(out_of_range, kOutOfRange)
TESSEL_DEFINE_STATUS_MAKER(failed_precondition, kFailedPrecondition)
TESSEL_DEFINE_STATUS_MAKER(resource_exhausted, kResourceExhausted)
TESSEL_DEFINE_STATUS_MAKER(unavailable, kUnavailable)
TESSEL_DEFINE_STATUS_MAKER(deadline_exceeded, kDeadlineExceeded)
TESSEL_DEFINE_STATUS_MAKER(aborted, kAborted)
TESSEL_DEFINE_STATUS_MAKER(io_error, kIoError)
TESSEL_DEFINE_STATUS_MAKER(unimplemented, kUnimplemented)
TESSEL_DEFINE_STATUS_MAKER(internal_error, kInternal)
#undef TESSEL_DEFINE_STATUS_MAKER

// io_error with the text of errno appended: "open /x/y: No such file or directory".
Status errno_error(const std::string& what);

[[noreturn]] void check_failed(const char* file, int line, const char* cond,
                               const std::string& msg);

// Thrown by Expected::value() (and * and ->) of a failed Expected: the caller used a value without
// checking for the error. what() is "value() of a failed Expected: " + the Status.
class BadExpectedAccess : public std::logic_error {
 public:
  BadExpectedAccess(Status status, const std::string& what)
      : std::logic_error(what), status_(std::move(status)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};
[[noreturn]] void throw_bad_expected_access(const Status& status, const std::string& what);

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : state_(std::move(value)) {}        // NOLINT: implicit by design
  Expected(Status status) : state_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(state_).ok())
      check_failed(__FILE__, __LINE__, "!status.ok()", "Expected built from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return ok(); }

  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(state_);
  }

  T& value() & { return checked(); }
  const T& value() const& { return const_cast<Expected*>(this)->checked(); }
  T&& value() && { return std::move(checked()); }
  T& operator*() & { return checked(); }
  const T& operator*() const& { return const_cast<Expected*>(this)->checked(); }
  T* operator->() { return &checked(); }
  const T* operator->() const { return &const_cast<Expected*>(this)->checked(); }

  T value_or(T fallback) const& { return ok() ? std::get<T>(state_) : std::move(fallback); }

 private:
  T& checked() {
    // The message is built here rather than in the thrower: with this inlined shape (the one
    // value() had when it aborted instead) GCC 12 reports no false -Wrestrict in its callers.
    if (!ok())
      throw_bad_expected_access(std::get<Status>(state_), "value() of a failed Expected: " +
                                                              std::get<Status>(state_).to_string());
    return std::get<T>(state_);
  }
  std::variant<T, Status> state_;
};

namespace detail {
inline const Status& status_of(const Status& s) {
  return s;
}
template <typename T>
const Status& status_of(const Expected<T>& e) {
  return e.status();
}
}  // namespace detail

}  // namespace tessel

#define TESSEL_CONCAT_INNER(a, b) a##b
#define TESSEL_CONCAT(a, b) TESSEL_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` (a Status or an Expected) failed.
#define TESSEL_TRY(expr)                                                                  \
  do {                                                                                    \
    auto&& tessel_try_result_ = (expr);                                                   \
    if (!tessel_try_result_.ok()) return ::tessel::detail::status_of(tessel_try_result_); \
  } while (0)

// TESSEL_ASSIGN_OR_RETURN(auto x, make_x()); declares x from a successful Expected.
#define TESSEL_ASSIGN_OR_RETURN(lhs, expr) \
  TESSEL_ASSIGN_OR_RETURN_IMPL(TESSEL_CONCAT(tessel_expected_, __LINE__), lhs, expr)
#define TESSEL_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

// For bugs only: an invariant that tessel itself broke. Never for user input.
#define TESSEL_CHECK(cond, ...)                                             \
  do {                                                                      \
    if (!(cond))                                                            \
      ::tessel::check_failed(__FILE__, __LINE__, #cond,                     \
                             ::tessel::detail::check_message(__VA_ARGS__)); \
  } while (0)

namespace tessel::detail {
inline std::string check_message() {
  return {};
}
template <typename... Args>
std::string check_message(fmt::format_string<Args...> f, Args&&... args) {
  return fmt::format(f, std::forward<Args>(args)...);
}
}  // namespace tessel::detail
