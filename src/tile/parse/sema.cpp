// Semantic checks of the tile language (see sema.h). Messages name the construct, say what is
// wrong and, where there is one obvious fix, what to write instead.
#include "tile/parse/sema.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "tile/ir/printer.h"

namespace tessel::tile {

namespace {

const std::set<std::string>& reserved_names() {
  static const std::set<std::string> names = [] {
    std::set<std::string> s = {"kernel",    "grid",     "as",     "for",    "in",     "range",
                               "pipelined", "parallel", "if",     "else",   "shared", "fragment",
                               "global",    "dtype",    "true",   "false",  "inf",    "copy",
                               "gemm",      "clear",    "fill",   "reduce", "select", "min",
                               "max",       "cdiv",     "masked", "barrier"};
    for (int t = 0; t <= static_cast<int>(ScalarType::kI16); ++t)
      s.insert(scalar_type_name(static_cast<ScalarType>(t)));
    MathFn fn;
    for (const char* m : {"exp", "log", "tanh", "erf", "sqrt", "rsqrt", "abs", "floor", "ceil",
                          "sigmoid", "relu", "gelu", "pow"})
      if (math_fn_from_name(m, &fn)) s.insert(m);
    return s;
  }();
  return names;
}

bool is_literal(const Expr& e) {
  return e->as<IntImm>() || e->as<FloatImm>();
}

// A literal retyped to `to`, or null when it cannot be (a float literal as an integer).
Expr retype_literal(const Expr& e, const DType& to) {
  if (const IntImm* i = e->as<IntImm>()) {
    if (i->type.is_bool() || to.is_bool()) return nullptr;
    if (to.is_int()) return IntImm::make(i->value, to, e->loc);
    return FloatImm::make(static_cast<double>(i->value), to, e->loc);
  }
  if (const FloatImm* f = e->as<FloatImm>()) {
    if (to.is_float()) return FloatImm::make(f->value, to, e->loc);
  }
  return nullptr;
}

std::string plural(int64_t n, const char* word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}

// "1 index was" / "3 indices were", for "'A' has 2 dimensions but 3 indices were given".
std::string indices_given(size_t n) {
  return fmt::format("{} {} given", n, n == 1 ? "index was" : "indices were");
}

std::string describe(const Buffer& b) {
  if (b->scope == Scope::kGlobal) return fmt::format("'{}' is a global tensor", b->name);
  return fmt::format("'{}' is {}<{}>{}", b->name, scope_name(b->scope), b->dtype.name(),
                     shape_string(b->shape));
}

}  // namespace

// ----- names ------------------------------------------------------------------------------------

const Sema::Symbol* Sema::find(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto f = it->find(name);
    if (f != it->end()) return &f->second;
  }
  return nullptr;
}

Status Sema::define(const std::string& name, Symbol symbol, const SourceLoc& loc) {
  if (reserved_names().count(name))
    return error_at(loc, "'{}' is a built-in name; choose another", name);
  if (name[0] == '_')
    return error_at(loc, "names starting with '_' are reserved for the compiler: '{}'", name);
  if (const Symbol* s = find(name))
    return error_at(loc, "'{}' is already defined at {}", name, s->loc.to_string());
  symbol.loc = loc;
  scopes_.back()[name] = std::move(symbol);
  return ok_status();
}

bool Sema::is_defined(const std::string& name) const {
  return find(name) != nullptr;
}

bool Sema::is_buffer(const std::string& name) const {
  const Symbol* s = find(name);
  return s && s->buffer;
}

Expected<Expr> Sema::lookup_value(const std::string& name, const SourceLoc& loc) const {
  const Symbol* s = find(name);
  if (!s) return error_at(loc, "unknown name '{}'", name);
  if (s->is_dtype_param) return error_at(loc, "'{}' is a dtype, not a value", name);
  if (s->buffer) {
    if (s->buffer->scope == Scope::kGlobal)
      return error_at(loc, "tensor '{}' used as a value; index one element: {}[...]", name, name);
    return error_at(loc, "tile '{}' used as a value; index one element: {}[...]", name, name);
  }
  return Var::make(s->value->as<Var>()->name, s->value->type, s->value->as<Var>()->var_kind, loc);
}

