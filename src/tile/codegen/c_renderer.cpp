// The C-family renderer base (see c_renderer.h).
#include "tile/codegen/c_renderer.h"

#include <cmath>

#include "tile/ir/printer.h"

namespace tessel::tile {

std::string CRenderer::ident(const std::string& name) const {
  return d_.reserved.count(name) ? name + "_" : name;
}

std::string CRenderer::value_type(const DType& t) const {
  TESSEL_CHECK(!t.is_param(), "dtype parameter {} reached code generation", t.name());
  switch (t.scalar()) {
    case ScalarType::kBool: return d_.bool_type;
    case ScalarType::kI8: return d_.i8;
    case ScalarType::kU8: return d_.u8;
    case ScalarType::kI16: return d_.i16;
    case ScalarType::kI32: return d_.i32;
    case ScalarType::kI64: return d_.i64;
    case ScalarType::kF16:
    case ScalarType::kBF16:
    case ScalarType::kF32: return d_.f32;
    case ScalarType::kF64: return d_.f64;
  }
  return "?";
}

std::string CRenderer::storage_type(const DType& t) const {
  if (t == kF16) return d_.f16_storage;
  if (t == kBF16) return d_.bf16_storage;
  return value_type(t);
}

std::string CRenderer::int_literal(int64_t v, const DType& type) const {
  bool wide = type == kI64 && d_.suffix_every_i64;
  if (v >= INT32_MIN && v <= INT32_MAX && !wide) return std::to_string(v);
  return std::to_string(v) + d_.i64_literal_suffix;
}

std::string CRenderer::float_literal(double v, const DType& t) const {
  bool f32 = t != DType(ScalarType::kF64);
  if (std::isinf(v)) return fmt::format("({}{})", v < 0 ? "-" : "", d_.infinity);
  if (std::isnan(v)) return fmt::format("({0} - {0})", d_.infinity);
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  if (f32) s += d_.f32_literal_suffix;
  return v < 0 ? "(" + s + ")" : s;
}

// ----- expressions ------------------------------------------------------------------------------

// Whether evaluating `e` can fault when the expression guarding it is false: an integer division
// or remainder (by zero). Loads cannot: each carries its own bounds predicate.
bool CRenderer::may_trap(const Expr& e) {
  if (const Binary* b = e->as<Binary>()) {
    bool divides = (b->op == BinaryOp::kDiv || b->op == BinaryOp::kMod || b->op == BinaryOp::kCDiv) &&
                   b->type.is_int();
    return divides || may_trap(b->a) || may_trap(b->b);
  }
  if (const Unary* u = e->as<Unary>()) return may_trap(u->a);
  if (const Select* s = e->as<Select>()) return may_trap(s->cond) || may_trap(s->t) || may_trap(s->f);
  if (const Cast* c = e->as<Cast>()) return may_trap(c->a);
  if (const Call* c = e->as<Call>()) {
    for (const Expr& a : c->args)
      if (may_trap(a)) return true;
    return false;
  }
  if (const Load* l = e->as<Load>()) {
    for (const Expr& i : l->indices)
      if (may_trap(i)) return true;
  }
  return false;
}

bool CRenderer::is_narrow_int(const DType& t) {
  return t.is_int() && !t.is_param() && t.bytes() < 4;
}

std::string CRenderer::cast(const std::string& value, const DType& from, const DType& to) {
  if (from == to) return value;
  if (to == kF16) return fmt::format("{}({})", d_.f16_round, cast(value, from, kF32));
  if (to == kBF16) return fmt::format("{}({})", d_.bf16_round, cast(value, from, kF32));
  if (from.is_half() && to == kF32) return value;
  return fmt::format("(({}){})", value_type(to), value);
}

std::string CRenderer::global_offset(const Buffer& b, const std::vector<Expr>& idx) {
  std::string off;
  for (size_t d = 0; d < idx.size(); ++d) {
    auto known = known_strides_.find(b->name);
    int64_t stride = known == known_strides_.end() ? -1 : known->second[d];
    if (stride == 1)
      off += fmt::format("{}{}", d ? " + " : "", expr(idx[d]));
    else if (stride > 1)
      off += fmt::format("{}{} * {}", d ? " + " : "", expr(idx[d]), stride);
    else
      off += fmt::format("{}{} * {}_stride{}", d ? " + " : "", expr(idx[d]), ident(b->name), d);
  }
  return off;
}

std::string CRenderer::element(const Buffer& b, const std::vector<Expr>& idx) {
  if (b->scope == Scope::kGlobal) return fmt::format("{}[{}]", ident(b->name), global_offset(b, idx));
  // Row-major tile: constant strides.
  std::string off;
  for (size_t d = 0; d < idx.size(); ++d) {
    int64_t stride = 1;
    for (size_t e = d + 1; e < idx.size(); ++e) stride *= b->const_dim(static_cast<int>(e));
    std::string term = stride == 1 ? expr(idx[d]) : fmt::format("{} * {}", expr(idx[d]), stride);
    off += (d ? " + " : "") + term;
  }
  return fmt::format("{}[{}]", ident(b->name), off);
}

std::string CRenderer::load_value(const Buffer& b, const std::string& lvalue) {
  if (b->dtype == kF16) return fmt::format("{}({})", d_.f16_load, lvalue);
  if (b->dtype == kBF16) return fmt::format("{}({})", d_.bf16_load, lvalue);
  return lvalue;
}

std::string CRenderer::store_value(const Buffer& b, const std::string& value) {
  if (b->dtype == kF16) return fmt::format("{}({})", d_.f16_store, value);
  if (b->dtype == kBF16) return fmt::format("{}({})", d_.bf16_store, value);
  return value;
}

std::string CRenderer::expr(const Expr& e) {
  switch (e->kind) {
    case NodeKind::kIntImm: {
      const IntImm* i = e->as<IntImm>();
      if (i->type.is_bool()) return i->value ? "true" : "false";
      return int_literal(i->value, i->type);
    }
    case NodeKind::kFloatImm: return float_literal(e->as<FloatImm>()->value, e->type);
    case NodeKind::kVar: return ident(e->as<Var>()->name);
    case NodeKind::kBinary: {
      const Binary* b = e->as<Binary>();
      std::string x = expr(b->a), y = expr(b->b);
      bool is_float = b->a->type.is_float();
      switch (b->op) {
        case BinaryOp::kMin: return fmt::format("{}({}, {})", is_float ? d_.float_min : d_.int_min, x, y);
        case BinaryOp::kMax: return fmt::format("{}({}, {})", is_float ? d_.float_max : d_.int_max, x, y);
        case BinaryOp::kCDiv: return fmt::format("(({} + {} - 1) / {})", x, y, y);
        default: break;
      }
      const char* op = binary_op_name(b->op);
      if (d_.eager_logic && (b->op == BinaryOp::kAnd || b->op == BinaryOp::kOr) && !may_trap(b->b))
        op = b->op == BinaryOp::kAnd ? "&" : "|";
      std::string r = fmt::format("({} {} {})", x, op, y);
      // Arithmetic on 16-bit floats is done in f32 and rounded back, as the IR says; C promotes
      // integers narrower than int, so their results are narrowed back (wrapping) the same way.
      if (b->type.is_half() && !is_comparison(b->op)) return cast(r, kF32, b->type);
      if (is_narrow_int(b->type)) return cast(r, kI32, b->type);
      return r;
    }
    case NodeKind::kUnary: {
      const Unary* u = e->as<Unary>();
      std::string r = fmt::format("({}{})", u->op == UnaryOp::kNeg ? "-" : "!", expr(u->a));
      return is_narrow_int(u->type) ? cast(r, kI32, u->type) : r;
    }
    case NodeKind::kCall: {
      const Call* c = e->as<Call>();
      std::string args;
      for (size_t i = 0; i < c->args.size(); ++i) args += (i ? ", " : "") + expr(c->args[i]);
      auto it = d_.math.find(c->fn);
      std::string fn = it != d_.math.end() ? it->second : math_fn_name(c->fn);
      std::string r = fmt::format("{}({})", fn, args);
      return c->type.is_half() ? cast(r, kF32, c->type) : r;
    }
    case NodeKind::kCast: {
      const Cast* c = e->as<Cast>();
      return cast(expr(c->a), c->a->type, c->type);
    }
    case NodeKind::kSelect: {
      const Select* s = e->as<Select>();
      return fmt::format("({} ? {} : {})", expr(s->cond), expr(s->t), expr(s->f));
    }
    case NodeKind::kLoad: {
      const Load* l = e->as<Load>();
      std::string v = load_value(l->buffer, element(l->buffer, l->indices));
      if (!l->predicate) return v;
      return fmt::format("({} ? {} : {})", expr(l->predicate), v, expr(l->other));
    }
    default: TESSEL_CHECK(false, "not an expression: {}", node_kind_name(e->kind));
  }
  return "";
}

// ----- statements -------------------------------------------------------------------------------

void CRenderer::emit(const std::string& line) {
  out_.append(indent_ * 2, ' ');
  out_ += line;
  out_ += '\n';
}

void CRenderer::open(const std::string& line) {
  emit(line.empty() ? "{" : line + " {");
  ++indent_;
}

void CRenderer::close(const std::string& suffix) {
  --indent_;
  emit("}" + suffix);
}

void CRenderer::store(const Store* s) {
  std::string line = fmt::format("{} = {};", element(s->buffer, s->indices),
                                 store_value(s->buffer, expr(s->value)));
  if (s->predicate) line = fmt::format("if ({}) {}", expr(s->predicate), line);
  emit(line);
}

void CRenderer::copy(const Copy* c) {
  TESSEL_CHECK(false, "copy at {} reached the {} renderer unlowered", c->loc.to_string(), d_.target);
}

void CRenderer::gemm(const Gemm* g) {
  TESSEL_CHECK(false, "gemm at {} reached the {} renderer unlowered", g->loc.to_string(), d_.target);
}

void CRenderer::barrier(const Barrier*) { TESSEL_CHECK(false, "barrier on the {} target", d_.target); }

void CRenderer::for_loop(const For* f) {
  std::string v = expr(f->var);
  open(fmt::format("for ({} {} = 0; {} < {}; ++{})", d_.i64, v, v, expr(f->extent), v));
  stmt(f->body);
  close();
}

void CRenderer::stmt(const Stmt& s) {
  switch (s->kind) {
    case NodeKind::kSeq:
      for (const Stmt& c : s->as<Seq>()->stmts) stmt(c);
      return;
    case NodeKind::kAlloc: return;  // declared by the kernel prologue
    case NodeKind::kLet: {
      const Let* l = s->as<Let>();
      emit(fmt::format("const {} {} = {};", value_type(l->var->type), expr(l->var), expr(l->value)));
      return;
    }
    case NodeKind::kFor: return for_loop(s->as<For>());
    case NodeKind::kParallel: return parallel(s->as<Parallel>());
    case NodeKind::kIfThenElse: {
      const IfThenElse* i = s->as<IfThenElse>();
      open(fmt::format("if ({})", expr(i->cond)));
      stmt(i->then_case);
      if (i->else_case) {
        --indent_;
        open("} else");
        stmt(i->else_case);
      }
      close();
      return;
    }
    case NodeKind::kStore: return store(s->as<Store>());
    case NodeKind::kCopy: return copy(s->as<Copy>());
    case NodeKind::kGemm: return gemm(s->as<Gemm>());
    case NodeKind::kBarrier: return barrier(s->as<Barrier>());
    case NodeKind::kFill:
    case NodeKind::kReduce:
      TESSEL_CHECK(false, "{} at {} reached the renderer unlowered", node_kind_name(s->kind), s->loc.to_string());
    default: TESSEL_CHECK(false, "not a statement: {}", node_kind_name(s->kind));
  }
}

}  // namespace tessel::tile
