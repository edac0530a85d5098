// make() functions of the tile IR: each checks the invariants a well-formed node keeps. They
// guard against bugs in the parser and passes; user errors never reach them.
#include "tile/ir/ir.h"

#include <algorithm>

namespace tessel::tile {

std::string SourceLoc::to_string() const {
  return fmt::format("{}:{}:{}", file ? *file : std::string("<builder>"), line, col);
}

const char* node_kind_name(NodeKind kind) {
  switch (kind) {
#define TESSEL_TILE_KIND_NAME(name) \
  case NodeKind::k##name:           \
    return #name;
    TESSEL_TILE_EXPR_KINDS(TESSEL_TILE_KIND_NAME)
    TESSEL_TILE_STMT_KINDS(TESSEL_TILE_KIND_NAME)
#undef TESSEL_TILE_KIND_NAME
  }
  return "?";
}

const char* scope_name(Scope scope) {
  switch (scope) {
    case Scope::kGlobal:
      return "global";
    case Scope::kShared:
      return "shared";
    case Scope::kFragment:
      return "fragment";
  }
  return "?";
}

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::kRowMajor:
      return "row_major";
    case Layout::kPackedA:
      return "packed_a";
    case Layout::kPackedB:
      return "packed_b";
    case Layout::kRegisters:
      return "registers";
  }
  return "?";
}

int64_t BufferNode::const_elements() const {
  int64_t n = 1;
  for (int d = 0; d < rank(); ++d)
    n *= const_dim(d);
  return n;
}

int64_t BufferNode::const_dim(int d) const {
  auto v = const_int(shape.at(d));
  TESSEL_CHECK(v.has_value(), "dimension {} of tile '{}' is not a constant", d, name);
  return *v;
}

Buffer make_buffer(std::string name, DType dtype, Scope scope, std::vector<Expr> shape,
                   SourceLoc loc) {
  TESSEL_CHECK(!name.empty());
  for (const Expr& e : shape)
    TESSEL_CHECK(e && e->type.is_int(), "buffer '{}': bad dimension", name);
  auto b = std::make_shared<BufferNode>();
  b->name = std::move(name);
  b->dtype = std::move(dtype);
  b->scope = scope;
  b->shape = std::move(shape);
  b->loc = std::move(loc);
  return b;
}

// ----- expressions ------------------------------------------------------------------------------

Expr IntImm::make(int64_t value, DType type, SourceLoc loc) {
  TESSEL_CHECK(type.is_int() || type.is_bool(), "IntImm of type {}", type.name());
  return std::make_shared<IntImm>(value, std::move(type), std::move(loc));
}

Expr FloatImm::make(double value, DType type, SourceLoc loc) {
  TESSEL_CHECK(type.is_float(), "FloatImm of type {}", type.name());
  return std::make_shared<FloatImm>(value, std::move(type), std::move(loc));
}

Expr Var::make(std::string name, DType type, VarKind kind, SourceLoc loc) {
  TESSEL_CHECK(!name.empty());
  if (kind == VarKind::kSize || kind == VarKind::kBlock || kind == VarKind::kLoop)
    TESSEL_CHECK(type.is_int(), "index variable '{}' of type {}", name, type.name());
  return std::make_shared<Var>(std::move(name), std::move(type), kind, std::move(loc));
}

namespace {
struct BinaryInfo {
  const char* name;
  bool comparison;
  bool function_style;
};
BinaryInfo binary_info(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return {"+", false, false};
    case BinaryOp::kSub:
      return {"-", false, false};
    case BinaryOp::kMul:
      return {"*", false, false};
    case BinaryOp::kDiv:
      return {"/", false, false};
    case BinaryOp::kMod:
      return {"%", false, false};
    case BinaryOp::kMin:
      return {"min", false, true};
    case BinaryOp::kMax:
      return {"max", false, true};
    case BinaryOp::kCDiv:
      return {"cdiv", false, true};
    case BinaryOp::kLt:
      return {"<", true, false};
    case BinaryOp::kLe:
      return {"<=", true, false};
    case BinaryOp::kGt:
      return {">", true, false};
    case BinaryOp::kGe:
      return {">=", true, false};
    case BinaryOp::kEq:
      return {"==", true, false};
    case BinaryOp::kNe:
      return {"!=", true, false};
    case BinaryOp::kAnd:
      return {"&&", false, false};
    case BinaryOp::kOr:
      return {"||", false, false};
  }
  return {"?", false, false};
}
}  // namespace

