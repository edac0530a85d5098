// The tile IR: every node kind of the tile language, listed once (TESSEL_TILE_*_KINDS), as plain
// immutable structs made by make() functions that check their invariants. Broken invariants are
// bugs (TESSEL_CHECK): user mistakes are caught before make() by the parser's semantic checks
// (parse/sema.h) and by the passes, which report them with the kernel's file:line:col.
//
// Legend: an Expr is a scalar value (an index, an element); a Stmt is an action. Tiles live in
// Buffers with a memory Scope: global (a kernel argument), shared (a block's staging memory) or
// fragment (a block's accumulators). Tile operations (Copy, Gemm, Fill, Reduce) name whole tiles;
// element code (Parallel loops with Load/Store) names single elements.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/status.h"
#include "tile/ir/dtype.h"

namespace tessel::tile {

// Where a node came from: "gemm.tile:12:5". `file` is shared by every node of one source.
struct SourceLoc {
  std::shared_ptr<const std::string> file;
  int line = 0;
  int col = 0;
  std::string to_string() const;
};

// A user error at a place in a kernel: "gemm.tile:12:5: unknown name 'Ac'".
template <typename... Args>
Status error_at(const SourceLoc& loc, fmt::format_string<Args...> f, Args&&... args) {
  return invalid_argument("{}: {}", loc.to_string(), fmt::format(f, std::forward<Args>(args)...));
}

#define TESSEL_TILE_EXPR_KINDS(X) \
  X(IntImm) X(FloatImm) X(Var) X(Binary) X(Unary) X(Call) X(Cast) X(Select) X(Load)
// (clang-format reflows this list differently on every pass)
// clang-format off
#define TESSEL_TILE_STMT_KINDS(X)                                                             \
  X(Seq)                                                                                      \
  X(Grid)                                                                                     \
  X(Alloc) X(Let) X(For) X(Parallel) X(IfThenElse) X(Store) X(Copy) X(Gemm) X(Fill) X(Reduce) \
      X(Barrier)
// clang-format on

enum class NodeKind {
#define TESSEL_TILE_KIND_ENUM(name) k##name,
  TESSEL_TILE_EXPR_KINDS(TESSEL_TILE_KIND_ENUM) TESSEL_TILE_STMT_KINDS(TESSEL_TILE_KIND_ENUM)
#undef TESSEL_TILE_KIND_ENUM
};
const char* node_kind_name(NodeKind kind);

struct Node {
  explicit Node(NodeKind k, SourceLoc l) : kind(k), loc(std::move(l)) {}
  virtual ~Node() = default;
  const NodeKind kind;
  const SourceLoc loc;
  // The node as its concrete type, or nullptr: if (auto* v = e->as<Var>()) ...
  template <typename T>
  const T* as() const {
    return kind == T::kKind ? static_cast<const T*>(this) : nullptr;
  }
};

struct ExprNode : Node {
  ExprNode(NodeKind k, DType t, SourceLoc l) : Node(k, std::move(l)), type(std::move(t)) {}
  const DType type;
};
using Expr = std::shared_ptr<const ExprNode>;

struct StmtNode : Node {
  using Node::Node;
};
using Stmt = std::shared_ptr<const StmtNode>;

// ----- buffers ----------------------------------------------------------------------------------

enum class Scope { kGlobal, kShared, kFragment };
const char* scope_name(Scope scope);

// How a tile is laid out in memory. Row-major until plan_layouts (passes/plan_layouts.h) picks a
// target-specific layout: the CPU packs gemm operands for its micro-kernels; GPUs keep fragments
// that each thread owns in registers.
enum class Layout { kRowMajor, kPackedA, kPackedB, kRegisters };
const char* layout_name(Layout layout);

struct BufferNode {
  std::string name;
  DType dtype;
  Scope scope;
  std::vector<Expr>
      shape;  // global: run-time sizes; shared/fragment: compile-time after specialise
  Layout layout = Layout::kRowMajor;
  // For kPackedA/kPackedB: the gemm reads this tile transposed, so packing swaps its axes.
  bool packed_transposed = false;
  // For packed tiles (schedule_cpu_gemm): packed at the size of the part inside the tensor rather
  // than padded to the whole tile, and multiplied at that size.
  bool edge_packed = false;
  // Non-empty: the tile's contents depend only on these block and loop indices, so it is packed
  // once per launch into a table shared by every block (schedule_cpu_gemm).
  std::vector<std::string> memo_key;
  SourceLoc loc;