Expected<Buffer> Sema::lookup_buffer(const std::string& name, const SourceLoc& loc) const {
  const Symbol* s = find(name);
  if (!s) return error_at(loc, "unknown name '{}'", name);
  if (!s->buffer) return error_at(loc, "'{}' is a scalar, not a tensor or tile", name);
  return s->buffer;
}

// ----- kernel header ----------------------------------------------------------------------------

Status Sema::begin_kernel(std::string name, SourceLoc loc) {
  kernel_.name = std::move(name);
  kernel_.loc = std::move(loc);
  return ok_status();
}

Status Sema::add_int_param(std::string name, int64_t default_value, SourceLoc loc) {
  Symbol s;
  s.value = Var::make(name, kI64, VarKind::kParam, loc);
  TESSEL_TRY(define(name, s, loc));
  kernel_.params.push_back(Param{name, false, default_value, DType(), loc});
  return ok_status();
}

Status Sema::add_dtype_param(std::string name, DType default_value, SourceLoc loc) {
  if (default_value.is_param() || (!default_value.is_float() && !default_value.is_int()))
    return error_at(loc,
                    "dtype parameter '{}' must default to a float type (f32, f16, bf16, f64) or an "
                    "integer type (i8, u8, i16, i32, i64), not {}",
                    name, default_value.name());
  Symbol s;
  s.is_dtype_param = true;
  s.dtype_param = DType::param(name, default_value.scalar());
  TESSEL_TRY(define(name, s, loc));
  kernel_.params.push_back(Param{name, true, 0, default_value, loc});
  return ok_status();
}

Expected<DType> Sema::dtype(const std::string& name, const SourceLoc& loc) {
  if (auto t = scalar_type_from_name(name)) return DType(*t);
  const Symbol* s = find(name);
  if (s && s->is_dtype_param) return s->dtype_param;
  if (s) return error_at(loc, "'{}' is not a dtype", name);
  return error_at(
      loc, "unknown dtype '{}' (expected f32, f16, bf16, f64, i32, i64, ... or a dtype parameter)",
      name);
}

Expected<Expr> Sema::tensor_dim(const std::string& name, const SourceLoc& loc) {
  const Symbol* s = find(name);
  if (!s) {
    Expr size = Var::make(name, kI64, VarKind::kSize, loc);
    Symbol sym;
    sym.value = size;
    TESSEL_TRY(define(name, sym, loc));
    kernel_.sizes.push_back(size);
    return size;
  }
  if (s->is_dtype_param) return error_at(loc, "'{}' is a dtype, not a size", name);
  if (s->buffer) return error_at(loc, "'{}' is a tensor, not a size", name);
  const Var* v = s->value->as<Var>();
  if (v->var_kind != VarKind::kSize && v->var_kind != VarKind::kParam)
    return error_at(loc, "'{}' is a scalar argument; tensor sizes are names of their own", name);
  return Var::make(v->name, v->type, v->var_kind, loc);
}

Status Sema::add_tensor_arg(std::string name, DType dtype, std::vector<Expr> dims, SourceLoc loc) {
  if (dims.empty()) return error_at(loc, "tensor '{}' needs at least one dimension", name);
  Symbol s;
  s.buffer = make_buffer(name, dtype, Scope::kGlobal, std::move(dims), loc);
  TESSEL_TRY(define(name, s, loc));
  kernel_.args.push_back(KernelArg{name, s.buffer, nullptr, loc});
  return ok_status();
}

Status Sema::add_scalar_arg(std::string name, DType dtype, SourceLoc loc) {
  Symbol s;
  s.value = Var::make(name, dtype, VarKind::kScalar, loc);
  TESSEL_TRY(define(name, s, loc));
  kernel_.args.push_back(KernelArg{name, nullptr, s.value, loc});
  return ok_status();
}