const char* binary_op_name(BinaryOp op) {
  return binary_info(op).name;
}
bool is_comparison(BinaryOp op) {
  return binary_info(op).comparison;
}
bool is_function_style(BinaryOp op) {
  return binary_info(op).function_style;
}

Expr Binary::make(BinaryOp op, Expr a, Expr b, SourceLoc loc) {
  TESSEL_CHECK(a && b);
  TESSEL_CHECK(a->type == b->type, "'{}' on {} and {}", binary_op_name(op), a->type.name(),
               b->type.name());
  DType type = a->type;
  if (op == BinaryOp::kAnd || op == BinaryOp::kOr) {
    TESSEL_CHECK(type.is_bool(), "'{}' on {}", binary_op_name(op), type.name());
  } else if (is_comparison(op)) {
    type = kBool;
  } else {
    TESSEL_CHECK(!type.is_bool(), "'{}' on bool", binary_op_name(op));
    if (op == BinaryOp::kMod || op == BinaryOp::kCDiv)
      TESSEL_CHECK(type.is_int(), "'{}' on {}", binary_op_name(op), type.name());
  }
  return std::make_shared<Binary>(op, std::move(a), std::move(b), std::move(type), std::move(loc));
}

Expr Unary::make(UnaryOp op, Expr a, SourceLoc loc) {
  TESSEL_CHECK(a);
  if (op == UnaryOp::kNot) TESSEL_CHECK(a->type.is_bool());
  if (op == UnaryOp::kNeg) TESSEL_CHECK(!a->type.is_bool());
  DType type = a->type;
  return std::make_shared<Unary>(op, std::move(a), std::move(type), std::move(loc));
}

namespace {
struct MathInfo {
  MathFn fn;
  const char* name;
  int arity;
};
constexpr MathInfo kMathFns[] = {
#define TESSEL_TILE_MATH_INFO(e, name, arity) {MathFn::e, name, arity},
    TESSEL_TILE_MATH_FNS(TESSEL_TILE_MATH_INFO)
#undef TESSEL_TILE_MATH_INFO
};
}  // namespace

const char* math_fn_name(MathFn fn) {
  return kMathFns[static_cast<int>(fn)].name;
}
int math_fn_arity(MathFn fn) {
  return kMathFns[static_cast<int>(fn)].arity;
}
bool math_fn_from_name(std::string_view name, MathFn* fn) {
  for (const MathInfo& m : kMathFns)
    if (name == m.name) {
      *fn = m.fn;
      return true;
    }
  return false;
}

Expr Call::make(MathFn fn, std::vector<Expr> args, SourceLoc loc) {
  TESSEL_CHECK(static_cast<int>(args.size()) == math_fn_arity(fn), "{} with {} arguments",
               math_fn_name(fn), args.size());
  for (const Expr& a : args) {
    TESSEL_CHECK(a && a->type.is_float(), "{} of a non-float", math_fn_name(fn));
    TESSEL_CHECK(a->type == args[0]->type);
  }
  DType type = args[0]->type;
  return std::make_shared<Call>(fn, std::move(args), std::move(type), std::move(loc));
}

Expr Cast::make(DType type, Expr a, SourceLoc loc) {
  TESSEL_CHECK(a);
  return std::make_shared<Cast>(std::move(type), std::move(a), std::move(loc));
}

