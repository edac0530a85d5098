// Every user error of the tile language that a person is likely to make, with the exact
// file:line:col and message the compiler gives. The compiler must report each one as a Status,
// never crash or assert. Sources are short so the locations can be checked by eye: line 1 is the
// kernel header, columns count from 1.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "tile/codegen/cpu/cpu_renderer.h"
#include "tile/codegen/cuda/cuda_renderer.h"
#include "tile/codegen/opencl/opencl_renderer.h"
#include "tile/parse/parser.h"
#include "tile/pipeline.h"

namespace tessel::tile {
namespace {

struct ErrorCase {
  const char* name;
  const char* source;
  const char* expected;  // the whole message
  std::map<std::string, std::string> params = {};
  Target target = Target::cpu();
};

// Parses and compiles; returns the message of the first error, or "" when there was none.
std::string first_error(const ErrorCase& c) {
  auto k = parse_kernel(c.source, "e.tile");
  if (!k) return k.status().message();
  CompileOptions o;
  o.target = c.target;
  o.params = c.params;
  auto ir = compile_ir(*k, o);
  return ir.ok() ? "" : ir.status().message();
}

const ErrorCase kCases[] = {
    {"UnknownName",
     "kernel k(x: f32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    parallel (i) in [1] { x[b] = z[b] }\n"
     "  }\n"
     "}\n",
     "e.tile:3:34: unknown name 'z'"},
    {"UnknownDtype", "kernel k(x: f33[N]) {\n  grid (N) as (b) { }\n}\n",
     "e.tile:1:13: unknown dtype 'f33' (expected f32, f16, bf16, f64, i32, i64, ... or a dtype "
     "parameter)"},
    {"MismatchedTypes",
     "kernel k<T: dtype = f16>(x: T[N], y: f32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    parallel (i) in [1] { y[b] = x[b] + y[b] }\n"
     "  }\n"
     "}\n",
     "e.tile:3:39: mismatched types in '+': T and f32; convert one side, e.g. T(...)"},
    {"GemmShapesDisagree",
     "kernel k(A: f32[M, K]) {\n"
     "  grid (1) as (b) {\n"
     "    As = shared<f32>[16, 32]\n"
     "    Bs = shared<f32>[16, 8]\n"
     "    acc = fragment<f32>[16, 8]\n"
     "    gemm(As, Bs, acc)\n"
     "  }\n"
     "}\n",
     "e.tile:6:5: gemm shapes do not agree: 'As' is [16, 32] and 'Bs' is [16, 8]; the inner "
     "dimensions 32 and 16 differ"},
    {"WrongArgumentCount",
     "kernel k(A: f32[M, K]) {\n"
     "  grid (1) as (b) {\n"
     "    As = shared<f32>[16, 32]\n"
     "    copy(A[0, 0], As, As)\n"
     "  }\n"
     "}\n",
     "e.tile:4:5: copy takes 2 arguments, got 3; usage: copy(source, destination[, pad=value])"},
    {"TileTooLargeForCpu",
     "kernel k(A: f32[M, K]) {\n"
     "  grid (1) as (b) {\n"
     "    As = shared<f32>[256, 512]\n"
     "    acc = fragment<f32>[512, 512]\n"
     "    copy(A[0, 0], As)\n"
     "  }\n"
     "}\n",
     "e.tile:4:5: tile 'acc' does not fit: the tiles of one block need 1.5 MiB (As 512 KiB, acc 1 "
     "MiB) but the cpu target has 1 MiB of fast memory per block"},
    {"UnknownParameterOverride",
     "kernel k<BM = 4>(x: f32[N]) {\n  grid (N) as (b) { }\n}\n",
     "e.tile:1:8: kernel 'k' has no parameter 'BX' (its parameters: BM)",
     {{"BX", "8"}}},
    {"IntegerParameterGivenText",
     "kernel k<BM = 4>(x: f32[N]) {\n  grid (N) as (b) { }\n}\n",
     "e.tile:1:10: parameter 'BM' is an integer; got '8x'",
     {{"BM", "8x"}}},
    {"DtypeParameterGivenInteger",
     "kernel k<T: dtype = f32>(x: T[N]) {\n  grid (N) as (b) { }\n}\n",
     "e.tile:1:10: parameter 'T' is a float dtype (f32, f16, bf16, f64); got 'i32'",
     {{"T", "i32"}}},
    {"IntegerDtypeParameterGivenFloat",
     "kernel k<T: dtype = i32>(x: T[N]) {\n  grid (N) as (b) { }\n}\n",
     "e.tile:1:10: parameter 'T' is an integer dtype (i8, u8, i16, i32, i64); got 'f32'",
     {{"T", "f32"}}},
    {"DtypeParameterDefaultsToBool",
     "kernel k<T: dtype = bool>(x: T[N]) {\n  grid (N) as (b) { }\n}\n",
     "e.tile:1:10: dtype parameter 'T' must default to a float type (f32, f16, bf16, f64) or an "
     "integer type (i8, u8, i16, i32, i64), not bool"},
    {"IntegerDtypeParameterInFloatMath",
     "kernel k<T: dtype = i32>(x: T[N]) {\n  grid (N) as (b) {\n    x[b] = exp(x[b])\n  }\n}\n",
     "e.tile:3:16: exp needs a float argument, got T; convert it, e.g. f32(...)"},
    {"TileDimensionNotPositive",
     "kernel k<BM = 4>(x: f32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    t = shared<f32>[BM, 4]\n"
     "  }\n"
     "}\n",
     "e.tile:3:5: dimension 0 of tile 't' is 0; tile dimensions must be positive",
     {{"BM", "0"}}},
    {"Redefinition",
     "kernel k(x: f32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    x = shared<f32>[4]\n"
     "  }\n"
     "}\n",
     "e.tile:3:5: 'x' is already defined at e.tile:1:10"},
    {"AssignToTileAsAWhole",
     "kernel k(x: f32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    x = 1.0\n"
     "  }\n"
     "}\n",
     "e.tile:3:5: cannot assign to tensor 'x' as a whole; assign elements: x[i, j] = ..."},
    {"ValueReassigned",
     "kernel k(x: f32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    v = 1\n"
     "    v = 2\n"
     "  }\n"
     "}\n",
     "e.tile:4:5: 'v' is already defined at e.tile:3:5; values cannot be reassigned"},
    {"StoreOutsideParallel",
     "kernel k(x: f32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    x[b] = 1.0\n"
     "  }\n"
     "}\n",
     "e.tile:3:5: element assignment outside a parallel loop; wrap it in parallel (...) in ... { "
     "}"},
    {"TileOpInsideParallel",
     "kernel k(x: f32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    t = fragment<f32>[4]\n"
     "    parallel (i) in t { clear(t) }\n"
     "  }\n"
     "}\n",
     "e.tile:4:25: 'fill' is a tile operation and cannot appear inside a parallel loop"},
    {"CopyBetweenGlobals",
     "kernel k(x: f32[N], y: f32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    copy(x[b], y[b])\n"
     "  }\n"
     "}\n",
     "e.tile:3:5: copy needs a shared or fragment tile on at least one side; both 'x' and 'y' are "
     "global tensors"},
    {"GemmOnGlobal",
     "kernel k(A: f32[M, K]) {\n"
     "  grid (1) as (b) {\n"
     "    Bs = shared<f32>[4, 4]\n"
     "    acc = fragment<f32>[4, 4]\n"
     "    gemm(A[0, 0], Bs, acc)\n"
     "  }\n"
     "}\n",
     "e.tile:5:10: gemm operand 'A' is a global tensor; copy a tile of it into shared memory "
     "first"},
    {"GemmAccumulatorNotF32Fragment",
     "kernel k(A: f32[M, K]) {\n"
     "  grid (1) as (b) {\n"
     "    As = shared<f32>[4, 4]\n"
     "    Cs = shared<f32>[4, 4]\n"
     "    gemm(As, As, Cs)\n"
     "  }\n"
     "}\n",
     "e.tile:5:18: gemm accumulates into an f32 fragment; 'Cs' is shared<f32>[4, 4]"},
    {"GemmOperandDtypes",
     "kernel k(A: f32[M, K]) {\n"
     "  grid (1) as (b) {\n"
     "    As = shared<f16>[4, 4]\n"
     "    Bs = shared<f32>[4, 4]\n"
     "    acc = fragment<f32>[4, 4]\n"
     "    gemm(As, Bs, acc)\n"
     "  }\n"
     "}\n",
     "e.tile:6:5: gemm operands have different dtypes: 'As' is f16 and 'Bs' is f32"},
    {"ReduceAxisOutOfRange",
     "kernel k(x: f32[N]) {\n"
     "  grid (1) as (b) {\n"
     "    t = fragment<f32>[4, 8]\n"
     "    s = fragment<f32>[4]\n"
     "    reduce(t, s, axis=2, op=sum)\n"
     "  }\n"
     "}\n",
     "e.tile:5:23: axis 2 is out of range for 't' with 2 dimensions"},
    {"ReduceDestinationShape",
     "kernel k(x: f32[N]) {\n"
     "  grid (1) as (b) {\n"
     "    t = fragment<f32>[4, 8]\n"
     "    s = fragment<f32>[8]\n"
     "    reduce(t, s, axis=1, op=max)\n"
     "  }\n"
     "}\n",
     "e.tile:5:5: reduce of 't' along axis 1 gives [4] but 's' is [8]"},
    {"UnknownReduction",
     "kernel k(x: f32[N]) {\n"
     "  grid (1) as (b) {\n"
     "    t = fragment<f32>[4, 8]\n"
     "    s = fragment<f32>[4]\n"
     "    reduce(t, s, axis=1, op=mean)\n"
     "  }\n"
     "}\n",
     "e.tile:5:29: unknown reduction 'mean' (expected sum, max or min)"},
    {"IndexCount",
     "kernel k(x: f32[M, N]) {\n"
     "  grid (M) as (b) {\n"
     "    parallel (i) in [1] { x[b, i, 0] = 0.0 }\n"
     "  }\n"
     "}\n",
     "e.tile:3:27: 'x' has 2 dimensions but 3 indices were given"},
    {"TileIndexMayLeaveTile",
     "kernel k(x: f32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    t = fragment<f32>[8]\n"
     "    clear(t)\n"
     "    parallel (i) in t { x[b * 8 + i] = t[i + 1] }\n"
     "  }\n"
     "}\n",
     "e.tile:5:40: index 0 of tile 't' (i + 1) may leave [0, 8); it can reach 8"},
    {"CopyTileShapes",
     "kernel k(x: f32[N]) {\n"
     "  grid (1) as (b) {\n"
     "    s = shared<f32>[4, 8]\n"
     "    t = fragment<f32>[4, 8]\n"
     "    copy(s.T, t)\n"
     "  }\n"
     "}\n",
     "e.tile:5:5: copy between tiles of different shapes: 's'.T is [8, 4] and 't' is [4, 8]"},
    {"MissingParenthesis", "kernel k(x: f32[N] {\n  grid (N) as (b) { }\n}\n",
     "e.tile:1:20: expected ')' to close the argument list, found '{'"},
    {"UnclosedBrace", "kernel k(x: f32[N]) {\n  grid (N) as (b) {\n",
     "e.tile:2:19: this '{' is never closed"},
    {"GridNamesCount", "kernel k(x: f32[M, N]) {\n  grid (M, N) as (b) { }\n}\n",
     "e.tile:2:3: grid has 2 dimensions but names 1 block index"},
    {"StatementsOutsideGrid", "kernel k(x: f32[N]) {\n  grid (N) as (b) { }\n  v = 1\n}\n",
     "e.tile:3:3: statements after the grid; everything belongs inside it"},
    {"MathOnInteger",
     "kernel k(x: f32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    v = exp(b)\n"
     "  }\n"
     "}\n",
     "e.tile:3:13: exp needs a float argument, got i64; convert it, e.g. f32(...)"},
    {"SelectConditionNotBool",
     "kernel k(x: f32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    v = select(b, 1.0, 2.0)\n"
     "  }\n"
     "}\n",
     "e.tile:3:16: select's condition must be a bool, got i64"},
    {"RunTimeTileDimension",
     "kernel k(x: f32[N]) {\n"
     "  grid (1) as (b) {\n"
     "    t = shared<f32>[N]\n"
     "  }\n"
     "}\n",
     "e.tile:3:21: tile dimensions must be compile-time constants; 'N' is known only at run time"},
    {"FloatIndex",
     "kernel k(x: f32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    parallel (i) in [1] { x[1.5] = 0.0 }\n"
     "  }\n"
     "}\n",
     "e.tile:3:29: index 0 of 'x' must be an integer, got f32"},
    {"UnexpectedCharacter", "kernel k(x: f32[N]) {\n  grid (N) as (b) { @ }\n}\n",
     "e.tile:2:21: unexpected character '@'"},
    {"ReservedName", "kernel k(_x: f32[N]) {\n  grid (N) as (b) { }\n}\n",
     "e.tile:1:10: names starting with '_' are reserved for the compiler: '_x'"},
    {"NestedParallel",
     "kernel k(x: f32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    parallel (i) in [2] { parallel (j) in [2] { } }\n"
     "  }\n"
     "}\n",
     "e.tile:3:27: parallel loops do not nest; list every dimension in one: parallel (i, j) in "
     "..."},
    {"RegisterFragmentTooLargeForGpu",
     "kernel k(C: f32[M, N]) {\n"
     "  grid (1) as (b) {\n"
     "    acc = fragment<f32>[256, 256]\n"
     "    clear(acc)\n"
     "    copy(acc, C[0, 0])\n"
     "  }\n"
     "}\n",
     "e.tile:3:5: fragment 'acc' [256, 256] needs 512 registers per thread (fragments so far: "
     "512); the opencl target allows 128 with 128 threads per block; use smaller tiles",
     {},
     Target::opencl()},
    {"UnknownFunction",
     "kernel k(x: f32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    v = softplus(1.0)\n"
     "  }\n"
     "}\n",
     "e.tile:3:9: unknown function 'softplus'"},
    {"FloatIntoIntegerTensor",
     "kernel k(x: i32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    parallel (i) in [1] { x[b] = 0.5 * 3.0 }\n"
     "  }\n"
     "}\n",
     "e.tile:3:38: storing f32 into 'x' of i32 drops the fraction; convert explicitly: i32(...)"},
    {"TargetDefaultForUnknownParameter",
     "kernel k<BM = 4>(x: f32[N]) on gpu <BN = 2> {\n  grid (N) as (b) { }\n}\n",
     "e.tile:1:37: 'on gpu' sets 'BN', which is not a parameter"},
    {"UnknownTarget", "kernel k<BM = 4>(x: f32[N]) on tpu <BM = 2> {\n  grid (N) as (b) { }\n}\n",
     "e.tile:1:32: unknown target 'tpu' (expected cpu, gpu, opencl or cuda)"},
    {"BlockThreadsNotPositive",
     "kernel k<R = 2>(x: f32[N]) {\n"
     "  grid (N) as (b) threads (R, 4) { }\n"
     "}\n",
     "e.tile:2:28: block threads must be compile-time constants from 1 to 16384, got 0",
     {{"R", "0"}}},
    {"BlockThreadsNotIntegers",
     "kernel k(x: f32[N]) {\n"
     "  grid (N) as (b) threads (2.0) { }\n"
     "}\n",
     "e.tile:2:28: block threads must be integers, got f32"},
    {"BlockThreadsThreeDimensions",
     "kernel k(x: f32[N]) {\n"
     "  grid (N) as (b) threads (2, 2, 2) { }\n"
     "}\n",
     "e.tile:2:19: a block's threads are (rows, columns) or (count), not 3 values"},
    {"BlockThreadsTooManyForTheTarget",
     "kernel k(x: f32[N]) {\n"
     "  grid (N) as (b) threads (64, 32) { }\n"
     "}\n",
     "e.tile:2:3: a block of 64 x 32 threads; the opencl target allows at most 1024",
     {},
     Target::opencl()},
    {"StagesNotPositive",
     "kernel k<S = 2>(x: f32[N]) {\n"
     "  grid (1) as (b) {\n"
     "    for t in pipelined(4, stages=S) { }\n"
     "  }\n"
     "}\n",
     "e.tile:3:5: stages must be a compile-time constant of at least 1, got 0",
     {{"S", "0"}}},
    // ----- hostile input: every compile-time integer is checked, sizes and nesting are bounded
    {"FoldDivisionOverflow",
     "kernel k(x: f32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    v = (-9223372036854775807 - 1) / -1\n"
     "  }\n"
     "}\n",
     "e.tile:3:36: integer overflow: -9223372036854775808 / -1 does not fit i64"},
    {"FoldModuloOverflow",
     "kernel k(x: f32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    v = (-9223372036854775807 - 1) % -1\n"
     "  }\n"
     "}\n",
     "e.tile:3:36: integer overflow: -9223372036854775808 % -1 does not fit i64"},
    {"FoldMultiplicationOverflow",
     "kernel k(x: f32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    v = 9223372036854775807 * 9223372036854775807\n"
     "  }\n"
     "}\n",
     "e.tile:3:29: integer overflow: 9223372036854775807 * 9223372036854775807 does not fit i64"},
    {"ParameterOverflowsInASum",
     "kernel k<BM = 4>(x: f32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    v = BM + 1\n"
     "  }\n"
     "}\n",
     "e.tile:3:12: integer overflow: 9223372036854775807 + 1 does not fit i64",
     {{"BM", "9223372036854775807"}}},
    {"NegatingTheMinimum",
     "kernel k<BM = 4>(x: f32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    v = -BM\n"
     "  }\n"
     "}\n",
     "e.tile:3:9: integer overflow: -(-9223372036854775808) does not fit i64",
     {{"BM", "-9223372036854775808"}}},
    {"DivisionByZero",
     "kernel k(x: f32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    v = b / 0\n"
     "  }\n"
     "}\n",
     "e.tile:3:11: division by zero in 'b / 0'"},
    {"ModuloByZeroParameter",
     "kernel k<D = 2>(x: f32[N]) {\n"
     "  grid (N) as (b) {\n"
     "    v = b % D\n"
     "  }\n"
     "}\n",
     "e.tile:3:11: division by zero in 'b % 0'",
     {{"D", "0"}}},
    {"CdivByZero",
     "kernel k(x: f32[N]) {\n"
     "  grid (cdiv(N, 0)) as (b) { }\n"
     "}\n",
     "e.tile:2:9: division by zero in 'cdiv(N, 0)'"},
    {"CdivByNegative",
     "kernel k(x: f32[N]) {\n"
     "  grid (cdiv(N, -4)) as (b) { }\n"
     "}\n",
     "e.tile:2:9: cdiv needs a positive divisor, got -4 in 'cdiv(N, -4)'"},
    {"TileElementCountOverflows",
     "kernel k(x: f32[N]) {\n"
     "  grid (1) as (b) {\n"
     "    t = shared<f32>[4294967296, 4294967296]\n"
     "  }\n"
     "}\n",
     "e.tile:3:5: tile 't' [4294967296, 4294967296] has more than 2147483647 elements"},
    {"ParallelIterationsOverflow",
     "kernel k(x: f32[N]) {\n"
     "  grid (1) as (b) {\n"
     "    parallel (i, j) in [4294967296, 4294967296] { }\n"
     "  }\n"
     "}\n",
     "e.tile:3:5: parallel loop over [4294967296, 4294967296] has more than 2147483647 iterations"},
    {"TooManyStages",
     "kernel k<S = 2>(x: f32[N]) {\n"
     "  grid (1) as (b) {\n"
     "    for t in pipelined(4, stages=S) { }\n"
     "  }\n"
     "}\n",
     "e.tile:3:5: stages is 1000000; at most 32 are supported",
     {{"S", "1000000"}}},
    {"TooManyStagesOnAGpu",
     "kernel k<S = 2>(A: f32[M, K]) {\n"
     "  grid (1) as (b) {\n"
     "    As = shared<f32>[4, 4]\n"
     "    for t in pipelined(4, stages=S) { copy(A[0, t * 4], As) }\n"
     "  }\n"
     "}\n",
     "e.tile:4:5: stages is 1000000; at most 32 are supported",
     {{"S", "1000000"}},
     Target::cuda()},
};

// Sources too deep or too long for the recursive passes: each is refused with the location of the
// first construct past the limit, instead of overflowing the stack.
std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i)
    out += s;
  return out;
}