Status Sema::add_target_defaults(TargetDefaults defaults, const std::vector<SourceLoc>& name_locs,
                                 const std::vector<SourceLoc>& value_locs) {
  static const std::set<std::string> kTargets = {"cpu", "gpu", "opencl", "cuda"};
  if (!kTargets.count(defaults.target))
    return error_at(defaults.loc, "unknown target '{}' (expected cpu, gpu, opencl or cuda)",
                    defaults.target);
  for (const TargetDefaults& t : kernel_.target_defaults)
    if (t.target == defaults.target)
      return error_at(defaults.loc, "defaults for '{}' are already given at {}", t.target,
                      t.loc.to_string());
  for (size_t i = 0; i < defaults.values.size(); ++i) {
    const auto& [name, value] = defaults.values[i];
    const Param* p = kernel_.find_param(name);
    if (!p)
      return error_at(name_locs[i], "'on {}' sets '{}', which is not a parameter", defaults.target,
                      name);
    for (size_t j = 0; j < i; ++j)
      if (defaults.values[j].first == name)
        return error_at(name_locs[i], "'{}' is set twice", name);
    bool is_int =
        !value.empty() && (std::isdigit(static_cast<unsigned char>(value[0])) || value[0] == '-');
    if (p->is_dtype) {
      auto t = scalar_type_from_name(value);
      if (!t || !same_dtype_class(DType(*t), p->dtype_value))
        return error_at(value_locs[i], "parameter '{}' is {}; got '{}'", name,
                        dtype_class_name(p->dtype_value), value);
    } else if (!is_int) {
      return error_at(value_locs[i], "parameter '{}' is an integer; got '{}'", name, value);
    }
  }
  kernel_.target_defaults.push_back(std::move(defaults));
  return ok_status();
}

// ----- expressions ------------------------------------------------------------------------------

Expr Sema::int_literal(int64_t v, SourceLoc loc) {
  return IntImm::make(v, kI64, std::move(loc));
}
Expr Sema::float_literal(double v, SourceLoc loc) {
  return FloatImm::make(v, kF32, std::move(loc));
}
Expr Sema::bool_literal(bool v, SourceLoc loc) {
  return IntImm::make(v, kBool, std::move(loc));
}

Status Sema::unify(Expr* a, Expr* b, const std::string& what, const SourceLoc& loc) {
  if ((*a)->type == (*b)->type) return ok_status();
  if (is_literal(*a) && !is_literal(*b)) {
    if (Expr r = retype_literal(*a, (*b)->type)) {
      *a = r;
      return ok_status();
    }
  } else if (is_literal(*b) && !is_literal(*a)) {
    if (Expr r = retype_literal(*b, (*a)->type)) {
      *b = r;
      return ok_status();
    }
  } else if (is_literal(*a) && is_literal(*b)) {
    // Two literals: an integer one becomes a float.
    Expr* int_side = (*a)->type.is_int() ? a : b;
    const Expr& other = int_side == a ? *b : *a;
    if (Expr r = retype_literal(*int_side, other->type)) {
      *int_side = r;
      return ok_status();
    }
  }
  return error_at(loc, "mismatched types in {}: {} and {}; convert one side, e.g. {}(...)", what,
                  (*a)->type.name(), (*b)->type.name(),
                  (*a)->type.is_float() ? (*a)->type.name() : (*b)->type.name());
}

Expected<Expr> Sema::binary(BinaryOp op, Expr a, Expr b, SourceLoc loc) {
  std::string what = fmt::format("'{}'", binary_op_name(op));
  if (op == BinaryOp::kAnd || op == BinaryOp::kOr) {
    for (const Expr& e : {a, b})
      if (!e->type.is_bool())
        return error_at(e->loc, "{} needs bool operands, got {}", what, e->type.name());
    return Binary::make(op, a, b, loc);
  }
  for (const Expr& e : {a, b})
    if (e->type.is_bool()) return error_at(e->loc, "{} needs numbers, got a bool", what);
  TESSEL_TRY(unify(&a, &b, what, loc));
  if ((op == BinaryOp::kMod || op == BinaryOp::kCDiv) && !a->type.is_int())
    return error_at(loc, "{} needs integers, got {}", what, a->type.name());
  return Binary::make(op, a, b, loc);
}

Expected<Expr> Sema::unary(UnaryOp op, Expr a, SourceLoc loc) {
  if (op == UnaryOp::kNot) {
    if (!a->type.is_bool()) return error_at(loc, "'!' needs a bool, got {}", a->type.name());
    return Unary::make(op, a, loc);
  }
  if (a->type.is_bool()) return error_at(loc, "'-' needs a number, got a bool");
  // Fold the sign into literals so `-1.5` prints and parses back as one literal.
  if (const IntImm* i = a->as<IntImm>()) return IntImm::make(-i->value, i->type, loc);
  if (const FloatImm* f = a->as<FloatImm>()) return FloatImm::make(-f->value, f->type, loc);
  return Unary::make(op, a, loc);
}