Expr Select::make(Expr cond, Expr t, Expr f, SourceLoc loc) {
  TESSEL_CHECK(cond && t && f);
  TESSEL_CHECK(cond->type.is_bool(), "select condition of type {}", cond->type.name());
  TESSEL_CHECK(t->type == f->type, "select of {} and {}", t->type.name(), f->type.name());
  DType type = t->type;
  return std::make_shared<Select>(std::move(cond), std::move(t), std::move(f), std::move(type),
                                  std::move(loc));
}

namespace {
void check_indices(const Buffer& buffer, const std::vector<Expr>& indices) {
  TESSEL_CHECK(buffer);
  TESSEL_CHECK(static_cast<int>(indices.size()) == buffer->rank(),
               "{} indices into '{}' of rank {}", indices.size(), buffer->name, buffer->rank());
  for (const Expr& i : indices)
    TESSEL_CHECK(i && i->type.is_int(), "non-integer index into '{}'", buffer->name);
}
}  // namespace

Expr Load::make(Buffer buffer, std::vector<Expr> indices, SourceLoc loc, Expr predicate,
                Expr other) {
  check_indices(buffer, indices);
  TESSEL_CHECK(!predicate || predicate->type.is_bool());
  TESSEL_CHECK(!predicate == !other, "a predicated load needs a value for masked elements");
  TESSEL_CHECK(!other || other->type == buffer->dtype);
  return std::make_shared<Load>(std::move(buffer), std::move(indices), std::move(predicate),
                                std::move(other), std::move(loc));
}

// ----- statements -------------------------------------------------------------------------------

Stmt Seq::make(std::vector<Stmt> stmts, SourceLoc loc) {
  for (const Stmt& s : stmts)
    TESSEL_CHECK(s);
  return std::make_shared<Seq>(std::move(stmts), std::move(loc));
}

Stmt Grid::make(std::vector<Expr> extents, std::vector<Expr> vars, Stmt body, SourceLoc loc,
                std::vector<Expr> threads) {
  TESSEL_CHECK(!extents.empty() && extents.size() <= 3 && extents.size() == vars.size());
  for (const Expr& v : vars)
    TESSEL_CHECK(v->as<Var>() && v->as<Var>()->var_kind == VarKind::kBlock);
  for (const Expr& e : extents)
    TESSEL_CHECK(e && e->type.is_int());
  TESSEL_CHECK(threads.size() <= 2);
  for (const Expr& e : threads)
    TESSEL_CHECK(e && e->type.is_int());
  TESSEL_CHECK(body);
  return std::make_shared<Grid>(std::move(extents), std::move(vars), std::move(body),
                                std::move(loc), std::move(threads));
}

Stmt Alloc::make(Buffer buffer, SourceLoc loc) {
  TESSEL_CHECK(buffer && buffer->scope != Scope::kGlobal);
  return std::make_shared<Alloc>(std::move(buffer), std::move(loc));
}

Stmt Let::make(Expr var, Expr value, SourceLoc loc) {
  TESSEL_CHECK(var && value && var->as<Var>());
  TESSEL_CHECK(var->type == value->type, "let {} of {} = {}", var->as<Var>()->name,
               var->type.name(), value->type.name());
  return std::make_shared<Let>(std::move(var), std::move(value), std::move(loc));
}

Stmt For::make(Expr var, Expr extent, ForKind kind, Expr stages, Stmt body, SourceLoc loc) {
  TESSEL_CHECK(var && var->as<Var>() && extent && extent->type.is_int() && body);
  TESSEL_CHECK((kind == ForKind::kPipelined) == (stages != nullptr));
  return std::make_shared<For>(std::move(var), std::move(extent), kind, std::move(stages),
                               std::move(body), std::move(loc));
}

Stmt Parallel::make(std::vector<Expr> vars, std::vector<Expr> extents, Stmt body, SourceLoc loc,
                    std::vector<Expr> limits) {
  TESSEL_CHECK(!vars.empty() && vars.size() == extents.size() && body);
  TESSEL_CHECK(limits.empty() || limits.size() == vars.size());
  for (const Expr& v : vars)
    TESSEL_CHECK(v->as<Var>());
  return std::make_shared<Parallel>(std::move(vars), std::move(extents), std::move(body),
                                    std::move(limits), std::move(loc));
}

