// run_program (subprocess.h): what a child printed, how it exited, and which signal ended it.
#include "support/subprocess.h"

#include <gtest/gtest.h>

#include <csignal>

namespace tessel {
namespace {

TEST(Subprocess, CapturesOutputAndExitCode) {
  ProgramRun r = run_program({"sh", "-c", "echo out; echo err >&2; exit 3"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.signal, 0);
  EXPECT_NE(r.output.find("out"), std::string::npos);
  EXPECT_NE(r.output.find("err"), std::string::npos);
}

TEST(Subprocess, NamesTheSignalThatEndedTheChild) {
  ProgramRun r = run_program({"sh", "-c", "kill -SEGV $$"});
  EXPECT_EQ(r.exit_code, -1);
  EXPECT_EQ(r.signal, SIGSEGV);
  EXPECT_EQ(signal_name(r.signal), "SIGSEGV");
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(999), "signal 999");
}

TEST(Subprocess, AProgramThatIsNotThereExitsWith127) {
  ProgramRun r = run_program({"/nonexistent/tessel-no-such-program"});
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_EQ(r.signal, 0);
  EXPECT_NE(r.output.find("cannot run"), std::string::npos);
}

}  // namespace
}  // namespace tessel