bool Sema::is_function(const std::string& name) {
  MathFn fn;
  return math_fn_from_name(name, &fn) || name == "min" || name == "max" || name == "cdiv" ||
         name == "select" || scalar_type_from_name(name).has_value();
}

Expected<Expr> Sema::call(const std::string& name, std::vector<Expr> args, SourceLoc loc) {
  auto expect_args = [&](size_t n) -> Status {
    if (args.size() != n)
      return error_at(loc, "{} takes {}, got {}", name, plural(static_cast<int64_t>(n), "argument"),
                      args.size());
    return ok_status();
  };
  // Casts: a scalar type or a dtype parameter used as a function.
  std::optional<DType> cast_to;
  if (auto t = scalar_type_from_name(name)) {
    cast_to = DType(*t);
  } else if (const Symbol* s = find(name); s && s->is_dtype_param) {
    cast_to = s->dtype_param;
  }
  if (cast_to) {
    TESSEL_TRY(expect_args(1));
    if (cast_to->is_bool())
      return error_at(loc, "cannot convert to bool; compare instead, e.g. x != 0");
    if (args[0]->type.is_bool())
      return error_at(loc, "cannot convert a bool to {}; use select(c, 1, 0)", name);
    if (is_literal(args[0]))
      if (Expr r = retype_literal(args[0], *cast_to)) return r;
    if (args[0]->type == *cast_to) return args[0];
    return Cast::make(*cast_to, args[0], loc);
  }
  MathFn fn;
  if (math_fn_from_name(name, &fn)) {
    TESSEL_TRY(expect_args(math_fn_arity(fn)));
    if (args.size() == 2) TESSEL_TRY(unify(&args[0], &args[1], name, loc));
    for (Expr& a : args) {
      if (is_literal(a) && a->type.is_int()) a = retype_literal(a, kF32);
      if (!a->type.is_float())
        return error_at(a->loc, "{} needs a float argument, got {}; convert it, e.g. f32(...)",
                        name, a->type.name());
    }
    return Call::make(fn, args, loc);
  }
  if (name == "min" || name == "max" || name == "cdiv") {
    TESSEL_TRY(expect_args(2));
    BinaryOp op = name == "min" ? BinaryOp::kMin : name == "max" ? BinaryOp::kMax : BinaryOp::kCDiv;
    return binary(op, args[0], args[1], loc);
  }
  if (name == "select") {
    TESSEL_TRY(expect_args(3));
    if (!args[0]->type.is_bool())
      return error_at(args[0]->loc, "select's condition must be a bool, got {}",
                      args[0]->type.name());
    TESSEL_TRY(unify(&args[1], &args[2], "select", loc));
    return Select::make(args[0], args[1], args[2], loc);
  }
  if (is_defined(name)) return error_at(loc, "'{}' is not a function", name);
  return error_at(loc, "unknown function '{}'", name);
}

Expected<Expr> Sema::load(const Buffer& buffer, std::vector<Expr> indices, SourceLoc loc) {
  if (static_cast<int>(indices.size()) != buffer->rank())
    return error_at(loc, "'{}' has {} but {}", buffer->name, plural(buffer->rank(), "dimension"),
                    indices_given(indices.size()));
  for (size_t d = 0; d < indices.size(); ++d) {
    Expr& i = indices[d];
    if (!i->type.is_int())
      return error_at(i->loc, "index {} of '{}' must be an integer, got {}", d, buffer->name,
                      i->type.name());
    if (i->type != kI64) i = Cast::make(kI64, i, i->loc);
  }
  return Load::make(buffer, std::move(indices), loc);
}

// ----- statements -------------------------------------------------------------------------------

