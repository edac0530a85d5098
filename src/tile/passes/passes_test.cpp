// Passes, one at a time, on small kernels: the IR each produces is compared with text written
// out by hand here (what the pass is meant to do), and thread_tiling against brute force.
#include <gtest/gtest.h>

#include <set>

#include "tile/ir/printer.h"
#include "tile/parse/parser.h"
#include "tile/passes/infer_bounds.h"
#include "tile/passes/place_fragments.h"
#include "tile/passes/simplify.h"
#include "tile/passes/specialize.h"
#include "tile/pipeline.h"

namespace tessel::tile {
namespace {

Kernel parse(const char* src) {
  auto k = parse_kernel(src, "p.tile");
  EXPECT_TRUE(k.ok()) << k.status().to_string();
  return k.ok() ? *k : Kernel{};
}

TEST(Specialize, SubstitutesParametersAndFoldsWhatBecameConstant) {
  Kernel k = parse(R"(kernel k<T: dtype = f32, B = 8, FLAG = 0>(x: T[N]) {
  grid (cdiv(N, B)) as (b) {
    t = fragment<T>[B * 2]
    parallel (i) in t {
      t[i] = select(FLAG == 1, T(1.0), x[b * B + i % B])
    }
  }
})");
  auto s = specialize(k, {{"T", "bf16"}, {"B", "4"}});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(to_string(*s), R"(kernel k<T: dtype = bf16, B = 4, FLAG = 0>(x: bf16[N]) {
  grid (cdiv(N, 4)) as (b) {
    t = fragment<bf16>[8]
    parallel (i) in [8] {
      t[i] = x[b * 4 + i % 4]
    }
  }
}
)");
}

TEST(Specialize, TargetDefaultsThenOverrides) {
  Kernel k = parse(R"(kernel k<B = 8, C = 1, T: dtype = f32>(x: T[N])
    on gpu <B = 4, C = 2> on cuda <C = 3, T = bf16> {
  grid (cdiv(N, B * C)) as (b) { }
})");
  auto value = [&](const std::string& target, const std::map<std::string, std::string>& d) {
    auto s = specialize(k, d, target);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return fmt::format("B={} C={} T={}", s->params[0].int_value, s->params[1].int_value,
                       s->params[2].dtype_value.name());
  };
  EXPECT_EQ(value("cpu", {}), "B=8 C=1 T=f32");
  EXPECT_EQ(value("opencl", {}), "B=4 C=2 T=f32");
  EXPECT_EQ(value("cuda", {}), "B=4 C=3 T=bf16");
  EXPECT_EQ(value("cuda", {{"C", "5"}}), "B=4 C=5 T=bf16");
}

TEST(Simplify, FoldsIntegersLikeC) {
  auto fold = [](BinaryOp op, int64_t a, int64_t b) {
    return *const_int(simplify(Binary::make(op, make_int(a), make_int(b))));
  };
  EXPECT_EQ(fold(BinaryOp::kDiv, -7, 2), -3);  // toward zero
  EXPECT_EQ(fold(BinaryOp::kMod, -7, 2), -1);
  EXPECT_EQ(fold(BinaryOp::kCDiv, 7, 2), 4);
  EXPECT_EQ(fold(BinaryOp::kMin, 3, -2), -2);
  Expr x = Var::make("x", kI64, VarKind::kLoop);
  EXPECT_EQ(simplify(Binary::make(BinaryOp::kAdd, x, make_int(0))), x);
  EXPECT_EQ(to_string(simplify(Binary::make(BinaryOp::kMul, x, make_int(0)))), "0");
}

