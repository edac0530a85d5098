// Status and Expected: values flow through, failures carry code and message, macros return early.
#include "support/status.h"

#include <gtest/gtest.h>

#include "support/log.h"

namespace tessel {
namespace {

Expected<int> parse_positive(int x) {
  if (x <= 0) return invalid_argument("expected a positive number, got {}", x);
  return x;
}

Expected<int> doubled(int x) {
  TESSEL_ASSIGN_OR_RETURN(int v, parse_positive(x));
  return 2 * v;
}

Status check_both(int a, int b) {
  TESSEL_TRY(parse_positive(a));
  TESSEL_TRY(parse_positive(b));
  return ok_status();
}

TEST(Status, CarriesCodeAndMessage) {
  Status s = not_found("no file at {}", "/tmp/x");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_EQ(s.to_string(), "not found: no file at /tmp/x");
  EXPECT_EQ(s.with_context("loading model").message(), "loading model: no file at /tmp/x");
  EXPECT_TRUE(ok_status().ok());
}

TEST(Expected, ValueAndErrorPaths) {
  EXPECT_EQ(*doubled(21), 42);
  Expected<int> bad = doubled(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "expected a positive number, got -1");
  EXPECT_EQ(bad.value_or(7), 7);
}

TEST(Status, TryReturnsFirstFailure) {
  EXPECT_TRUE(check_both(1, 2).ok());
  EXPECT_EQ(check_both(1, -2).message(), "expected a positive number, got -2");
}

TEST(Expected, ValueOfAFailureIsTheCallersErrorAndCarriesTheStatus) {
  // Not "tessel internal error": the caller skipped the check, and the exception says what the
  // unchecked error was (as std::expected's bad_expected_access does).
  Expected<int> bad = doubled(0);
  try {
    (void)bad.value();
    FAIL() << "value() of a failed Expected returned";
  } catch (const BadExpectedAccess& e) {
    EXPECT_STREQ(
        e.what(),
        "value() of a failed Expected: invalid argument: expected a positive number, got 0");
    EXPECT_EQ(e.status().code(), Code::kInvalidArgument);
  }
  EXPECT_THROW((void)*bad, BadExpectedAccess);
  EXPECT_THROW((void)std::move(bad).value(), std::logic_error);
}

TEST(Log, ParsesLevels) {
  EXPECT_EQ(*parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_FALSE(parse_log_level("loud").ok());
}

}  // namespace
}  // namespace tessel