Expected<std::vector<Expr>> Sema::begin_grid(
    const std::vector<Expr>& extents, const std::vector<std::pair<std::string, SourceLoc>>& names,
    SourceLoc loc) {
  if (in_grid_) return error_at(loc, "grids do not nest; a kernel has one grid");
  if (had_grid_) return error_at(loc, "a kernel has one grid; this is a second one");
  if (extents.empty() || extents.size() > 3)
    return error_at(loc, "a grid has 1 to 3 dimensions, not {}", extents.size());
  if (names.size() != extents.size())
    return error_at(loc, "grid has {} but names {} block {}", plural(extents.size(), "dimension"),
                    names.size(), names.size() == 1 ? "index" : "indices");
  for (const Expr& e : extents)
    if (!e->type.is_int())
      return error_at(e->loc, "grid extents must be integers, got {}", e->type.name());
  scopes_.emplace_back();
  std::vector<Expr> vars;
  for (const auto& [name, nloc] : names) {
    Symbol s;
    s.value = Var::make(name, kI64, VarKind::kBlock, nloc);
    TESSEL_TRY(define(name, s, nloc));
    vars.push_back(s.value);
  }
  in_grid_ = had_grid_ = true;
  return vars;
}

Stmt Sema::end_grid(std::vector<Expr> extents, std::vector<Expr> vars, Stmt body, SourceLoc loc,
                    std::vector<Expr> threads) {
  scopes_.pop_back();
  in_grid_ = false;
  return Grid::make(std::move(extents), std::move(vars), std::move(body), std::move(loc),
                    std::move(threads));
}

Status Sema::check_threads(const std::vector<Expr>& threads, SourceLoc loc) {
  if (threads.empty() || threads.size() > 2)
    return error_at(loc, "a block's threads are (rows, columns) or (count), not {} values",
                    threads.size());
  for (const Expr& e : threads)
    if (!e->type.is_int())
      return error_at(e->loc, "block threads must be integers, got {}", e->type.name());
  return ok_status();
}

Expected<Expr> Sema::begin_for(const std::string& name, const Expr& extent, const Expr& stages,
                               SourceLoc name_loc, SourceLoc loc) {
  if (!in_grid_) return error_at(loc, "loops belong inside the grid");
  if (!extent->type.is_int())
    return error_at(extent->loc, "loop extent must be an integer, got {}", extent->type.name());
  if (stages && !stages->type.is_int())
    return error_at(stages->loc, "stages must be an integer, got {}", stages->type.name());
  if (stages && parallel_depth_ > 0)
    return error_at(loc, "pipelined loops stage tiles; they cannot run inside a parallel loop");
  scopes_.emplace_back();
  Symbol s;
  s.value = Var::make(name, kI64, VarKind::kLoop, name_loc);
  TESSEL_TRY(define(name, s, name_loc));
  ++loop_depth_;
  return s.value;
}

Stmt Sema::end_for(Expr var, Expr extent, Expr stages, Stmt body, SourceLoc loc) {
  scopes_.pop_back();
  --loop_depth_;
  ForKind kind = stages ? ForKind::kPipelined : ForKind::kSerial;
  return For::make(std::move(var), std::move(extent), kind, std::move(stages), std::move(body),
                   std::move(loc));
}

Expected<std::vector<Expr>> Sema::begin_parallel(
    const std::vector<std::pair<std::string, SourceLoc>>& names, const std::vector<Expr>& extents,
    SourceLoc loc) {
  if (!in_grid_) return error_at(loc, "parallel loops belong inside the grid");
  if (parallel_depth_ > 0)
    return error_at(
        loc, "parallel loops do not nest; list every dimension in one: parallel (i, j) in ...");
  if (names.size() != extents.size())
    return error_at(loc, "parallel loop names {} but iterates over {}",
                    plural(names.size(), "index"), plural(extents.size(), "dimension"));
  for (const Expr& e : extents)
    if (!e->type.is_int())
      return error_at(e->loc, "parallel extents must be integers, got {}", e->type.name());
  scopes_.emplace_back();
  std::vector<Expr> vars;
  for (const auto& [name, nloc] : names) {
    Symbol s;
    s.value = Var::make(name, kI64, VarKind::kLoop, nloc);
    TESSEL_TRY(define(name, s, nloc));
    vars.push_back(s.value);
  }
  ++parallel_depth_;
  return vars;
}

Stmt Sema::end_parallel(std::vector<Expr> vars, std::vector<Expr> extents, Stmt body,
                        SourceLoc loc) {
  scopes_.pop_back();
  --parallel_depth_;
  return Parallel::make(std::move(vars), std::move(extents), std::move(body), std::move(loc));
}

Status Sema::begin_if(const Expr& cond, SourceLoc loc) {
  if (!in_grid_) return error_at(loc, "'if' belongs inside the grid");
  if (!cond->type.is_bool()) {
    // An integer parameter reads as a flag: `if BIAS { ... }` means BIAS != 0.
    return error_at(cond->loc, "condition must be a bool, got {}; compare it, e.g. x != 0",
                    cond->type.name());
  }
  scopes_.emplace_back();
  return ok_status();
}