TEST(TileErrors, DeepNestingAndLongExpressionsGetLocatedErrors) {
  const std::string head = "kernel k(x: f32[N]) {\n  grid (N) as (b) {\n";
  const std::string tail = "\n  }\n}\n";
  // 10,700 parentheses: with the grid and the statement, the 99th (column 9 + 98) is level 101.
  EXPECT_EQ(
      first_error(
          {"", (head + "    v = " + repeat("(", 10700) + "1" + repeat(")", 10700) + tail).c_str(),
           ""}),
      "e.tile:3:107: nested more than 100 levels deep; split the expression or the block");
  // 4,850 nested ifs, one per line from line 3: the condition of the 99th is level 101.
  std::string ifs = head;
  for (int i = 0; i < 4850; ++i)
    ifs += "    if b > 0 {\n";
  ifs += repeat("}", 4850) + tail;
  EXPECT_EQ(first_error({"", ifs.c_str(), ""}),
            "e.tile:101:8: nested more than 100 levels deep; split the expression or the block");
  // else-if chains nest too.
  std::string chain = head + "    if b > 0 { }" + repeat(" else if b > 0 { }", 5000) + tail;
  EXPECT_EQ(first_error({"", chain.c_str(), ""}).rfind("e.tile:3:", 0), 0u);
  // A flat sum of 18,400 terms: the 1001st '+' (" + 1" each, after "v = 1") is refused.
  std::string sum = head + "    v = 1" + repeat(" + 1", 18400) + tail;
  EXPECT_EQ(
      first_error({"", sum.c_str(), ""}),
      fmt::format(
          "e.tile:3:{}: more than 1000 operators in one statement; split it with named values",
          10 + 4 * 1000 + 1));
  // Unary minus chains nest like parentheses.
  std::string minus = head + "    v = " + repeat("-", 20000) + "1" + tail;
  EXPECT_EQ(first_error({"", minus.c_str(), ""}).rfind("e.tile:3:", 0), 0u);
}

