// Status formatting and the failure path of TESSEL_CHECK.
#include "support/status.h"

#include <cerrno>
#include <cstring>

namespace tessel {

const char* code_name(Code code) {
  switch (code) {
    case Code::kOk:
      return "ok";
    case Code::kInvalidArgument:
      return "invalid argument";
    case Code::kNotFound:
      return "not found";
    case Code::kAlreadyExists:
      return "already exists";
    case Code::kOutOfRange:
      return "out of range";
    case Code::kFailedPrecondition:
      return "failed precondition";
    case Code::kResourceExhausted:
      return "resource exhausted";
    case Code::kUnavailable:
      return "unavailable";
    case Code::kDeadlineExceeded:
      return "deadline exceeded";
    case Code::kAborted:
      return "aborted";
    case Code::kIoError:
      return "i/o error";
    case Code::kUnimplemented:
      return "unimplemented";
    case Code::kInternal:
      return "internal error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return fmt::format("{}: {}", code_name(code_), message_);
}

Status errno_error(const std::string& what) {
  int err = errno;
  return Status(Code::kIoError, what + ": " + std::strerror(err));
}

void throw_bad_expected_access(const Status& status, const std::string& what) {
  throw BadExpectedAccess(status, what);
}

void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "tessel internal error at %s:%d: check '%s' failed%s%s\n", file, line, cond,
               msg.empty() ? "" : ": ", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace tessel