void Sema::next_branch() {
  scopes_.pop_back();
  scopes_.emplace_back();
}

Stmt Sema::end_if(Expr cond, Stmt then_case, Stmt else_case, SourceLoc loc) {
  scopes_.pop_back();
  return IfThenElse::make(std::move(cond), std::move(then_case), std::move(else_case),
                          std::move(loc));
}

Expected<Stmt> Sema::alloc(std::string name, Scope scope, DType dtype, std::vector<Expr> shape,
                           SourceLoc name_loc, SourceLoc loc) {
  if (!in_grid_) return error_at(loc, "tiles are allocated inside the grid");
  if (loop_depth_ > 0 || parallel_depth_ > 0 || scopes_.size() > 2)
    return error_at(loc,
                    "allocate tiles at the top level of the grid, not inside a loop or branch");
  if (shape.empty()) return error_at(loc, "a tile needs at least one dimension");
  for (const Expr& d : shape) {
    if (!d->type.is_int())
      return error_at(d->loc, "tile dimensions must be integers, got {}", d->type.name());
    // Compile-time means: made of literals and parameters only.
    bool constant = true;
    std::string culprit;
    std::vector<Expr> stack = {d};
    while (!stack.empty()) {
      Expr e = stack.back();
      stack.pop_back();
      if (const Var* v = e->as<Var>()) {
        if (v->var_kind != VarKind::kParam) {
          constant = false;
          culprit = v->name;
        }
      } else if (const Binary* b = e->as<Binary>()) {
        stack.push_back(b->a);
        stack.push_back(b->b);
      } else if (!e->as<IntImm>()) {
        constant = false;
        culprit = to_string(e);
      }
    }
    if (!constant)
      return error_at(
          d->loc, "tile dimensions must be compile-time constants; '{}' is known only at run time",
          culprit);
  }
  if (dtype.is_bool()) return error_at(loc, "tiles of bool are not supported; use u8");
  Symbol s;
  s.buffer = make_buffer(name, dtype, scope, std::move(shape), name_loc);
  TESSEL_TRY(define(name, s, name_loc));
  return Alloc::make(s.buffer, loc);
}

Expected<Stmt> Sema::let(std::string name, Expr value, SourceLoc name_loc, SourceLoc loc) {
  if (!in_grid_) return error_at(loc, "values are defined inside the grid");
  if (const Symbol* s = find(name)) {
    if (s->buffer)
      return error_at(name_loc,
                      "cannot assign to {} '{}' as a whole; assign elements: {}[i, j] = ...",
                      s->buffer->scope == Scope::kGlobal ? "tensor" : "tile", name, name);
    return error_at(name_loc, "'{}' is already defined at {}; values cannot be reassigned", name,
                    s->loc.to_string());
  }
  Symbol s;
  s.value = Var::make(name, value->type, VarKind::kLet, name_loc);
  TESSEL_TRY(define(name, s, name_loc));
  return Let::make(s.value, value, loc);
}

Expected<Expr> Sema::convert_for_store(Expr value, const DType& to, const std::string& what,
                                       const SourceLoc& loc) {
  if (value->type == to) return value;
  if (is_literal(value))
    if (Expr r = retype_literal(value, to)) return r;
  if (value->type.is_bool())
    return error_at(loc, "cannot store a bool into {}; use select(c, 1, 0)", what);
  if (value->type.is_float() && to.is_int())
    return error_at(loc, "storing {} into {} of {} drops the fraction; convert explicitly: {}(...)",
                    value->type.name(), what, to.name(), to.name());
  return Cast::make(to, value, value->loc);
}

Expected<Stmt> Sema::store(const Buffer& buffer, std::vector<Expr> indices, Expr value,
                           SourceLoc loc) {
  if (parallel_depth_ == 0)
    return error_at(
        loc, "element assignment outside a parallel loop; wrap it in parallel (...) in ... {{ }}");
  TESSEL_ASSIGN_OR_RETURN(Expr target, this->load(buffer, std::move(indices), loc));
  TESSEL_ASSIGN_OR_RETURN(value, convert_for_store(value, buffer->dtype,
                                                   fmt::format("'{}'", buffer->name), value->loc));
  return Store::make(buffer, target->as<Load>()->indices, value, loc);
}

