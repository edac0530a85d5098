// The parser and the builder: printed IR parses back to itself, and the C++ builder makes the
// same IR as the .tile text of kernels/gemm.tile.
#include "tile/parse/parser.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "tile/ir/printer.h"
#include "tile/parse/builder.h"

namespace tessel::tile {
namespace {

std::string source_dir() {
  const char* d = std::getenv("TESSEL_SOURCE_DIR");
  return d ? d : ".";
}

TEST(Parser, GemmKernelParsesAndPrintsBackToItself) {
  auto kernels = parse_tile_file(source_dir() + "/kernels/gemm.tile");
  ASSERT_TRUE(kernels.ok()) << kernels.status().to_string();
  ASSERT_EQ(kernels->size(), 1u);
  const Kernel& k = (*kernels)[0];
  EXPECT_EQ(k.name, "gemm");
  ASSERT_EQ(k.args.size(), 6u);
  EXPECT_EQ(k.args[0].name, "A");
  EXPECT_EQ(k.args[4].scalar->type, kF32);
  ASSERT_EQ(k.sizes.size(), 3u);
  EXPECT_EQ(k.sizes[0]->as<Var>()->name, "M");
  EXPECT_EQ(k.sizes[1]->as<Var>()->name, "K");
  EXPECT_EQ(k.sizes[2]->as<Var>()->name, "N");
  std::string printed = to_string(k);
  auto again = parse_kernel(printed, "<printed>");
  ASSERT_TRUE(again.ok()) << again.status().to_string() << "\n" << printed;
  EXPECT_EQ(to_string(*again), printed);
}

TEST(Parser, ExpressionsKeepPrecedenceThroughPrinting) {
  const char* src = R"(kernel k<B = 8>(x: f32[N], y: f32[N]) {
  grid (cdiv(N, B)) as (b) {
    parallel (i) in [B] {
      n = b * B + i
      a = (x[n] + 1.0) * 2.0 - x[n] / (x[n] - 3.0)
      t = -(a * a) + -1.5
      y[n] = select(n % 2 == 0 && !(a < 0.0) || n >= 3, exp(t), max(a, 0.0))
    }
  }
}
)";
  auto k = parse_kernel(src, "<test>");
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  std::string printed = to_string(*k);
  EXPECT_NE(printed.find("a = (x[n] + 1.0) * 2.0 - x[n] / (x[n] - 3.0)"), std::string::npos)
      << printed;
  EXPECT_NE(printed.find("t = -(a * a) + -1.5"), std::string::npos) << printed;
  EXPECT_NE(printed.find("select(n % 2 == 0 && !(a < 0.0) || n >= 3, exp(t), max(a, 0.0))"),
            std::string::npos)
      << printed;
  auto again = parse_kernel(printed, "<printed>");
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(to_string(*again), printed);
}

TEST(Parser, FileWithSeveralKernelsNeedsAName) {
  const char* src = R"(
kernel a(x: f32[N]) { grid (N) as (b) { } }
kernel b(x: f32[N]) { grid (N) as (b) { } }
)";
  EXPECT_EQ(parse_tile(src, "two.tile")->size(), 2u);
  EXPECT_EQ(parse_kernel(src, "two.tile").status().message(),
            "two.tile defines 2 kernels (a, b); name the one you mean");
  EXPECT_EQ(parse_kernel(src, "two.tile", "b")->name, "b");
}

// kernels/gemm.tile, written with the builder.
Expected<Kernel> build_gemm() {
  KernelBuilder kb("gemm");
  DType T = kb.dtype_param("T", kF32);
  DType U = kb.dtype_param("U", kF32);
  Ex BM = kb.param("BM", 192), BN = kb.param("BN", 256), BK = kb.param("BK", 256);
  Ex STAGES = kb.param("STAGES", 2), BIAS = kb.param("BIAS", 0), ACT = kb.param("ACT", 0);
  Ex TM = kb.param("TM", 8), TN = kb.param("TN", 8);
  Tile A = kb.tensor("A", T, {"M", "K"});
  Tile B = kb.tensor("B", T, {"K", "N"});
  Tile C = kb.tensor("C", U, {"M", "N"});
  Tile bias = kb.tensor("bias", U, {"N"});
  Ex alpha = kb.scalar("alpha", kF32), beta = kb.scalar("beta", kF32);
  kb.on("gpu", {{"BM", "64"}, {"BN", "64"}, {"BK", "16"}, {"TM", "4"}, {"TN", "4"}});
  kb.on("opencl", {{"BM", "32"}, {"BN", "64"}, {"BK", "16"}, {"TM", "4"}, {"TN", "16"}});
  Ex M = kb.size("M"), N = kb.size("N"), K = kb.size("K");
  kb.grid({cdiv(N, BN), cdiv(M, BM)}, {"bx", "by"}, {BM / TM, BN / TN}, [&](std::vector<Ex> b) {
    Ex bx = b[0], by = b[1];
    Tile As = kb.shared("As", T, {BM, BK});
    Tile Bs = kb.shared("Bs", T, {BK, BN});
    Tile acc = kb.fragment("acc", kF32, {BM, BN});
    kb.clear(acc);
    kb.pipelined("k", cdiv(K, BK), STAGES, [&](Ex k) {
      kb.copy(A.at(by * BM, k * BK), As);
      kb.copy(B.at(k * BK, bx * BN), Bs);
      kb.gemm(As, Bs, acc);
    });
    kb.parallel({"i", "j"}, acc, [&](std::vector<Ex> ij) {
      Ex r = kb.let("r", by * BM + ij[0]);
      Ex c = kb.let("c", bx * BN + ij[1]);
      Ex v = kb.let(
          "v", alpha * acc(ij[0], ij[1]) + select(beta == 0.0, 0.0, beta * kb.cast(kF32, C(r, c))));
      Ex y = kb.let("y", v + select(BIAS != 0, kb.cast(kF32, bias(c)), 0.0));
      kb.store(C, {r, c},
               select(ACT == 1, kb.call("relu", {y}), select(ACT == 2, kb.call("gelu", {y}), y)));
    });
  });
  return kb.build();
}

TEST(Builder, MakesTheSameIrAsTheGemmSource) {
  auto parsed = parse_tile_file(source_dir() + "/kernels/gemm.tile");
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  auto built = build_gemm();
  ASSERT_TRUE(built.ok()) << built.status().to_string();
  EXPECT_EQ(to_string(*built), to_string((*parsed)[0]));
}

TEST(Builder, ReportsTheFirstErrorWithTheCallersLocation) {
  KernelBuilder kb("bad");
  Tile x = kb.tensor("x", kF32, {"N"});
  int line = __LINE__ + 1;
  Ex n = kb.size("Q");
  kb.grid({n}, {"b"}, [&](std::vector<Ex>) {});
  auto k = kb.build();
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find(fmt::format("parser_test.cpp:{}:", line)), std::string::npos)
      << k.status().message();
  EXPECT_NE(k.status().message().find("unknown name 'Q'"), std::string::npos);
}

}  // namespace
}  // namespace tessel::tile