TEST(InferBounds, MasksGlobalReadsAndStopsStoreLoopsAtTheEdge) {
  Kernel k = parse(R"(kernel k(x: f32[M, N], y: f32[M, N]) {
  grid (cdiv(N, 8), cdiv(M, 2)) as (bx, by) {
    t = shared<f32>[2, 8]
    copy(x[by * 2, bx * 8], t, pad=-1.0)
    parallel (i, j) in t {
      r = by * 2 + i
      y[r, bx * 8 + j] = t[i, j] + x[r, 0]
    }
  }
})");
  CompileOptions o;
  o.target = Target::cpu();
  std::vector<std::string> after;
  o.dump = [&](const std::string& pass, const Kernel& ir) {
    if (pass == "infer_bounds") after.push_back(to_string(ir));
  };
  ASSERT_TRUE(compile_ir(k, o).ok());
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0], R"(kernel k(x: f32[M, N], y: f32[M, N]) {
  grid (cdiv(N, 8), cdiv(M, 2)) as (bx, by) {
    t = shared<f32>[2, 8]
    parallel (_i0, _i1) in [2, 8] {
      t[_i0, _i1] = masked(x[by * 2 + _i0, bx * 8 + _i1], by * 2 + _i0 < M && bx * 8 + _i1 < N, other=-1.0)
    }
    parallel (i, j) in [2, 8] limit [min(2, M - by * 2), min(8, N - bx * 8)] {
      r = by * 2 + i
      y[r, bx * 8 + j] = t[i, j] + masked(x[r, 0], 0 < N, other=0.0)
    }
  }
}
)");
}

TEST(InsertBarriers, OncePerHazardNotPerIteration) {
  Kernel k = parse(R"(kernel k(A: f32[M, K], B: f32[K, N], C: f32[M, N]) {
  grid (cdiv(N, 16), cdiv(M, 16)) as (bx, by) {
    As = shared<f32>[16, 4]
    Bs = shared<f32>[4, 16]
    acc = fragment<f32>[16, 16]
    clear(acc)
    for k in range(cdiv(K, 4)) {
      copy(A[by * 16, k * 4], As)
      copy(B[k * 4, bx * 16], Bs)
      gemm(As, Bs, acc)
    }
    copy(acc, C[by * 16, bx * 16])
  }
})");
  CompileOptions o;
  o.target = Target::opencl(32 << 10, 64);
  auto ir = compile_ir(k, o);
  ASSERT_TRUE(ir.ok()) << ir.status().to_string();
  std::string text = to_string(*ir);
  // acc lives in registers; the k loop waits once before refilling As/Bs (the previous
  // iteration's gemm read them) and once before the gemm reads them; the inner loop never waits.
  EXPECT_NE(text.find("acc = fragment<f32>[16, 16]  layout registers"), std::string::npos) << text;
  std::string loop = text.substr(text.find("for k in range"));
  loop = loop.substr(0, loop.find("\n    }\n"));
  EXPECT_EQ(loop.rfind("for k in range(cdiv(K, 4)) {\n      barrier()\n", 0), 0u) << loop;
  size_t count = 0;
  for (size_t p = loop.find("barrier()"); p != std::string::npos; p = loop.find("barrier()", p + 1))
    ++count;
  EXPECT_EQ(count, 2u) << loop;
  EXPECT_EQ(loop.find("barrier()", loop.find("for _k")), std::string::npos) << loop;
}

TEST(PipelineGpuLoops, RotatesStageCopiesWithOneBarrierPerStep) {
  Kernel k = parse(R"(kernel k(A: f32[M, K], B: f32[K, N], C: f32[M, N]) {
  grid (cdiv(N, 16), cdiv(M, 16)) as (bx, by) {
    As = shared<f32>[16, 4]
    Bs = shared<f32>[4, 16]
    acc = fragment<f32>[16, 16]
    clear(acc)
    for k in pipelined(cdiv(K, 4), stages=3) {
      copy(A[by * 16, k * 4], As)
      copy(B[k * 4, bx * 16], Bs)
      gemm(As, Bs, acc)
    }
    copy(acc, C[by * 16, bx * 16])
  }
})");
  CompileOptions o;
  o.target = Target::opencl(32 << 10, 64);
  std::string pipelined;
  o.dump = [&](const std::string& pass, const Kernel& ir) {
    if (pass == "pipeline_gpu_loops") pipelined = to_string(ir);
  };
  auto ir = compile_ir(k, o);
  ASSERT_TRUE(ir.ok()) << ir.status().to_string();
  // Two more copies of each tile; the prologue fills stages 0 and 1; iteration k fills the stage
  // of k + 2, the one iteration k - 1 used.
  for (const char* line : {"_As_1 = shared<f32>[16, 4]", "_As_2 = shared<f32>[16, 4]",
                           "    copy(A[by * 16, 0], As)\n", "    copy(A[by * 16, 4], _As_1)\n",
                           "      if k % 3 == 0 {\n        copy(A[by * 16, (k + 2) * 4], _As_2)",
                           "gemm(_As_1, _Bs_1, acc)"})
    EXPECT_NE(pipelined.find(line), std::string::npos) << line << "\n" << pipelined;
  std::string text = to_string(*ir);
  std::string loop = text.substr(text.find("for k in range"));
  size_t barriers = 0;
  for (size_t p = loop.find("barrier()"); p != std::string::npos; p = loop.find("barrier()", p + 1))
    ++barriers;
  EXPECT_EQ(barriers, 3u) << loop;  // one per stage branch
}