// Just inside the limits (90 parentheses, 901 operators) a kernel still compiles.
TEST(TileErrors, NestingUpToTheLimitStillCompiles) {
  const std::string head =
      "kernel k(x: f32[N]) {\n  grid (N) as (b) {\n    parallel (i) in [1] {\n";
  const std::string tail = "\n    }\n  }\n}\n";
  std::string src = head + "      x[b] = f32(" + repeat("(", 90) + "b" + repeat(")", 90) + " + " +
                    "1" + repeat(" + 1", 900) + ")" + tail;
  EXPECT_EQ(first_error({"", src.c_str(), ""}), "");
}

class TileErrors : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(TileErrors, ReportsLocationAndMessage) {
  EXPECT_EQ(first_error(GetParam()), GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(All, TileErrors, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(TileErrors, ThereAreAtLeastTwentyCases) {
  EXPECT_GE(std::size(kCases), 20u);
}

// Random edits of the real kernels (insert, delete or replace text with pieces of the language):
// each result either compiles for every target, or fails with a user error that starts with
// "m.tile:LINE:COL: ". Never an internal error, never an abort.
TEST(TileErrors, MutatedKernelsGetLocatedErrorsNeverCrashes) {
  const char* dir = std::getenv("TESSEL_SOURCE_DIR");
  std::vector<std::string> sources;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(dir ? dir : ".") + "/kernels")) {
    std::ifstream f(e.path());
    std::stringstream ss;
    ss << f.rdbuf();
    sources.push_back(ss.str());
  }
  ASSERT_FALSE(sources.empty());
  const char* pieces[] = {"(",
                          ")",
                          "[",
                          "]",
                          "{",
                          "}",
                          ",",
                          "=",
                          "+",
                          "-",
                          "*",
                          "/",
                          "<",
                          ">",
                          ".T",
                          "0",
                          "-1",
                          "0.5",
                          "inf",
                          "i",
                          "k",
                          "M",
                          "BM",
                          "acc",
                          "As",
                          "T",
                          "f32",
                          "bf16",
                          "i32",
                          "copy",
                          "gemm",
                          "fill",
                          "reduce",
                          "parallel",
                          "for",
                          "if",
                          "else",
                          "grid",
                          "shared",
                          "fragment",
                          "select",
                          "exp",
                          "axis=",
                          "pad=",
                          " ",
                          "\n",
                          "on gpu <BM = 0>",
                          "_x"};
  std::mt19937 rng(2024);
  int compiled = 0, located = 0;
  for (int it = 0; it < 400; ++it) {
    std::string s = sources[rng() % sources.size()];
    for (int e = 0, edits = 1 + rng() % 2; e < edits; ++e) {
      size_t pos = rng() % (s.size() + 1);
      std::string piece = pieces[rng() % std::size(pieces)];
      switch (rng() % 3) {
        case 0:
          s.insert(pos, piece);
          break;
        case 1:
          s.erase(pos, 1 + rng() % 6);
          break;
        default:
          s.replace(pos, 1 + rng() % 4, piece);
      }
    }
    auto expect_located = [&](const Status& st) {
      ++located;
      EXPECT_EQ(st.message().rfind("m.tile:", 0), 0u) << st.to_string() << "\n--- source:\n" << s;
      EXPECT_NE(st.code(), Code::kInternal) << st.to_string() << "\n--- source:\n" << s;
    };
    auto kernels = parse_tile(s, "m.tile");
    if (!kernels.ok()) {
      expect_located(kernels.status());
      continue;
    }
    for (const Kernel& k : *kernels)
      for (const Target& t : {Target::cpu(), Target::opencl(), Target::cuda()}) {
        CompileOptions o;
        o.target = t;
        auto ir = compile_ir(k, o);
        if (!ir.ok()) {
          expect_located(ir.status());
          continue;
        }
        ++compiled;
        std::string code = t.kind == TargetKind::kCpu      ? render_cpu(*ir)
                           : t.kind == TargetKind::kOpenCL ? render_opencl(*ir, t)
                                                           : render_cuda(*ir, t);
        EXPECT_FALSE(code.empty());
      }
  }
  EXPECT_GT(compiled, 50);  // the mutations leave many kernels valid ...
  EXPECT_GT(located, 200);  // ... and break many others
}

}  // namespace
}  // namespace tessel::tile
