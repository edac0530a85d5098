// The C++ kernel builder (see builder.h): every call goes through Sema, as the parser's do.
#include "tile/parse/builder.h"

#include "tile/parse/sema.h"

namespace tessel::tile {

namespace {
KernelBuilder* builder_of(const Ex& a, const Ex& b) {
  return a.builder() ? a.builder() : b.builder();
}
}  // namespace

#define TESSEL_TILE_EX_BINARY(sym, op)                                   \
  Ex operator sym(Ex a, Ex b) {                                          \
    KernelBuilder* kb = builder_of(a, b);                                \
    TESSEL_CHECK(kb, "an expression of two literals; write the number"); \
    return kb->binary(BinaryOp::op, a, b);                               \
  }
TESSEL_TILE_EX_BINARY(+, kAdd)
TESSEL_TILE_EX_BINARY(-, kSub)
TESSEL_TILE_EX_BINARY(*, kMul)
TESSEL_TILE_EX_BINARY(/, kDiv)
TESSEL_TILE_EX_BINARY(%, kMod)
TESSEL_TILE_EX_BINARY(<, kLt)
TESSEL_TILE_EX_BINARY(<=, kLe)
TESSEL_TILE_EX_BINARY(>, kGt)
TESSEL_TILE_EX_BINARY(>=, kGe)
TESSEL_TILE_EX_BINARY(==, kEq)
TESSEL_TILE_EX_BINARY(!=, kNe)
TESSEL_TILE_EX_BINARY(&&, kAnd)
TESSEL_TILE_EX_BINARY(||, kOr)
#undef TESSEL_TILE_EX_BINARY

Ex operator-(Ex a) {
  TESSEL_CHECK(a.builder(), "negating a literal; write the negative number");
  return a.builder()->unary(UnaryOp::kNeg, a);
}

Ex cdiv(Ex a, Ex b) {
  return builder_of(a, b)->binary(BinaryOp::kCDiv, a, b);
}
Ex min(Ex a, Ex b) {
  return builder_of(a, b)->binary(BinaryOp::kMin, a, b);
}
Ex max(Ex a, Ex b) {
  return builder_of(a, b)->binary(BinaryOp::kMax, a, b);
}
Ex select(Ex c, Ex t, Ex f) {
  KernelBuilder* kb = c.builder() ? c.builder() : builder_of(t, f);
  TESSEL_CHECK(kb);
  return kb->select(c, t, f);
}

Ex Tile::element(std::vector<Ex> indices) const {
  return kb_->element(name_, std::move(indices));
}

KernelBuilder::KernelBuilder(std::string name, Loc loc) : sema_(std::make_unique<Sema>()) {
  blocks_.emplace_back();
  fail(sema_->begin_kernel(std::move(name), where(loc)));
}

KernelBuilder::~KernelBuilder() = default;

SourceLoc KernelBuilder::where(const Loc& loc) {
  if (!last_loc_.file || *last_loc_.file != loc.file_name())
    last_loc_.file = std::make_shared<const std::string>(loc.file_name());
  last_loc_.line = static_cast<int>(loc.line());
  last_loc_.col = static_cast<int>(loc.column());
  return last_loc_;
}

bool KernelBuilder::usable(const std::vector<Ex>& xs) {
  if (!ok()) return false;
  for (const Ex& x : xs)
    TESSEL_CHECK(x.expr(), "an expression from a failed builder call");
  return true;
}

std::vector<Expr> KernelBuilder::exprs(const std::vector<Ex>& xs) {
  std::vector<Expr> out;
  for (const Ex& x : xs)
    out.push_back(x.expr());
  return out;
}

void KernelBuilder::add(Stmt s) {
  blocks_.back().push_back(std::move(s));
}

Stmt KernelBuilder::run_body(const std::function<void()>& body, SourceLoc loc) {
  blocks_.emplace_back();
  body();
  std::vector<Stmt> stmts = std::move(blocks_.back());
  blocks_.pop_back();
  return Seq::make(std::move(stmts), std::move(loc));
}

// ----- signature --------------------------------------------------------------------------------

Ex KernelBuilder::param(const std::string& name, int64_t default_value, Loc loc) {
  if (!ok()) return Ex(this, nullptr);
  SourceLoc at = where(loc);
  fail(sema_->add_int_param(name, default_value, at));
  if (!ok()) return Ex(this, nullptr);
  return Ex(this, *sema_->lookup_value(name, at));
}

DType KernelBuilder::dtype_param(const std::string& name, DType default_value, Loc loc) {
  if (ok()) fail(sema_->add_dtype_param(name, default_value, where(loc)));
  return DType::param(name, default_value.scalar());
}

Tile KernelBuilder::tensor(const std::string& name, DType dtype, std::vector<Dim> dims, Loc loc) {
  if (!ok()) return Tile(this, name);
  SourceLoc at = where(loc);
  std::vector<Expr> shape;
  for (const Dim& d : dims) {
    if (d.name.empty()) {
      if (d.value <= 0) {
        fail(error_at(at, "tensor dimensions must be positive, got {}", d.value));
        return Tile(this, name);
      }
      shape.push_back(IntImm::make(d.value, kI64, at));
      continue;
    }
    Expected<Expr> e = sema_->tensor_dim(d.name, at);
    if (!e) {
      fail(e.status());
      return Tile(this, name);
    }
    shape.push_back(*e);
  }
  fail(sema_->add_tensor_arg(name, dtype, std::move(shape), at));
  return Tile(this, name);
}

Ex KernelBuilder::scalar(const std::string& name, DType dtype, Loc loc) {
  if (!ok()) return Ex(this, nullptr);
  SourceLoc at = where(loc);
  fail(sema_->add_scalar_arg(name, dtype, at));
  if (!ok()) return Ex(this, nullptr);
  return Ex(this, *sema_->lookup_value(name, at));
}

Ex KernelBuilder::size(const std::string& name, Loc loc) {
  if (!ok()) return Ex(this, nullptr);
  Expected<Expr> e = sema_->lookup_value(name, where(loc));
  if (!e) {
    fail(e.status());
    return Ex(this, nullptr);
  }
  return Ex(this, *e);
}

void KernelBuilder::on(const std::string& target,
                       std::vector<std::pair<std::string, std::string>> values, Loc loc) {
  if (!ok()) return;
  SourceLoc at = where(loc);
  std::vector<SourceLoc> locs(values.size(), at);
  fail(sema_->add_target_defaults(TargetDefaults{target, std::move(values), at}, locs, locs));
}

// ----- expressions ------------------------------------------------------------------------------

namespace {
Ex wrap(KernelBuilder* kb, Expected<Expr> e, const std::function<void(Status)>& fail) {
  if (!e) {
    fail(e.status());
    return Ex(kb, nullptr);
  }
  return Ex(kb, *e);
}
}  // namespace

Ex KernelBuilder::binary(BinaryOp op, Ex a, Ex b) {
  if (!usable({a, b})) return Ex(this, nullptr);
  return wrap(this, sema_->binary(op, a.expr(), b.expr(), last_loc_), [&](Status s) { fail(s); });
}

Ex KernelBuilder::unary(UnaryOp op, Ex a) {
  if (!usable({a})) return Ex(this, nullptr);
  return wrap(this, sema_->unary(op, a.expr(), last_loc_), [&](Status s) { fail(s); });
}

Ex KernelBuilder::select(Ex c, Ex t, Ex f) {
  if (!usable({c, t, f})) return Ex(this, nullptr);
  return wrap(this, sema_->call("select", {c.expr(), t.expr(), f.expr()}, last_loc_),
              [&](Status s) { fail(s); });
}

Ex KernelBuilder::element(const std::string& name, std::vector<Ex> indices) {
  if (!usable(indices)) return Ex(this, nullptr);
  Expected<Buffer> b = sema_->lookup_buffer(name, last_loc_);
  if (!b) {
    fail(b.status());
    return Ex(this, nullptr);
  }
  return wrap(this, sema_->load(*b, exprs(indices), last_loc_), [&](Status s) { fail(s); });
}

Ex KernelBuilder::call(const std::string& fn, std::vector<Ex> args, Loc loc) {
  if (!usable(args)) return Ex(this, nullptr);
  return wrap(this, sema_->call(fn, exprs(args), where(loc)), [&](Status s) { fail(s); });
}

Ex KernelBuilder::cast(DType to, Ex x, Loc loc) {
  return call(to.name(), {x}, loc);
}

// ----- statements -------------------------------------------------------------------------------

void KernelBuilder::grid(std::vector<Ex> extents, std::vector<std::string> names,
                         const std::function<void(std::vector<Ex>)>& body, Loc loc) {
  grid(std::move(extents), std::move(names), {}, body, loc);
}

void KernelBuilder::grid(std::vector<Ex> extents, std::vector<std::string> names,
                         std::vector<Ex> threads, const std::function<void(std::vector<Ex>)>& body,
                         Loc loc) {
  if (!usable(extents) || !usable(threads)) return;
  SourceLoc at = where(loc);
  if (!threads.empty()) {
    Status s = sema_->check_threads(exprs(threads), at);
    if (!s.ok()) return fail(s);
  }
  std::vector<std::pair<std::string, SourceLoc>> named;
  for (const std::string& n : names)
    named.emplace_back(n, at);
  Expected<std::vector<Expr>> vars = sema_->begin_grid(exprs(extents), named, at);
  if (!vars) return fail(vars.status());
  std::vector<Ex> vs;
  for (const Expr& v : *vars)
    vs.emplace_back(this, v);
  Stmt b = run_body([&] { body(vs); }, at);
  grid_ = sema_->end_grid(exprs(extents), *vars, b, at, exprs(threads));
}

Tile KernelBuilder::alloc(const std::string& name, Scope scope, DType dtype, std::vector<Ex> shape,
                          Loc loc) {
  if (!usable(shape)) return Tile(this, name);
  SourceLoc at = where(loc);
  Expected<Stmt> s = sema_->alloc(name, scope, dtype, exprs(shape), at, at);
  if (!s)
    fail(s.status());
  else
    add(*s);
  return Tile(this, name);
}

Tile KernelBuilder::shared(const std::string& name, DType dtype, std::vector<Ex> shape, Loc loc) {
  return alloc(name, Scope::kShared, std::move(dtype), std::move(shape), loc);
}

Tile KernelBuilder::fragment(const std::string& name, DType dtype, std::vector<Ex> shape, Loc loc) {
  return alloc(name, Scope::kFragment, std::move(dtype), std::move(shape), loc);
}

void KernelBuilder::range(const std::string& var, Ex extent, const std::function<void(Ex)>& body,
                          Loc loc) {
  if (!usable({extent})) return;
  SourceLoc at = where(loc);
  Expected<Expr> v = sema_->begin_for(var, extent.expr(), nullptr, at, at);
  if (!v) return fail(v.status());
  Stmt b = run_body([&] { body(Ex(this, *v)); }, at);
  add(sema_->end_for(*v, extent.expr(), nullptr, b, at));
}

void KernelBuilder::pipelined(const std::string& var, Ex extent, Ex stages,
                              const std::function<void(Ex)>& body, Loc loc) {
  if (!usable({extent, stages})) return;
  SourceLoc at = where(loc);
  Expected<Expr> v = sema_->begin_for(var, extent.expr(), stages.expr(), at, at);
  if (!v) return fail(v.status());
  Stmt b = run_body([&] { body(Ex(this, *v)); }, at);
  add(sema_->end_for(*v, extent.expr(), stages.expr(), b, at));
}

void KernelBuilder::parallel(std::vector<std::string> vars, std::vector<Ex> extents,
                             const std::function<void(std::vector<Ex>)>& body, Loc loc) {
  if (!usable(extents)) return;
  SourceLoc at = where(loc);
  std::vector<std::pair<std::string, SourceLoc>> named;
  for (const std::string& n : vars)
    named.emplace_back(n, at);
  Expected<std::vector<Expr>> vs = sema_->begin_parallel(named, exprs(extents), at);
  if (!vs) return fail(vs.status());
  std::vector<Ex> xs;
  for (const Expr& v : *vs)
    xs.emplace_back(this, v);
  Stmt b = run_body([&] { body(xs); }, at);
  add(sema_->end_parallel(*vs, exprs(extents), b, at));
}

void KernelBuilder::parallel(std::vector<std::string> vars, const Tile& over,
                             const std::function<void(std::vector<Ex>)>& body, Loc loc) {
  if (!ok()) return;
  Expected<Buffer> b = sema_->lookup_buffer(over.name(), where(loc));
  if (!b) return fail(b.status());
  std::vector<Ex> extents;
  for (const Expr& d : (*b)->shape)
    extents.emplace_back(this, d);
  parallel(std::move(vars), std::move(extents), body, loc);
}

void KernelBuilder::if_then(Ex cond, const std::function<void()>& then_case,
                            const std::function<void()>& else_case, Loc loc) {
  if (!usable({cond})) return;
  SourceLoc at = where(loc);
  Status s = sema_->begin_if(cond.expr(), at);
  if (!s.ok()) return fail(s);
  Stmt t = run_body(then_case, at);
  Stmt e;
  if (else_case) {
    sema_->next_branch();
    e = run_body(else_case, at);
  }
  add(sema_->end_if(cond.expr(), t, e, at));
}

Ex KernelBuilder::let(const std::string& name, Ex value, Loc loc) {
  if (!usable({value})) return Ex(this, nullptr);
  SourceLoc at = where(loc);
  Expected<Stmt> s = sema_->let(name, value.expr(), at, at);
  if (!s) {
    fail(s.status());
    return Ex(this, nullptr);
  }
  add(*s);
  return Ex(this, (*s)->as<Let>()->var);
}

void KernelBuilder::store(const Tile& t, std::vector<Ex> indices, Ex value, Loc loc) {
  if (!usable(indices) || !usable({value})) return;
  SourceLoc at = where(loc);
  Expected<Buffer> b = sema_->lookup_buffer(t.name(), at);
  if (!b) return fail(b.status());
  Expected<Stmt> s = sema_->store(*b, exprs(indices), value.expr(), at);
  if (!s) return fail(s.status());
  add(*s);
}

std::optional<TileRef> KernelBuilder::tile_ref(const Tile& t, const SourceLoc& loc) {
  std::optional<std::vector<Expr>> origin;
  if (t.origin_) {
    if (!usable(*t.origin_)) return std::nullopt;
    origin = exprs(*t.origin_);
  }
  Expected<TileRef> r = sema_->tile_ref(t.name(), t.transposed_, origin, loc);
  if (!r) {
    fail(r.status());
    return std::nullopt;
  }
  return *r;
}

void KernelBuilder::copy(const Tile& src, const Tile& dst, Loc loc) {
  if (!ok()) return;
  SourceLoc at = where(loc);
  auto s = tile_ref(src, at);
  auto d = tile_ref(dst, at);
  if (!s || !d) return;
  Expected<Stmt> st = sema_->copy(*s, *d, nullptr, at);
  if (!st) return fail(st.status());
  add(*st);
}

void KernelBuilder::copy(const Tile& src, const Tile& dst, Ex pad, Loc loc) {
  if (!usable({pad})) return;
  SourceLoc at = where(loc);
  auto s = tile_ref(src, at);
  auto d = tile_ref(dst, at);
  if (!s || !d) return;
  Expected<Stmt> st = sema_->copy(*s, *d, pad.expr(), at);
  if (!st) return fail(st.status());
  add(*st);
}

void KernelBuilder::gemm(const Tile& a, const Tile& b, const Tile& c, Loc loc) {
  if (!ok()) return;
  SourceLoc at = where(loc);
  auto ra = tile_ref(a, at), rb = tile_ref(b, at), rc = tile_ref(c, at);
  if (!ra || !rb || !rc) return;
  Expected<Stmt> st = sema_->gemm(*ra, *rb, *rc, at);
  if (!st) return fail(st.status());
  add(*st);
}

void KernelBuilder::clear(const Tile& t, Loc loc) {
  fill(t, Ex(0), loc);
}

void KernelBuilder::fill(const Tile& t, Ex value, Loc loc) {
  if (!usable({value})) return;
  SourceLoc at = where(loc);
  auto r = tile_ref(t, at);
  if (!r) return;
  Expected<Stmt> st = sema_->fill(*r, value.expr(), at);
  if (!st) return fail(st.status());
  add(*st);
}

void KernelBuilder::reduce(const Tile& src, const Tile& dst, int axis, const std::string& op,
                           Loc loc) {
  if (!ok()) return;
  SourceLoc at = where(loc);
  auto s = tile_ref(src, at), d = tile_ref(dst, at);
  if (!s || !d) return;
  Expected<Stmt> st = sema_->reduce(*s, *d, axis, at, op, at, at);
  if (!st) return fail(st.status());
  add(*st);
}

Expected<Kernel> KernelBuilder::build(Loc loc) {
  if (!ok()) return status_;
  return sema_->finish(grid_, where(loc));
}

}  // namespace tessel::tile