Status Sema::check_tile_op_context(const char* op, const SourceLoc& loc) const {
  if (!in_grid_) return error_at(loc, "'{}' belongs inside the grid", op);
  if (parallel_depth_ > 0)
    return error_at(loc, "'{}' is a tile operation and cannot appear inside a parallel loop", op);
  return ok_status();
}

Expected<TileRef> Sema::tile_ref(const std::string& name, bool transposed,
                                 std::optional<std::vector<Expr>> origin, SourceLoc loc) {
  TESSEL_ASSIGN_OR_RETURN(Buffer b, lookup_buffer(name, loc));
  TileRef t{b, {}, transposed, loc};
  if (b->scope == Scope::kGlobal) {
    if (!origin)
      return error_at(loc, "tensor '{}' needs the origin of its tile: {}[{}]", name, name,
                      b->rank() == 1 ? "start" : "row, col");
    if (static_cast<int>(origin->size()) != b->rank())
      return error_at(loc, "'{}' has {} but {}", name, plural(b->rank(), "dimension"),
                      indices_given(origin->size()));
    for (Expr& o : *origin) {
      if (!o->type.is_int())
        return error_at(o->loc, "tile origin must be an integer, got {}", o->type.name());
      if (o->type != kI64) o = Cast::make(kI64, o, o->loc);
    }
    t.origin = std::move(*origin);
  } else if (origin) {
    return error_at(loc, "tile operations use tile '{}' whole; drop the indices", name);
  }
  if (transposed && b->rank() < 2)
    return error_at(loc, "'.T' needs at least 2 dimensions; '{}' has 1", name);
  return t;
}

namespace {
// The rank of the tile a global operand contributes: that of the tile on the other side.
int tile_rank(const TileRef& t) {
  return t.buffer->rank();
}
}  // namespace

Expected<Stmt> Sema::copy(TileRef src, TileRef dst, Expr pad, SourceLoc loc) {
  TESSEL_TRY(check_tile_op_context("copy", loc));
  if (src.is_global() && dst.is_global())
    return error_at(loc,
                    "copy needs a shared or fragment tile on at least one side; both '{}' and '{}' "
                    "are global tensors",
                    src.buffer->name, dst.buffer->name);
  if (src.buffer == dst.buffer)
    return error_at(loc, "copy from '{}' into itself", src.buffer->name);
  const TileRef& tile = src.is_global() ? dst : src;
  const TileRef& other = src.is_global() ? src : dst;
  if (other.is_global()) {
    if (tile_rank(tile) > other.buffer->rank())
      return error_at(loc, "tile '{}' has {} but tensor '{}' only {}", tile.buffer->name,
                      plural(tile_rank(tile), "dimension"), other.buffer->name,
                      plural(other.buffer->rank(), "dimension"));
    if (tile.transposed)
      return error_at(tile.loc, "transpose the global side of a copy ('{}.T[...]'), not the tile",
                      other.buffer->name);
    if (other.transposed && tile_rank(tile) < 2)
      return error_at(other.loc, "'.T' on '{}' needs a tile of 2 dimensions; '{}' has 1",
                      other.buffer->name, tile.buffer->name);
  } else if (src.buffer->rank() != dst.buffer->rank()) {
    return error_at(loc, "copy between tiles of different ranks: {} and {}", describe(src.buffer),
                    describe(dst.buffer));
  }
  for (const TileRef* t : {&src, &dst})
    if (t->buffer->dtype.is_bool()) return error_at(t->loc, "cannot copy bool tiles");
  if (pad) {
    if (!src.is_global())
      return error_at(pad->loc, "pad= only applies when copying from a global tensor");
    TESSEL_ASSIGN_OR_RETURN(
        pad, convert_for_store(pad, src.buffer->dtype,
                               fmt::format("the padding of '{}'", src.buffer->name), pad->loc));
  }
  return Copy::make(std::move(src), std::move(dst), std::move(pad), loc);
}