  int rank() const { return static_cast<int>(shape.size()); }
  // Element count of a tile whose shape is constant; TESSEL_CHECKs that it is.
  int64_t const_elements() const;
  int64_t const_dim(int d) const;
};
using Buffer = std::shared_ptr<const BufferNode>;
Buffer make_buffer(std::string name, DType dtype, Scope scope, std::vector<Expr> shape,
                   SourceLoc loc);

// A tile operand of Copy/Gemm: a whole shared/fragment tile, or the region of a global tensor
// that starts at `origin` (one index per dimension). `transposed` swaps the last two axes.
struct TileRef {
  Buffer buffer;
  std::vector<Expr> origin;
  bool transposed = false;
  SourceLoc loc;
  bool is_global() const { return buffer->scope == Scope::kGlobal; }
};

// ----- expressions ------------------------------------------------------------------------------

struct IntImm : ExprNode {
  static constexpr NodeKind kKind = NodeKind::kIntImm;
  int64_t value;
  static Expr make(int64_t value, DType type = kI64, SourceLoc loc = {});
  IntImm(int64_t v, DType t, SourceLoc l) : ExprNode(kKind, std::move(t), std::move(l)), value(v) {}
};

struct FloatImm : ExprNode {
  static constexpr NodeKind kKind = NodeKind::kFloatImm;
  double value;
  static Expr make(double value, DType type = kF32, SourceLoc loc = {});
  FloatImm(double v, DType t, SourceLoc l)
      : ExprNode(kKind, std::move(t), std::move(l)), value(v) {}
};

enum class VarKind {
  kSize,    // a run-time size of a global tensor (M, N, K)
  kScalar,  // a run-time scalar argument (alpha)
  kParam,   // a compile-time parameter (BM); gone after specialisation
  kBlock,   // a block index of the grid (bx)
  kLoop,    // a for or parallel loop variable
  kLet,     // a named scalar value (v = ...)
};

struct Var : ExprNode {
  static constexpr NodeKind kKind = NodeKind::kVar;
  std::string name;
  VarKind var_kind;
  static Expr make(std::string name, DType type, VarKind kind, SourceLoc loc = {});
  Var(std::string n, DType t, VarKind k, SourceLoc l)
      : ExprNode(kKind, std::move(t), std::move(l)), name(std::move(n)), var_kind(k) {}
};

enum class BinaryOp {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMod,
  kMin,
  kMax,
  kCDiv,
  kLt,
  kLe,
  kGt,
  kGe,
  kEq,
  kNe,
  kAnd,
  kOr
};
const char* binary_op_name(BinaryOp op);  // "+", "min", "cdiv", ...
bool is_comparison(BinaryOp op);
bool is_function_style(BinaryOp op);  // min, max, cdiv print as calls

struct Binary : ExprNode {
  static constexpr NodeKind kKind = NodeKind::kBinary;
  BinaryOp op;
  Expr a, b;
  static Expr make(BinaryOp op, Expr a, Expr b, SourceLoc loc = {});
  Binary(BinaryOp o, Expr x, Expr y, DType t, SourceLoc l)
      : ExprNode(kKind, std::move(t), std::move(l)), op(o), a(std::move(x)), b(std::move(y)) {}
};

enum class UnaryOp { kNeg, kNot };

struct Unary : ExprNode {
  static constexpr NodeKind kKind = NodeKind::kUnary;
  UnaryOp op;
  Expr a;
  static Expr make(UnaryOp op, Expr a, SourceLoc loc = {});
  Unary(UnaryOp o, Expr x, DType t, SourceLoc l)
      : ExprNode(kKind, std::move(t), std::move(l)), op(o), a(std::move(x)) {}
};

// Scalar math on floats. Every code generator spells each of them (codegen/c_renderer.h).
// (clang-format reflows this list differently on every pass)
// clang-format off
#define TESSEL_TILE_MATH_FNS(X)                                                             \
  X(kExp, "exp", 1)                                                                         \
  X(kLog, "log", 1)                                                                         \
  X(kTanh, "tanh", 1) X(kErf, "erf", 1) X(kSqrt, "sqrt", 1) X(kRsqrt, "rsqrt", 1)           \
      X(kAbs, "abs", 1) X(kFloor, "floor", 1) X(kCeil, "ceil", 1) X(kSigmoid, "sigmoid", 1) \
          X(kRelu, "relu", 1) X(kGelu, "gelu", 1) X(kPow, "pow", 2) X(kFmod, "fmod", 2)
// clang-format on

enum class MathFn {
#define TESSEL_TILE_MATH_ENUM(e, name, arity) e,
  TESSEL_TILE_MATH_FNS(TESSEL_TILE_MATH_ENUM)
#undef TESSEL_TILE_MATH_ENUM
};
const char* math_fn_name(MathFn fn);
int math_fn_arity(MathFn fn);
bool math_fn_from_name(std::string_view name, MathFn* fn);

struct Call : ExprNode {
  static constexpr NodeKind kKind = NodeKind::kCall;
  MathFn fn;
  std::vector<Expr> args;
  static Expr make(MathFn fn, std::vector<Expr> args, SourceLoc loc = {});
  Call(MathFn f, std::vector<Expr> a, DType t, SourceLoc l)
      : ExprNode(kKind, std::move(t), std::move(l)), fn(f), args(std::move(a)) {}
};

struct Cast : ExprNode {
  static constexpr NodeKind kKind = NodeKind::kCast;
  Expr a;
  static Expr make(DType type, Expr a, SourceLoc loc = {});
  Cast(DType t, Expr x, SourceLoc l)
      : ExprNode(kKind, std::move(t), std::move(l)), a(std::move(x)) {}
};

struct Select : ExprNode {
  static constexpr NodeKind kKind = NodeKind::kSelect;
  Expr cond, t, f;
  static Expr make(Expr cond, Expr t, Expr f, SourceLoc loc = {});
  Select(Expr c, Expr x, Expr y, DType ty, SourceLoc l)
      : ExprNode(kKind, std::move(ty), std::move(l)),
        cond(std::move(c)),
        t(std::move(x)),
        f(std::move(y)) {}
};

// An element of a buffer. With a predicate (set by infer_bounds for global tensors), an element
// whose predicate is false is not read and the value is `other`.
struct Load : ExprNode {
  static constexpr NodeKind kKind = NodeKind::kLoad;
  Buffer buffer;
  std::vector<Expr> indices;
  Expr predicate;  // may be null
  Expr other;      // null when predicate is null
  static Expr make(Buffer buffer, std::vector<Expr> indices, SourceLoc loc = {},
                   Expr predicate = nullptr, Expr other = nullptr);
  Load(Buffer b, std::vector<Expr> i, Expr p, Expr o, SourceLoc l)
      : ExprNode(kKind, b->dtype, std::move(l)),
        buffer(std::move(b)),
        indices(std::move(i)),
        predicate(std::move(p)),
        other(std::move(o)) {}
};

// ----- statements -------------------------------------------------------------------------------

struct Seq : StmtNode {
  static constexpr NodeKind kKind = NodeKind::kSeq;
  std::vector<Stmt> stmts;
  static Stmt make(std::vector<Stmt> stmts, SourceLoc loc = {});
  Seq(std::vector<Stmt> s, SourceLoc l) : StmtNode(kKind, std::move(l)), stmts(std::move(s)) {}
};

// The grid of blocks: `grid (cdiv(N, BN), cdiv(M, BM)) as (bx, by) { body }`. 1 to 3 dims; the
// first varies fastest.
struct Grid : StmtNode {
  static constexpr NodeKind kKind = NodeKind::kGrid;
  std::vector<Expr> extents;
  std::vector<Expr> vars;  // Var, kBlock
  Stmt body;
  // `threads (R, C)` (GPU): a block's threads as R rows by C columns, compile-time integers; a 2-D
  // parallel loop is then split so that thread (r, c) owns rows r + R*a and C's share of the
  // columns (passes/place_fragments.h). Empty: the target's count, in one row. CPUs ignore it.
  std::vector<Expr> threads;
  static Stmt make(std::vector<Expr> extents, std::vector<Expr> vars, Stmt body, SourceLoc loc = {},
                   std::vector<Expr> threads = {});
  Grid(std::vector<Expr> e, std::vector<Expr> v, Stmt b, SourceLoc l, std::vector<Expr> t)
      : StmtNode(kKind, std::move(l)),
        extents(std::move(e)),
        vars(std::move(v)),
        body(std::move(b)),
        threads(std::move(t)) {}
};

// A shared or fragment tile, live from here to the end of the enclosing Seq.
struct Alloc : StmtNode {
  static constexpr NodeKind kKind = NodeKind::kAlloc;
  Buffer buffer;
  static Stmt make(Buffer buffer, SourceLoc loc = {});
  Alloc(Buffer b, SourceLoc l) : StmtNode(kKind, std::move(l)), buffer(std::move(b)) {}
};

// A named scalar, visible from here to the end of the enclosing Seq.
struct Let : StmtNode {
  static constexpr NodeKind kKind = NodeKind::kLet;
  Expr var;  // Var, kLet
  Expr value;
  static Stmt make(Expr var, Expr value, SourceLoc loc = {});
  Let(Expr v, Expr x, SourceLoc l)
      : StmtNode(kKind, std::move(l)), var(std::move(v)), value(std::move(x)) {}
};

enum class ForKind { kSerial, kPipelined };

// `for k in range(n)` or `for k in pipelined(n, stages=S)`: k = 0 .. extent-1 in order. A
// pipelined loop may overlap the copies of iteration k+1 with the compute of iteration k and
// keeps `stages` copies of the shared tiles it fills.
struct For : StmtNode {
  static constexpr NodeKind kKind = NodeKind::kFor;
  Expr var;  // Var, kLoop
  Expr extent;
  ForKind for_kind;
  Expr stages;  // pipelined only
  Stmt body;
  static Stmt make(Expr var, Expr extent, ForKind kind, Expr stages, Stmt body, SourceLoc loc = {});
  For(Expr v, Expr e, ForKind k, Expr s, Stmt b, SourceLoc l)
      : StmtNode(kKind, std::move(l)),
        var(std::move(v)),
        extent(std::move(e)),
        for_kind(k),
        stages(std::move(s)),
        body(std::move(b)) {}
};

// Element loop: every point of [extents] once, in any order and in parallel. `limits`, when
// set by infer_bounds, are run-time upper bounds (<= extents) past which no iteration does
// anything, so code generators may stop there.
struct Parallel : StmtNode {
  static constexpr NodeKind kKind = NodeKind::kParallel;
  std::vector<Expr> vars;  // Var, kLoop
  std::vector<Expr> extents;
  Stmt body;
  std::vector<Expr> limits;  // empty, or one per dimension
  static Stmt make(std::vector<Expr> vars, std::vector<Expr> extents, Stmt body, SourceLoc loc = {},
                   std::vector<Expr> limits = {});
  Parallel(std::vector<Expr> v, std::vector<Expr> e, Stmt b, std::vector<Expr> lim, SourceLoc l)
      : StmtNode(kKind, std::move(l)),
        vars(std::move(v)),
        extents(std::move(e)),
        body(std::move(b)),
        limits(std::move(lim)) {}
};

struct IfThenElse : StmtNode {
  static constexpr NodeKind kKind = NodeKind::kIfThenElse;
  Expr cond;
  Stmt then_case;
  Stmt else_case;  // may be null
  static Stmt make(Expr cond, Stmt then_case, Stmt else_case, SourceLoc loc = {});
  IfThenElse(Expr c, Stmt t, Stmt e, SourceLoc l)
      : StmtNode(kKind, std::move(l)),
        cond(std::move(c)),
        then_case(std::move(t)),
        else_case(std::move(e)) {}
};

// buffer[indices] = value (converted to the buffer's dtype). With a predicate, only where it holds.
struct Store : StmtNode {
  static constexpr NodeKind kKind = NodeKind::kStore;
  Buffer buffer;
  std::vector<Expr> indices;
  Expr value;
  Expr predicate;  // may be null
  static Stmt make(Buffer buffer, std::vector<Expr> indices, Expr value, SourceLoc loc = {},
                   Expr predicate = nullptr);
  Store(Buffer b, std::vector<Expr> i, Expr v, Expr p, SourceLoc l)
      : StmtNode(kKind, std::move(l)),
        buffer(std::move(b)),
        indices(std::move(i)),
        value(std::move(v)),
        predicate(std::move(p)) {}
};

// copy(src, dst): a tile's worth of elements, converted to dst's dtype. Elements of a global
// region that lie outside the tensor read as `pad` (0 when null) and are never written.
struct Copy : StmtNode {
  static constexpr NodeKind kKind = NodeKind::kCopy;
  TileRef src, dst;
  Expr pad;  // may be null
  static Stmt make(TileRef src, TileRef dst, Expr pad, SourceLoc loc = {});
  Copy(TileRef s, TileRef d, Expr p, SourceLoc l)
      : StmtNode(kKind, std::move(l)), src(std::move(s)), dst(std::move(d)), pad(std::move(p)) {}
};

// gemm(a, b, c): c += a @ b, with c an f32 fragment; a and b shared or fragment tiles.
struct Gemm : StmtNode {
  static constexpr NodeKind kKind = NodeKind::kGemm;
  TileRef a, b, c;
  static Stmt make(TileRef a, TileRef b, TileRef c, SourceLoc loc = {});
  Gemm(TileRef x, TileRef y, TileRef z, SourceLoc l)
      : StmtNode(kKind, std::move(l)), a(std::move(x)), b(std::move(y)), c(std::move(z)) {}
};

// fill(dst, value); clear(dst) is fill(dst, 0).
struct Fill : StmtNode {
  static constexpr NodeKind kKind = NodeKind::kFill;
  Buffer dst;
  Expr value;
  static Stmt make(Buffer dst, Expr value, SourceLoc loc = {});
  Fill(Buffer d, Expr v, SourceLoc l)
      : StmtNode(kKind, std::move(l)), dst(std::move(d)), value(std::move(v)) {}
};

enum class ReduceOp { kSum, kMax, kMin };
const char* reduce_op_name(ReduceOp op);

// reduce(src, dst, axis=a, op=o): dst = o(dst, o-reduction of src along axis a). Accumulates, so
// a reduction over many tiles is a loop of reduces; fill dst first. dst's shape is src's without
// the axis ([1] when that leaves none).
struct Reduce : StmtNode {
  static constexpr NodeKind kKind = NodeKind::kReduce;
  Buffer src, dst;
  int axis;
  ReduceOp op;
  static Stmt make(Buffer src, Buffer dst, int axis, ReduceOp op, SourceLoc loc = {});
  Reduce(Buffer s, Buffer d, int a, ReduceOp o, SourceLoc l)
      : StmtNode(kKind, std::move(l)), src(std::move(s)), dst(std::move(d)), axis(a), op(o) {}
};

// Every thread of a block waits here until all have arrived (GPU targets; inserted by passes).
struct Barrier : StmtNode {
  static constexpr NodeKind kKind = NodeKind::kBarrier;
  static Stmt make(SourceLoc loc = {});
  explicit Barrier(SourceLoc l) : StmtNode(kKind, std::move(l)) {}
};

// ----- kernels ----------------------------------------------------------------------------------

// A compile-time parameter: `BM = 128` or `T: dtype = f32`.
struct Param {
  std::string name;
  bool is_dtype = false;
  int64_t int_value = 0;  // the default, or the value after specialisation
  DType dtype_value;
  SourceLoc loc;
};

// A run-time argument: a global tensor or a scalar.
struct KernelArg {
  std::string name;
  Buffer tensor;  // scope kGlobal, or null for a scalar
  Expr scalar;    // Var kScalar, or null for a tensor
  SourceLoc loc;
  bool is_tensor() const { return tensor != nullptr; }
};

// Parameter defaults for one kind of target: `on gpu <BM = 64, BK = 16>` after the arguments.
// `target` is "cpu", "gpu" (OpenCL and CUDA), "opencl" or "cuda"; the most specific one that
// matches wins, and -D overrides win over all of them.
struct TargetDefaults {
  std::string target;
  std::vector<std::pair<std::string, std::string>> values;  // parameter -> value as written
  SourceLoc loc;
};

struct Kernel {
  std::string name;
  std::vector<Param> params;
  std::vector<TargetDefaults> target_defaults;
  std::vector<KernelArg> args;
  std::vector<Expr> sizes;  // Vars of kind kSize, in order of first appearance
  Stmt body;                // a Grid after parsing
  SourceLoc loc;
  bool specialized = false;

  const Param* find_param(std::string_view name) const;
  const Grid* grid() const;  // the grid statement; TESSEL_CHECKs that the body is one
};

// Helpers for passes and code generators.
std::optional<int64_t> const_int(const Expr& e);  // the value of an IntImm, else nullopt
bool is_const_int(const Expr& e, int64_t value);
Expr make_int(int64_t value);

}  // namespace tessel::tile