Stmt IfThenElse::make(Expr cond, Stmt then_case, Stmt else_case, SourceLoc loc) {
  TESSEL_CHECK(cond && cond->type.is_bool() && then_case);
  return std::make_shared<IfThenElse>(std::move(cond), std::move(then_case), std::move(else_case),
                                      std::move(loc));
}

Stmt Store::make(Buffer buffer, std::vector<Expr> indices, Expr value, SourceLoc loc,
                 Expr predicate) {
  check_indices(buffer, indices);
  TESSEL_CHECK(value);
  TESSEL_CHECK(value->type == buffer->dtype, "store of {} into '{}' of {}", value->type.name(),
               buffer->name, buffer->dtype.name());
  TESSEL_CHECK(!predicate || predicate->type.is_bool());
  return std::make_shared<Store>(std::move(buffer), std::move(indices), std::move(value),
                                 std::move(predicate), std::move(loc));
}

namespace {
void check_tile_ref(const TileRef& t) {
  TESSEL_CHECK(t.buffer);
  if (t.is_global())
    TESSEL_CHECK(static_cast<int>(t.origin.size()) == t.buffer->rank());
  else
    TESSEL_CHECK(t.origin.empty());
}
}  // namespace

Stmt Copy::make(TileRef src, TileRef dst, Expr pad, SourceLoc loc) {
  check_tile_ref(src);
  check_tile_ref(dst);
  TESSEL_CHECK(!(src.is_global() && dst.is_global()), "copy between two global tensors");
  return std::make_shared<Copy>(std::move(src), std::move(dst), std::move(pad), std::move(loc));
}

Stmt Gemm::make(TileRef a, TileRef b, TileRef c, SourceLoc loc) {
  for (const TileRef* t : {&a, &b, &c}) {
    check_tile_ref(*t);
    TESSEL_CHECK(!t->is_global() && t->buffer->rank() == 2);
  }
  TESSEL_CHECK(a.buffer->dtype == b.buffer->dtype);
  TESSEL_CHECK(c.buffer->dtype == kF32 && !c.transposed);
  return std::make_shared<Gemm>(std::move(a), std::move(b), std::move(c), std::move(loc));
}

Stmt Fill::make(Buffer dst, Expr value, SourceLoc loc) {
  TESSEL_CHECK(dst && value && dst->scope != Scope::kGlobal);
  TESSEL_CHECK(value->type == dst->dtype);
  return std::make_shared<Fill>(std::move(dst), std::move(value), std::move(loc));
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

Stmt Reduce::make(Buffer src, Buffer dst, int axis, ReduceOp op, SourceLoc loc) {
  TESSEL_CHECK(src && dst && src->scope != Scope::kGlobal && dst->scope != Scope::kGlobal);
  TESSEL_CHECK(axis >= 0 && axis < src->rank());
  TESSEL_CHECK(dst->rank() == std::max(1, src->rank() - 1));
  return std::make_shared<Reduce>(std::move(src), std::move(dst), axis, op, std::move(loc));
}

Stmt Barrier::make(SourceLoc loc) {
  return std::make_shared<Barrier>(std::move(loc));
}

// ----- kernels ----------------------------------------------------------------------------------

const Param* Kernel::find_param(std::string_view n) const {
  for (const Param& p : params)
    if (p.name == n) return &p;
  return nullptr;
}

const Grid* Kernel::grid() const {
  const Grid* g = body ? body->as<Grid>() : nullptr;
  TESSEL_CHECK(g, "kernel '{}' has no grid", name);
  return g;
}

std::optional<int64_t> const_int(const Expr& e) {
  if (const IntImm* i = e ? e->as<IntImm>() : nullptr) return i->value;
  return std::nullopt;
}

bool is_const_int(const Expr& e, int64_t value) {
  auto v = const_int(e);
  return v && *v == value;
}

Expr make_int(int64_t value) {
  return IntImm::make(value, kI64);
}

}  // namespace tessel::tile