Expected<Stmt> Sema::gemm(TileRef a, TileRef b, TileRef c, SourceLoc loc) {
  TESSEL_TRY(check_tile_op_context("gemm", loc));
  for (const TileRef* t : {&a, &b, &c}) {
    if (t->is_global())
      return error_at(
          t->loc,
          "gemm operand '{}' is a global tensor; copy a tile of it into shared memory first",
          t->buffer->name);
    if (t->buffer->rank() != 2)
      return error_at(t->loc, "gemm needs 2-dimensional tiles; {}", describe(t->buffer));
  }
  if (c.buffer->scope != Scope::kFragment || c.buffer->dtype != kF32)
    return error_at(c.loc, "gemm accumulates into an f32 fragment; {}", describe(c.buffer));
  if (c.transposed) return error_at(c.loc, "the gemm accumulator cannot be transposed");
  if (a.buffer->dtype != b.buffer->dtype)
    return error_at(loc, "gemm operands have different dtypes: '{}' is {} and '{}' is {}",
                    a.buffer->name, a.buffer->dtype.name(), b.buffer->name, b.buffer->dtype.name());
  if (!a.buffer->dtype.is_float())
    return error_at(loc, "gemm operands must be floats (f32, f16, bf16), got {}",
                    a.buffer->dtype.name());
  if (c.buffer == a.buffer || c.buffer == b.buffer)
    return error_at(loc, "gemm accumulator '{}' is also an operand", c.buffer->name);
  return Gemm::make(std::move(a), std::move(b), std::move(c), loc);
}

Expected<Stmt> Sema::fill(TileRef dst, Expr value, SourceLoc loc) {
  TESSEL_TRY(check_tile_op_context("fill", loc));
  if (dst.is_global())
    return error_at(dst.loc,
                    "fill needs a shared or fragment tile; '{}' is a global tensor (write it with "
                    "a parallel loop)",
                    dst.buffer->name);
  if (dst.transposed) return error_at(dst.loc, "fill of a transposed tile; drop '.T'");
  TESSEL_ASSIGN_OR_RETURN(
      value, convert_for_store(value, dst.buffer->dtype, fmt::format("tile '{}'", dst.buffer->name),
                               value->loc));
  return Fill::make(dst.buffer, value, loc);
}

Expected<Stmt> Sema::reduce(TileRef src, TileRef dst, int64_t axis, SourceLoc axis_loc,
                            const std::string& op, SourceLoc op_loc, SourceLoc loc) {
  TESSEL_TRY(check_tile_op_context("reduce", loc));
  for (const TileRef* t : {&src, &dst}) {
    if (t->is_global())
      return error_at(t->loc, "reduce works on tiles; '{}' is a global tensor", t->buffer->name);
    if (t->transposed)
      return error_at(t->loc, "reduce of a transposed tile; pick the other axis instead");
    if (!t->buffer->dtype.is_float() && !t->buffer->dtype.is_int())
      return error_at(t->loc, "reduce needs numbers, '{}' holds {}", t->buffer->name,
                      t->buffer->dtype.name());
  }
  if (src.buffer == dst.buffer)
    return error_at(loc, "reduce from '{}' into itself", src.buffer->name);
  int rank = src.buffer->rank();
  if (axis < 0 || axis >= rank)
    return error_at(axis_loc, "axis {} is out of range for '{}' with {}", axis, src.buffer->name,
                    plural(rank, "dimension"));
  int want = std::max(1, rank - 1);
  if (dst.buffer->rank() != want)
    return error_at(dst.loc,
                    "reduce of '{}' ({}) along axis {} needs a destination with {}; '{}' has {}",
                    src.buffer->name, plural(rank, "dimension"), axis, plural(want, "dimension"),
                    dst.buffer->name, dst.buffer->rank());
  ReduceOp rop;
  if (op == "sum")
    rop = ReduceOp::kSum;
  else if (op == "max")
    rop = ReduceOp::kMax;
  else if (op == "min")
    rop = ReduceOp::kMin;
  else
    return error_at(op_loc, "unknown reduction '{}' (expected sum, max or min)", op);
  return Reduce::make(src.buffer, dst.buffer, static_cast<int>(axis), rop, loc);
}

Expected<Kernel> Sema::finish(Stmt body, SourceLoc body_loc) {
  if (!body || !body->as<Grid>())
    return error_at(body_loc, "a kernel body is one grid: grid (...) as (...) {{ ... }}");
  kernel_.body = std::move(body);
  return kernel_;
}

}  // namespace tessel::tile
