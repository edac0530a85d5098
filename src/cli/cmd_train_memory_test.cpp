// `tessel train` under an address-space limit (ulimit -v), as an outside tester ran it: whatever
// the limit, the command ends with exit code 0 or with "error: ..." and exit code 1, never by a
// signal. Every allocation can be the one that fails: tensor memory (named by the allocator),
// zlib's buffers, a std::vector deep in a library, the stack of the prefetch or a worker thread.
// Before, limits between about 85 and 105 MiB ended in std::terminate (SIGABRT) from the prefetch
// thread's std::system_error or an uncaught std::bad_alloc.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "support/subprocess.h"

namespace {

struct Ended {
  int exit_code = -1;  // -1: not an exit
  int signal = 0;
  std::string output;
};

// Runs `tessel train config` with the address space capped at `limit_bytes`.
Ended train_under_limit(const std::string& config, rlim_t limit_bytes) {
  Ended r;
  int fds[2];
  if (::pipe(fds) != 0) return r;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::close(fds[0]);
    struct rlimit limit = {limit_bytes, limit_bytes};
    if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(126);
    ::setenv("TESSEL_THREADS", "2", 1);
    ::execl(TESSEL_CLI_PATH, TESSEL_CLI_PATH, "train", config.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buffer, sizeof(buffer))) > 0)
    r.output.append(buffer, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

// DISABLED until generated CPU kernels check their scratch memory: Scratch::get
// (tile/codegen/cpu/prelude.h) uses aligned_alloc's result unchecked, and since the gemm clears
// its accumulator with one memset (main, 8360150) a limit near 96 MiB ends in SIGSEGV inside
// batched_gemm. Run it with --gtest_also_run_disabled_tests once that is an error.
TEST(TrainUnderAMemoryLimit, DISABLED_EveryLimitEndsInSuccessOrAnErrorNeverASignal) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "sanitizers reserve more address space than the limits leave";
#else
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("tessel_train_memory_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string config = (dir / "mlp.toml").string();
  std::ofstream(config) << "seed = 1\n[target]\ndevice = \"cpu\"\n"
                           "[model]\nname = \"mlp\"\nhidden = [64]\n"
                           "[data]\nname = \"fashion_mnist\"\nbatch_size = 32\n"
                           "[optimizer]\nname = \"adamw\"\nlr = 1e-3\n"
                           "[train]\nsteps = 3\nlog_interval = 1\ncheckpoint_path = \""
                        << (dir / "ckpt.safetensors").string() << "\"\n";
  int succeeded = 0, failed = 0;
  // From too little to load the data set up to enough for the whole run (twice), in 4 MiB
  // steps: each step moves the failing allocation somewhere else.
  for (rlim_t mib = 48; mib <= 512 && succeeded < 2; mib += 4) {
    std::filesystem::remove(dir / "ckpt.safetensors");
    const Ended r = train_under_limit(config, mib << 20);
    ASSERT_EQ(r.signal, 0) << "limit " << mib << " MiB: killed by signal " << r.signal << "\n"
                           << r.output;
    ASSERT_TRUE(r.exit_code == 0 || r.exit_code == 1)
        << "limit " << mib << " MiB: exit code " << r.exit_code << "\n"
        << r.output;
    if (r.exit_code == 0) {
      ++succeeded;
      EXPECT_TRUE(std::filesystem::exists(dir / "ckpt.safetensors")) << mib << " MiB";
    } else {
      ++failed;
      EXPECT_NE(r.output.find("error: "), std::string::npos) << mib << " MiB:\n" << r.output;
    }
  }
  // Both ends were reached, or the sweep tested nothing.
  EXPECT_GT(failed, 0);
  EXPECT_GT(succeeded, 0);
  std::filesystem::remove_all(dir);
#endif
}

// [train] memory_limit: the memory plan runs before anything is built, and a run whose predicted
// peak is over the limit fails at start, exit 1, with the breakdown and without a step taken; one
// under the limit trains as before.
TEST(TrainMemoryLimit, ARunThatWillNotFitFailsAtStartWithTheBreakdown) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tessel_train_limit_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto config = [&](const std::string& limit) {
    const std::string path = (dir / ("mlp_" + limit + ".toml")).string();
    std::ofstream(path) << "seed = 1\n[target]\ndevice = \"cpu\"\n"
                           "[model]\nname = \"mlp\"\nhidden = [256]\n"
                           "[data]\nname = \"synthetic\"\nshape = [1, 28, 28]\nsamples = 256\n"
                           "eval_samples = 64\nbatch_size = 64\neval_batch_size = 64\n"
                           "[optimizer]\nname = \"adamw\"\nlr = 1e-3\n"
                           "[train]\nsteps = 2\nlog_interval = 1\nmemory_limit = \""
                        << limit << "\"\n";
    return path;
  };
  const std::vector<std::pair<std::string, std::string>> env = {{"TESSEL_THREADS", "2"}};

  const tessel::ProgramRun small =
      tessel::run_program({TESSEL_CLI_PATH, "train", config("4MiB")}, env);
  EXPECT_EQ(small.exit_code, 1) << small.output;
  EXPECT_NE(small.output.find("the run will not fit"), std::string::npos) << small.output;
  EXPECT_NE(small.output.find("over [train] memory_limit 4.0 MiB"), std::string::npos)
      << small.output;
  for (const char* part : {"parameters", "gradients", "optimizer_state", "activations", "workspace",
                           "predicted peak resident memory"})
    EXPECT_NE(small.output.find(part), std::string::npos) << part << "\n" << small.output;
  EXPECT_EQ(small.output.find("step 1"), std::string::npos) << small.output;

  const tessel::ProgramRun ample =
      tessel::run_program({TESSEL_CLI_PATH, "train", config("8GiB")}, env);
  EXPECT_EQ(ample.exit_code, 0) << ample.output;
  EXPECT_NE(ample.output.find("memory plan: predicted peak"), std::string::npos) << ample.output;
  EXPECT_NE(ample.output.find("done: step 2"), std::string::npos) << ample.output;
  std::filesystem::remove_all(dir);
}

}  // namespace
