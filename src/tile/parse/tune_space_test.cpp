// Parameter spaces for the tuner: what a `tune` block declares, how its constraints evaluate,
// and every mistake reported at its file:line:col. The kernels' own spaces parse and keep their
// defaults among their points.
#include "tile/parse/tune_space.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tessel::tile {
namespace {

constexpr const char* kKernel = R"(kernel k<T: dtype = f32, BM = 8, BN = 4>(x: T[N], y: T[N]) {
  grid (cdiv(N, BM)) as (b) {
    t = fragment<f32>[BM]
    parallel (i) in t {
      y[b * BM + i] = x[b * BM + i]
    }
  }
}
)";  // 8 lines: a space appended starts on line 9

Expected<std::vector<TuneSpace>> parse(const std::string& space) {
  return parse_tune_spaces(std::string(kKernel) + space, "k.tile");
}

std::string error_of(const std::string& space) {
  auto r = parse(space);
  return r.ok() ? "parsed" : r.status().message();
}

TEST(TuneSpace, ListsValuesAndConstraints) {
  auto spaces = parse(R"(tune k on cpu {
  BM in [4, 8, 16]
  BN in [1, 2]
  require BM * BN * ELEMENT_BYTES <= FAST_MEMORY && BM % 8 == 0
}
tune k on gpu { BM in [32] })");
  ASSERT_TRUE(spaces.ok()) << spaces.status().message();
  ASSERT_EQ(spaces->size(), 2u);
  const TuneSpace& s = (*spaces)[0];
  EXPECT_EQ(s.kernel, "k");
  EXPECT_EQ(s.target, "cpu");
  ASSERT_EQ(s.params.size(), 2u);
  EXPECT_EQ(s.params[0].values, (std::vector<int64_t>{4, 8, 16}));
  EXPECT_EQ(s.size(), 6);
  // The first parameter varies slowest.
  EXPECT_EQ(s.point(0), (std::map<std::string, int64_t>{{"BM", 4}, {"BN", 1}}));
  EXPECT_EQ(s.point(5), (std::map<std::string, int64_t>{{"BM", 16}, {"BN", 2}}));
  std::map<std::string, int64_t> env{{"FAST_MEMORY", 64}, {"ELEMENT_BYTES", 4}};
  int valid = 0;
  for (int64_t i = 0; i < s.size(); ++i) {
    auto values = env;
    for (const auto& [n, v] : s.point(i))
      values[n] = v;
    valid += satisfies(s, values);
  }
  // BM in {8, 16} (multiples of 8) with BM * BN * 4 <= 64: (8, 1), (8, 2), (16, 1).
  EXPECT_EQ(valid, 3);
  // The most specific target wins; opencl falls back to gpu.
  EXPECT_EQ(find_space(*spaces, "k", "opencl"), &(*spaces)[1]);
  EXPECT_EQ(find_space(*spaces, "k", "cpu"), &(*spaces)[0]);
  EXPECT_EQ(find_space(*spaces, "other", "cpu"), nullptr);
}

TEST(TuneSpace, DivisionByZeroMakesAPointInvalidNotAnError) {
  auto spaces = parse("tune k on cpu { BM in [0, 8]\n require 64 % BM == 0 }");
  ASSERT_TRUE(spaces.ok()) << spaces.status().message();
  EXPECT_FALSE(satisfies((*spaces)[0], {{"BM", 0}}));
  EXPECT_TRUE(satisfies((*spaces)[0], {{"BM", 8}}));
}

TEST(TuneSpace, MistakesSayWhereAndWhat) {
  // The kernel takes lines 1-8; a space starts on line 9.
  EXPECT_EQ(error_of("tune q on cpu { BM in [1] }"),
            "k.tile:9:6: 'q' is not a kernel of this file");
  EXPECT_EQ(error_of("tune k on tpu { BM in [1] }"),
            "k.tile:9:11: unknown target 'tpu' (cpu, gpu, opencl or cuda)");
  EXPECT_EQ(error_of("tune k on cpu {\n  BX in [1] }"),
            "k.tile:10:3: 'BX' is not a parameter of kernel 'k'");
  EXPECT_EQ(error_of("tune k on cpu {\n  T in [1] }"),
            "k.tile:10:3: 'T' is a dtype parameter; a space lists integer parameters");
  EXPECT_EQ(error_of("tune k on cpu {\n  BM in [1, 2, 1] }"),
            "k.tile:10:16: value 1 of 'BM' is listed twice");
  EXPECT_EQ(error_of("tune k on cpu {\n  BM [1] }"),
            "k.tile:10:6: expected 'in' after 'BM', found '['");
  EXPECT_EQ(error_of("tune k on cpu {\n  BM in [1]\n  require BM < LIMIT }"),
            "k.tile:11:16: unknown name 'LIMIT' in a constraint (an integer parameter of 'k', "
            "FAST_MEMORY, MAX_THREADS, COMPUTE_UNITS or ELEMENT_BYTES)");
  EXPECT_EQ(error_of("tune k on cpu {\n  BM in [1]\n  BM in [2] }"),
            "k.tile:11:3: 'BM' is listed twice (first at k.tile:10:3)");
  EXPECT_EQ(error_of("tune k on cpu { BM in [1] }\ntune k on cpu { BN in [1] }"),
            "k.tile:10:1: a second space for 'k' on cpu (the first is at k.tile:9:1)");
  EXPECT_EQ(error_of("tune k on cpu { BM in [1]"),
            "k.tile:9:1: this space is never closed with '}'");
  EXPECT_EQ(error_of("tune k on cpu { }"), "k.tile:9:1: the space of 'k' lists no parameter");
  EXPECT_EQ(error_of("tune k on cpu { BM in [x] }"),
            "k.tile:9:24: expected an integer value for 'BM', found 'x'");
}

TEST(TuneSpace, KernelFilesDeclareSpacesThatHoldTheirDefaults) {
  const char* dir = std::getenv("TESSEL_SOURCE_DIR");
  const std::string kernels = std::string(dir ? dir : ".") + "/kernels";
  int declared = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kernels)) {
    if (entry.path().extension() != ".tile") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    auto spaces = parse_tune_spaces(text.str(), entry.path().string());
    ASSERT_TRUE(spaces.ok()) << spaces.status().message();
    declared += static_cast<int>(spaces->size());
    for (const TuneSpace& s : *spaces) {
      // A 1 MiB L2 (CPU) or 64 KiB of local memory with 256 threads (GPU), f32.
      const bool cpu = s.target == "cpu";
      std::map<std::string, int64_t> env{{"FAST_MEMORY", cpu ? 1 << 20 : 64 << 10},
                                         {"MAX_THREADS", cpu ? 1 : 256},
                                         {"COMPUTE_UNITS", 2},
                                         {"ELEMENT_BYTES", 4},
                                         {"STAGES", 2}};
      int valid = 0;
      for (int64_t i = 0; i < s.size(); ++i) {
        auto values = env;
        for (const auto& [n, v] : s.point(i))
          values[n] = v;
        valid += satisfies(s, values);
      }
      EXPECT_GT(valid, 1) << s.kernel << " on " << s.target;
    }
  }
  // gemm and batched_gemm (cpu, gpu), conv_implicit, conv_gemm (cpu, gpu), reduce_rows (cpu, gpu).
  EXPECT_GE(declared, 9);
}

}  // namespace
}  // namespace tessel::tile
