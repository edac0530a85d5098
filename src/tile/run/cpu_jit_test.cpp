// The CPU JIT: compile once, load from the on-disk cache after; two processes compiling the same
// kernel at the same time both succeed and leave one library and no temporaries; a compiler
// error or a missing compiler is a Status that says so.
#include "tile/run/cpu_jit.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <random>

namespace tessel::tile {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the system's temporary directory, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "tessel-jit-test-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A kernel that writes i * factor into slot 0's buffer for blocks [begin, end).
std::string source(int factor, const std::string& salt) {
  return fmt::format(
      "// {}\n#include \"tile/codegen/cpu/prelude.h\"\n"
      "extern \"C\" int64_t tessel_t(const tessel_cpu::Arg* a, int64_t begin, int64_t end) {{\n"
      "  int64_t* out = static_cast<int64_t*>(a[0].ptr);\n"
      "  for (int64_t i = begin; i < end; ++i) out[i] = i * {};\n  return 0;\n}}\n",
      salt, factor);
}

bool runs_right(const CpuModule& m, int factor) {
  std::vector<int64_t> out(10, -1);
  tessel_cpu::Arg arg;
  arg.ptr = out.data();
  m.entry(&arg, 2, 9);
  for (int64_t i = 0; i < 10; ++i)
    if (out[i] != (i >= 2 && i < 9 ? i * factor : -1)) return false;
  return true;
}

TEST(CpuJit, CompilesOnceThenLoadsFromTheCache) {
  TempDir dir;
  CpuJitOptions o;
  o.cache_dir = dir.path();
  auto first = jit_compile_cpu(source(3, "cache"), "tessel_t", o);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_FALSE(first->from_cache);
  EXPECT_TRUE(runs_right(*first, 3));
  auto second = jit_compile_cpu(source(3, "cache"), "tessel_t", o);
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_TRUE(second->from_cache);
  EXPECT_EQ(second->library_path, first->library_path);
  // Another source is another library.
  auto other = jit_compile_cpu(source(5, "cache"), "tessel_t", o);
  ASSERT_TRUE(other.ok()) << other.status().to_string();
  EXPECT_NE(other->library_path, first->library_path);
  EXPECT_TRUE(runs_right(*other, 5));
}

TEST(CpuJit, TwoProcessesCompilingTheSameKernelBothSucceed) {
  TempDir dir;
  std::string salt = std::to_string(std::random_device{}());
  pid_t children[2];
  for (pid_t& child : children) {
    child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      CpuJitOptions o;
      o.cache_dir = dir.path();
      auto m = jit_compile_cpu(source(7, salt), "tessel_t", o);
      ::_exit(m.ok() && runs_right(*m, 7) ? 0 : 1);
    }
  }
  for (pid_t child : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  int libraries = 0, leftovers = 0;
  for (const auto& f : fs::directory_iterator(fs::path(dir.path()) / "kernels")) {
    std::string name = f.path().filename().string();
    if (name.find(".tmp.") != std::string::npos)
      ++leftovers;
    else if (f.path().extension() == ".so")
      ++libraries;
  }
  EXPECT_EQ(libraries, 1);
  EXPECT_EQ(leftovers, 0);
}

TEST(CpuJit, CompilerErrorsAndMissingCompilersAreStatuses) {
  TempDir dir;
  CpuJitOptions o;
  o.cache_dir = dir.path();
  auto bad = jit_compile_cpu("extern \"C\" void tessel_t() { undeclared_thing(); }", "tessel_t", o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInternal);
  EXPECT_NE(bad.status().message().find("undeclared_thing"), std::string::npos)
      << bad.status().message();
  o.compiler = "/nonexistent/c++";
  auto missing = jit_compile_cpu(source(1, "missing"), "tessel_t", o);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kUnavailable) << missing.status().to_string();
}

}  // namespace
}  // namespace tessel::tile