TEST(PlaceFragments, SharedWhenThreadsReadEachOthersElements) {
  Kernel k = parse(R"(kernel k(x: f32[M, N], y: f32[M]) {
  grid (cdiv(M, 4)) as (b) {
    t = fragment<f32>[4, 32]
    s = fragment<f32>[4]
    clear(s)
    copy(x[b * 4, 0], t)
    reduce(t, s, axis=1, op=sum)
    copy(s, y[b * 4])
  }
})");
  CompileOptions o;
  o.target = Target::cuda(48 << 10, 64);
  auto ir = compile_ir(k, o);
  ASSERT_TRUE(ir.ok()) << ir.status().to_string();
  std::string text = to_string(*ir);
  // The reduce reads t[i, k] across threads: t is shared. s is only touched at its own index.
  EXPECT_NE(text.find("t = fragment<f32>[4, 32]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("s = fragment<f32>[4]  layout registers"), std::string::npos) << text;
}

TEST(ScheduleCpuGemm, SharesTilesOnlyWhenEveryBlockWouldPackTheSame) {
  // A's tile depends on (by, k) only; B is also written by the kernel, so blocks may see
  // different contents of it and each packs its own.
  Kernel k = parse(R"(kernel k(A: f32[M, K], B: f32[K, N], C: f32[M, N]) {
  grid (cdiv(N, 16), cdiv(M, 16)) as (bx, by) {
    As = shared<f32>[16, 8]
    Bs = shared<f32>[8, 16]
    acc = fragment<f32>[16, 16]
    clear(acc)
    for k in range(cdiv(K, 8)) {
      copy(A[by * 16, k * 8], As)
      copy(B[k * 8, bx * 16], Bs)
      gemm(As, Bs, acc)
    }
    parallel (i, j) in acc {
      B[by * 16 + i, bx * 16 + j] = acc[i, j]
    }
  }
})");
  CompileOptions o;
  o.target = Target::cpu();
  auto ir = compile_ir(k, o);
  ASSERT_TRUE(ir.ok()) << ir.status().to_string();
  std::string text = to_string(*ir);
  EXPECT_NE(
      text.find("As = shared<f32>[16, 8]  layout packed_a edge  shared by blocks per (by, k)\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("Bs = shared<f32>[8, 16]  layout packed_b edge\n"), std::string::npos)
      << text;
}

TEST(ThreadTiling, EveryElementHasExactlyOneOwner) {
  for (auto [extents, threads] : std::vector<std::pair<std::vector<int64_t>, int>>{{{32, 32}, 128},
                                                                                   {{4}, 128},
                                                                                   {{1, 1024}, 128},
                                                                                   {{128, 1}, 256},
                                                                                   {{3, 5, 7}, 64},
                                                                                   {{17, 9}, 96}}) {
    ThreadTiling t = thread_tiling(extents, threads);
    int64_t total = 1;
    for (int64_t e : extents)
      total *= e;
    std::multiset<int64_t> owned;
    for (int tid = 0; tid < std::min(threads, t.tr * t.tc); ++tid)
      for (int64_t a = 0; a < t.row_steps; ++a) {
        int64_t row = extents.size() == 1 ? tid + t.tr * a : tid / t.tc + t.tr * a;
        if (row >= t.rows) continue;
        for (int64_t b = 0; b < t.col_steps; ++b) {
          int64_t col = extents.size() == 1 ? 0 : tid % t.tc + t.tc * b;
          if (col < t.cols) owned.insert(row * t.cols + col);
        }
      }
    EXPECT_EQ(static_cast<int64_t>(owned.size()), total);
    for (int64_t e = 0; e < total; ++e)
      EXPECT_EQ(owned.count(e), 1u) << e;
  }
  ThreadTiling square = thread_tiling({32, 32}, 128);
  EXPECT_EQ(square.tr, 16);
  EXPECT_EQ(square.tc, 8);
  EXPECT_EQ(square.per_thread(), 8);
}

// The block-shaped split of a kernel with `threads (R, C)`: thread (r, c) owns rows r + R * a and
// runs of `run` adjacent columns starting at (c + C * (b / run)) * run (place_fragments.h).
TEST(ThreadTiling, BlockShapedSplitsOwnEveryElementOnceInColumnRuns) {
  struct Case {
    std::vector<int64_t> extents;
    int rows, cols, column_run;
    int64_t run;  // expected
  };
  for (const Case& c : std::vector<Case>{{{32, 64}, 8, 4, 16, 16},
                                         {{32, 16}, 8, 4, 16, 4},
                                         {{16, 64}, 8, 4, 1, 1},
                                         {{64, 64}, 16, 16, 1, 1},
                                         {{30, 70}, 8, 4, 16, 1},
                                         {{2, 5, 64}, 4, 8, 4, 4}}) {
    BlockThreads block;
    block.rows = c.rows;
    block.cols = c.cols;
    block.count = c.rows * c.cols;
    block.column_run = c.column_run;
    ThreadTiling t = thread_tiling(c.extents, block);
    ASSERT_TRUE(t.block_shaped);
    EXPECT_EQ(t.tr, c.rows);
    EXPECT_EQ(t.tc, c.cols);
    EXPECT_EQ(t.run, c.run);
    int64_t total = 1;
    for (int64_t e : c.extents)
      total *= e;
    std::multiset<int64_t> owned;
    for (int r = 0; r < c.rows; ++r)
      for (int col = 0; col < c.cols; ++col)
        for (int64_t a = 0; a < t.row_steps; ++a) {
          int64_t row = r + int64_t{c.rows} * a;
          if (row >= t.rows) continue;
          for (int64_t b = 0; b < t.col_steps; ++b) {
            int64_t j = (col + c.cols * (b / c.run)) * c.run + b % c.run;
            if (j < t.cols) owned.insert(row * t.cols + j);
          }
        }
    EXPECT_EQ(static_cast<int64_t>(owned.size()), total);
    for (int64_t e = 0; e < total; ++e)
      EXPECT_EQ(owned.count(e), 1u) << e;
  }
  // Too few columns for the block's shape: the plain split over all its threads.
  BlockThreads narrow{32, 8, 4, 16};
  EXPECT_FALSE(thread_tiling({64, 2}, narrow).block_shaped);
  EXPECT_EQ(thread_tiling({64, 2}, narrow).per_thread(), thread_tiling({64, 2}, 32).per_thread());
}

TEST(Pipeline, DumpsEveryPassInOrder) {
  Kernel k = parse("kernel k(x: f32[N]) { grid (N) as (b) { } }");
  for (auto [target, expected] : std::vector<std::pair<Target, std::string>>{
           {Target::cpu(),
            "parse specialize pack_gemm_operands lower_tile_ops infer_bounds schedule_cpu_gemm"},
           {Target::opencl(),
            "parse specialize pipeline_gpu_loops lower_tile_ops infer_bounds place_fragments "
            "insert_barriers"}}) {
    CompileOptions o;
    o.target = target;
    std::string passes;
    o.dump = [&](const std::string& pass, const Kernel&) {
      passes += (passes.empty() ? "" : " ") + pass;
    };
    ASSERT_TRUE(compile_ir(k, o).ok());
    EXPECT_EQ(passes, expected);
  }
}

}  // namespace
}  // namespace tessel::tile
