// The CPU renderer (see cpu_renderer.h): a CDialect of C++ spellings plus how blocks, tiles,
// packing and gemm look on a CPU.
#include "tile/codegen/cpu/cpu_renderer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>

#include "tile/codegen/c_renderer.h"
#include "tile/ir/printer.h"
#include "tile/ir/visitor.h"
#include "tile/passes/check_shapes.h"
#include "tile/passes/simplify.h"

namespace tessel::tile {

namespace {

CDialect cpu_dialect() {
  CDialect d;
  d.target = "cpu";
  d.bool_type = "bool";
  d.i8 = "int8_t";
  d.u8 = "uint8_t";
  d.i16 = "int16_t";
  d.i32 = "int32_t";
  d.i64 = "int64_t";
  d.f32 = "float";
  d.f64 = "double";
  d.f16_storage = "tessel_cpu::f16";
  d.bf16_storage = "tessel_cpu::bf16";
  d.f16_load = d.bf16_load = "tessel_cpu::to_float";
  d.f16_store = "tessel_cpu::tile_float_to_f16";
  d.bf16_store = "tessel_cpu::tile_float_to_bf16";
  d.f16_round = "tessel_cpu::tile_round_f16";
  d.bf16_round = "tessel_cpu::tile_round_bf16";
  d.i64_literal_suffix = "LL";
  d.infinity = "std::numeric_limits<float>::infinity()";
  d.restrict_keyword = "__restrict__";
  d.eager_logic = true;
  d.int_min = "std::min<int64_t>";
  d.int_max = "std::max<int64_t>";
  d.float_min = "tessel_cpu::tile_fmin";
  d.float_max = "tessel_cpu::tile_fmax";
  d.math = {{MathFn::kExp, "tessel_cpu::tile_exp"},
            {MathFn::kLog, "std::log"},
            {MathFn::kTanh, "tessel_cpu::tile_tanh"},
            {MathFn::kErf, "std::erf"},
            {MathFn::kSqrt, "std::sqrt"},
            {MathFn::kRsqrt, "tessel_cpu::tile_rsqrt"},
            {MathFn::kAbs, "std::fabs"},
            {MathFn::kFloor, "std::floor"},
            {MathFn::kCeil, "std::ceil"},
            {MathFn::kSigmoid, "tessel_cpu::tile_sigmoid"},
            {MathFn::kRelu, "tessel_cpu::tile_relu"},
            {MathFn::kGelu, "tessel_cpu::tile_gelu"},
            {MathFn::kPow, "std::pow"},
            {MathFn::kFmod, "std::fmod"}};
  d.reserved = {
      "alignas", "alignof", "and",       "asm",       "auto",       "bool",      "break",
      "case",    "catch",   "char",      "class",     "const",      "constexpr", "continue",
      "default", "delete",  "do",        "double",    "else",       "enum",      "explicit",
      "extern",  "false",   "float",     "for",       "friend",     "goto",      "inline",
      "int",     "long",    "mutable",   "namespace", "new",        "not",       "operator",
      "or",      "private", "protected", "public",    "register",   "return",    "short",
      "signed",  "sizeof",  "static",    "struct",    "switch",     "template",  "this",
      "throw",   "true",    "try",       "typedef",   "typename",   "union",     "unsigned",
      "using",   "virtual", "void",      "volatile",  "while",      "std",       "args",
      "begin",   "end",     "block",     "scratch",   "tessel_cpu", "xor",       "char8_t"};
  return d;
}

// The packed element type the templates use for a gemm operand of dtype t.
const char* pack_type(const DType& t) {
  return t == kBF16 ? "tessel_cpu::bf16" : "float";
}

// ----- load bounds of a whole inner loop
//
// A global load's predicate is a conjunction of bounds (infer_bounds: idx >= 0, idx < size). In
// a parallel loop's innermost loop v = 0 .. extent - 1, a conjunct on `base + v` whose base is
// fixed for the whole loop holds at every v once it holds at the loop's ends, so it can be
// tested once before the loop. GCC made each such conjunct a 64-bit compare per lane and the
// load a masked one (vmaskmovps): max_pool_rows, whose reads of full rows all carry the column
// bound, ran at 2 GB/s, 2.3x slower than with the bound tested once (stop 28). Loops whose
// stores set run-time limits already drop the bounds that the limit implies (infer_bounds).
struct HoistedLoadBounds {
  Expr condition;  // every hoisted conjunct, at the loop's ends
  Stmt body;       // the loop's body without them
};

// The names a statement binds (lets, serial loop variables): values that change within the loop.
struct BoundNames : IRVisitor {
  std::set<std::string> names;
  std::map<std::string, Expr> lets;
  using IRVisitor::visit_node;
  void visit_node(const Let* l) override {
    names.insert(l->var->as<Var>()->name);
    lets[l->var->as<Var>()->name] = l->value;
    IRVisitor::visit_node(l);
  }
  void visit_node(const For* f) override {
    names.insert(f->var->as<Var>()->name);
    IRVisitor::visit_node(f);
  }
};

// The names an expression reads, and whether evaluating it before the loop could do what the
// loop might not: read memory (a load the loop guards) or divide by a run-time value (a
// division the loop guards against zero).
struct UsedNames : IRVisitor {
  std::set<std::string> names;
  bool unsafe = false;
  using IRVisitor::visit_node;
  void visit_node(const Var* v) override { names.insert(v->name); }
  void visit_node(const Load* l) override {
    unsafe = true;
    IRVisitor::visit_node(l);
  }
  void visit_node(const Binary* b) override {
    if (b->op == BinaryOp::kDiv || b->op == BinaryOp::kMod || b->op == BinaryOp::kCDiv) {
      const IntImm* d = b->b->as<IntImm>();
      unsafe = unsafe || d == nullptr || d->value == 0;
    }
    IRVisitor::visit_node(b);
  }
};

std::optional<HoistedLoadBounds> hoist_load_bounds(const Stmt& body, const std::string& v,
                                                   int64_t extent) {
  struct Hoister : IRMutator {
    BoundNames bound;
    std::string v;
    int64_t extent = 0;
    std::vector<Expr> hoisted;
    std::set<std::string> hoisted_text;
    using IRMutator::mutate_node;

    // e with the loop body's lets replaced by their values (a let's value may name other lets).
    Expr expand(const Expr& e, int depth = 0) {
      struct Expander : IRMutator {
        Hoister* self;
        int depth;
        using IRMutator::mutate_node;
        Expr mutate_node(const Var* var, const Expr& e) override {
          auto it = self->bound.lets.find(var->name);
          if (it == self->bound.lets.end() || depth > 16) return e;
          return self->expand(it->second, depth + 1);
        }
      } ex;
      ex.self = this;
      ex.depth = depth;
      return ex.mutate(e);
    }
    bool fixed(const Expr& e) const {  // the same value at every step of the inner loop
      UsedNames used;
      used.visit(e);
      if (used.unsafe) return false;
      for (const std::string& n : used.names)
        if (n == v || bound.names.count(n)) return false;
      return true;
    }
    // base, when idx is a sum of fixed terms and v itself (`bx * 16 + j - 1`: bx * 16 - 1).
    std::optional<Expr> base_of(const Expr& idx) const {
      if (const Var* x = idx->as<Var>(); x && x->name == v) return make_int(0);
      const Binary* b = idx->as<Binary>();
      if (!b || (b->op != BinaryOp::kAdd && b->op != BinaryOp::kSub)) return std::nullopt;
      if (fixed(b->b)) {
        std::optional<Expr> a = base_of(b->a);
        if (!a) return std::nullopt;
        return Binary::make(b->op, *a, b->b, b->loc);
      }
      if (b->op == BinaryOp::kAdd && fixed(b->a)) {
        std::optional<Expr> r = base_of(b->b);
        if (!r) return std::nullopt;
        return Binary::make(BinaryOp::kAdd, b->a, *r, b->loc);
      }
      return std::nullopt;
    }
    // The conjunct's test over the whole loop, or null when it cannot be hoisted.
    Expr whole_loop(const Expr& c) {
      const Binary* b = c->as<Binary>();
      if (!b || !b->a->type.is_int()) return nullptr;
      if (b->op == BinaryOp::kLt && fixed(b->b)) {
        if (auto base = base_of(expand(b->a)))
          return Binary::make(BinaryOp::kLt,
                              Binary::make(BinaryOp::kAdd, *base, make_int(extent - 1), c->loc),
                              b->b, c->loc);
      }
      const IntImm* zero = b->b->as<IntImm>();
      if (b->op == BinaryOp::kGe && zero && zero->value == 0) {
        if (auto base = base_of(expand(b->a)))
          return Binary::make(BinaryOp::kGe, *base, make_int(0), c->loc);
      }
      return nullptr;
    }
    Expr mutate_node(const Load* l, const Expr& e) override {
      Expr m = IRMutator::mutate_node(l, e);
      const Load* n = m->as<Load>();
      if (n->buffer->scope != Scope::kGlobal || !n->predicate) return m;
      std::vector<Expr> cs;
      split_conjuncts(n->predicate, &cs);
      Expr kept;
      for (const Expr& c : cs) {
        if (Expr w = whole_loop(c); w && (w = simplify(w))) {
          if (hoisted_text.insert(to_string(w)).second) hoisted.push_back(w);
        } else {
          kept = kept ? Binary::make(BinaryOp::kAnd, kept, c, c->loc) : c;
        }
      }
      if (kept) return Load::make(n->buffer, n->indices, n->loc, kept, n->other);
      return Load::make(n->buffer, n->indices, n->loc);
    }
    static void split_conjuncts(const Expr& p, std::vector<Expr>* out) {
      if (const Binary* b = p->as<Binary>(); b && b->op == BinaryOp::kAnd) {
        split_conjuncts(b->a, out);
        split_conjuncts(b->b, out);
      } else {
        out->push_back(p);
      }
    }
  } h;
  h.bound.visit(body);
  h.v = v;
  h.extent = extent;
  Stmt out = h.mutate(body);
  if (h.hoisted.empty()) return std::nullopt;
  Expr condition;
  for (const Expr& c : h.hoisted)
    condition = condition ? Binary::make(BinaryOp::kAnd, condition, c, c->loc) : c;
  return HoistedLoadBounds{condition, out};
}

class CpuRenderer : public CRenderer {
 public:
  CpuRenderer() : CRenderer(dialect_) {}

  std::string render(const Kernel& k) override {
    kernel_ = &k;
    const Grid* grid = k.grid();
    collect_tiles(grid->body);
    find_folded_clears(grid->body);
    find_fused_epilogues(grid->body);
    emit(fmt::format("// Generated by tessel from kernel '{}' ({}) for the cpu target.", k.name,
                     k.loc.file ? *k.loc.file : "<builder>"));
    emit("#include \"tile/codegen/cpu/prelude.h\"");
    if (!shared_tiles_.empty())
      emit("#include \"tile/codegen/cpu/templates/tile_gemm_schedule.h\"");
    emit("");
    std::string entry = entry_name(k);
    if (!shared_tiles_.empty()) render_workspace_functions(entry);
    open(fmt::format(
        "extern \"C\" int64_t {}(const tessel_cpu::Arg* args, int64_t begin, int64_t end)", entry));
    prologue();
    declare_tiles();
    open("for (int64_t _tblock = begin; _tblock < end; ++_tblock)");
    block_indices(*grid);
    stmt(grid->body);
    close();
    emit("return 0;");
    close();
    return out_;
  }

 private:
  static inline const CDialect dialect_ = cpu_dialect();

  static bool is_packed(const BufferNode& b) {
    return b.layout == Layout::kPackedA || b.layout == Layout::kPackedB;
  }

  // Loads every argument slot into a named local, then the grid's extents.
  void prologue() {
    std::vector<ArgSlot> slots = kernel_slots(*kernel_);
    for (size_t i = 0; i < slots.size(); ++i) {
      const ArgSlot& s = slots[i];
      switch (s.kind) {
        case ArgSlot::Kind::kData:
          // The offset slot follows the data slot.
          emit(fmt::format("{}* {} {} = static_cast<{}*>(args[{}].ptr) + args[{}].i64;",
                           storage_type(s.type), d_.restrict_keyword, ident(s.name),
                           storage_type(s.type), i, i + 1));
          break;
        case ArgSlot::Kind::kOffset:
          break;
        case ArgSlot::Kind::kScalar: {
          const char* field = s.type == kF32                      ? "f32"
                              : s.type == DType(ScalarType::kF64) ? "f64"
                              : s.type == kI32                    ? "i32"
                                                                  : "i64";
          emit(fmt::format("const {} {} = static_cast<{}>(args[{}].{});", value_type(s.type),
                           ident(s.name), value_type(s.type), i, field));
          break;
        }
        default:
          emit(fmt::format("const int64_t {} = args[{}].i64;", ident(s.name), i));
      }
    }
    const Grid* grid = kernel_->grid();
    for (size_t d = 0; d < grid->extents.size(); ++d)
      emit(fmt::format("const int64_t _tgrid{} = {};", d, expr(grid->extents[d])));
  }

  void collect_tiles(const Stmt& body) {
    struct Allocs : IRVisitor {
      std::vector<Buffer> list;
      std::map<std::string, Expr> loop_extents;
      using IRVisitor::visit_node;
      void visit_node(const Alloc* n) override { list.push_back(n->buffer); }
      void visit_node(const For* f) override {
        loop_extents[f->var->as<Var>()->name] = f->extent;
        IRVisitor::visit_node(f);
      }
    } allocs;
    allocs.visit(body);
    tiles_ = allocs.list;
    loop_extents_ = allocs.loop_extents;
    for (const Buffer& b : tiles_)
      if (!b->memo_key.empty()) shared_tiles_.push_back(b);
  }

  // The extent of a shared tile's key variable: a grid dimension or a loop's trip count.
  std::string key_extent(const std::string& var) {
    const Grid* grid = kernel_->grid();
    for (size_t d = 0; d < grid->vars.size(); ++d)
      if (grid->vars[d]->as<Var>()->name == var) return fmt::format("_tgrid{}", d);
    return expr(loop_extents_.at(var));
  }

  std::string packed_elems(const BufferNode& b) {
    std::string type = pack_type(b.dtype);
    int64_t rows = b.const_dim(b.packed_transposed ? 1 : 0),
            cols = b.const_dim(b.packed_transposed ? 0 : 1);
    return fmt::format("tessel_cpu::packed_{}_elems<{}>({}, {})",
                       b.layout == Layout::kPackedA ? "a" : "b", type, rows, cols);
  }

  // Shared tiles live in a workspace the launcher allocates per launch: for each, its tiles then
  // one state byte per tile. <entry>_workspace says how many bytes, <entry>_prepare clears the
  // states, and the entry point finds the workspace after the argument slots. The layout holds
  // three numbers per shared tile: the offsets of its tiles and states, and how many tiles.
  void render_workspace_functions(const std::string& entry) {
    size_t n = 3 * shared_tiles_.size();
    open(fmt::format("static int64_t {}_layout(const tessel_cpu::Arg* args, int64_t* layout)",
                     entry));
    prologue();
    emit("int64_t bytes = 0;");
    for (size_t t = 0; t < shared_tiles_.size(); ++t) {
      const BufferNode& b = *shared_tiles_[t];
      emit(fmt::format("layout[{}] = {};", 3 * t + 2, table_size(b)));
      emit(fmt::format("layout[{}] = bytes;", 3 * t));
      emit(fmt::format("bytes += (layout[{}] * {} * int64_t(sizeof({})) + 63) / 64 * 64;",
                       3 * t + 2, packed_elems(b), pack_type(b.dtype)));
      emit(fmt::format("layout[{}] = bytes;", 3 * t + 1));
      emit(fmt::format("bytes += (layout[{}] + 63) / 64 * 64;", 3 * t + 2));
    }
    emit("return bytes;");
    close();
    open(fmt::format("extern \"C\" int64_t {}_workspace(const tessel_cpu::Arg* args)", entry));
    emit(fmt::format("int64_t layout[{}];", n));
    emit(fmt::format("return {}_layout(args, layout);", entry));
    close();
    open(fmt::format("extern \"C\" void {}_prepare(const tessel_cpu::Arg* args, void* workspace)",
                     entry));
    emit(fmt::format("int64_t layout[{}];", n));
    emit(fmt::format("{}_layout(args, layout);", entry));
    for (size_t t = 0; t < shared_tiles_.size(); ++t)
      emit(fmt::format(
          "std::memset(static_cast<char*>(workspace) + layout[{}], 0, size_t(layout[{}]));",
          3 * t + 1, 3 * t + 2));
    close();
    emit("");
  }

  // How many tiles a shared tile's table holds: the product of its key's extents.
  std::string table_size(const BufferNode& b) {
    std::string tiles;
    for (const std::string& v : b.memo_key)
      tiles += (tiles.empty() ? "" : " * ") + key_extent(v);
    return tiles;
  }

  // Per-thread scratch for every tile; tables in the workspace for shared tiles.
  void declare_tiles() {
    if (!shared_tiles_.empty()) {
      emit(fmt::format("int64_t _tlayout[{}];", 3 * shared_tiles_.size()));
      emit(fmt::format("{}_layout(args, _tlayout);", entry_name(*kernel_)));
      emit(fmt::format("char* _tworkspace = static_cast<char*>(args[{}].ptr);",
                       kernel_slots(*kernel_).size()));
    }
    bool scratch = false;
    for (size_t slot = 0; slot < tiles_.size(); ++slot) {
      const BufferNode& b = *tiles_[slot];
      std::string note = fmt::format(
          "// {} {}{}", scope_name(b.scope), shape_string(b.shape),
          b.layout == Layout::kRowMajor ? "" : std::string(" ") + layout_name(b.layout));
      if (!b.memo_key.empty()) {
        size_t t = std::find(shared_tiles_.begin(), shared_tiles_.end(), tiles_[slot]) -
                   shared_tiles_.begin();
        std::string type = pack_type(b.dtype);
        emit(fmt::format(
            "tessel_cpu::PackedTiles<{}> {}_table(reinterpret_cast<{}*>(_tworkspace + "
            "_tlayout[{}]), "
            "reinterpret_cast<uint8_t*>(_tworkspace + _tlayout[{}]), _tlayout[{}], {});  {}, "
            "shared by blocks",
            type, ident(b.name), type, 3 * t, 3 * t + 1, 3 * t + 2, packed_elems(b), note));
        emit(fmt::format("const {}* {} = nullptr;", type, ident(b.name)));
        continue;
      }
      if (!scratch)
        emit(fmt::format("static thread_local tessel_cpu::Scratch<{}> scratch;", tiles_.size()));
      scratch = true;
      std::string type = is_packed(b) ? pack_type(b.dtype) : storage_type(b.dtype);
      std::string elems = is_packed(b) ? packed_elems(b) : std::to_string(b.const_elements());
      emit(fmt::format("{}* {} {} = scratch.get<{}>({}, {});  {}", type, d_.restrict_keyword,
                       ident(b.name), type, slot, elems, note));
    }
    // Out of memory: no block runs, and the launcher names the kernel and the bytes.
    if (scratch)
      emit("if (const int64_t _tunallocated = scratch.take_unallocated()) return _tunallocated;");
  }

  // Block indices from the block number: the first grid dimension varies fastest, except that a
  // kernel with shared tiles runs blocks in groups of rows (tile_gemm_schedule.h), so the tiles
  // one group reads stay in cache.
  void block_indices(const Grid& grid) {
    size_t n = grid.vars.size();
    if (!shared_tiles_.empty() && n >= 2) {
      emit("const int64_t _tplane = _tblock % (_tgrid0 * _tgrid1);");
      emit(
          "const tessel_cpu::BlockCoords _tcoords = tessel_cpu::block_coords(_tplane, _tgrid1, "
          "_tgrid0, tessel_cpu::kGroupRows);");
      emit(fmt::format("const int64_t {} = _tcoords.bx;", expr(grid.vars[0])));
      emit(fmt::format("const int64_t {} = _tcoords.by;", expr(grid.vars[1])));
      if (n == 3)
        emit(fmt::format("const int64_t {} = _tblock / (_tgrid0 * _tgrid1);", expr(grid.vars[2])));
      return;
    }
    std::string rest = "_tblock";
    for (size_t d = 0; d < n; ++d) {
      std::string v = expr(grid.vars[d]);
      if (d + 1 == n)
        emit(fmt::format("const int64_t {} = {};", v, rest));
      else
        emit(fmt::format("const int64_t {} = {} % _tgrid{};", v, rest, d));
      rest = fmt::format("({} / _tgrid{})", rest, d);
    }
  }

  // A loop whose body fills shared tiles first claims, for every iteration, the tiles that no
  // other thread has packed yet, so threads starting on the same tiles split them.
  void for_loop(const For* f) override {
    if (auto fused = fused_loops_.find(f); fused != fused_loops_.end())
      declare_fused_epilogue(*fused->second);
    std::vector<const Copy*> claims;
    if (const Seq* body = f->body->as<Seq>())
      for (const Stmt& s : body->stmts)
        if (const Copy* c = s->as<Copy>(); c && !c->dst.buffer->memo_key.empty())
          claims.push_back(c);
    if (!claims.empty()) {
      std::string v = expr(f->var);
      open(fmt::format("for (int64_t {} = 0; {} < {}; ++{})", v, v, expr(f->extent), v));
      for (const Copy* c : claims)
        pack(c, /*claim=*/true);
      close();
    }
    CRenderer::for_loop(f);
  }

  // Element loops over global tensors come in two versions: one for tensors whose last
  // dimension is contiguous (the usual case, which the compiler vectorises), one for any strides.
  // Trailing dimensions of literal extent ([P, OH, 2, OW, 2]) are taken as contiguous with the
  // dimension before them too, so their strides are constants in the first version: an access
  // X[p, oh, 0, ow, 1] then reads as X[... + ow * 2 + 1], pairs of neighbours the compiler can
  // vectorise.
  void parallel(const Parallel* p) override {
    auto fused = fused_parallels_.find(p);
    if (fused == fused_parallels_.end()) return stride_versions(p, [&] { loops(p); });
    // Run here only where the K loop's last step did not run it (no step, or a gemm that did
    // not cover the loop's limits).
    open(fmt::format("if (!{})", fused->second->flag));
    stride_versions(p, [&] { loops(p); });
    close();
  }

  // Renders `p` with body(), in a version for tensors whose last dimension is contiguous and one
  // for any strides (known_strides_ set for the first), or once when p touches no tensor.
  template <typename Body>
  void stride_versions(const Parallel* p, Body&& body) {
    struct Globals : IRVisitor {
      std::set<std::string> names;
      using IRVisitor::visit_node;
      void visit_node(const Load* n) override {
        if (n->buffer->scope == Scope::kGlobal) names.insert(n->buffer->name);
        IRVisitor::visit_node(n);
      }
      void visit_node(const Store* n) override {
        if (n->buffer->scope == Scope::kGlobal) names.insert(n->buffer->name);
        IRVisitor::visit_node(n);
      }
    } globals;
    globals.visit(p->body);
    if (globals.names.empty()) return body();
    std::string check;
    for (const std::string& name : globals.names) {
      const KernelArg* arg = nullptr;
      for (const KernelArg& a : kernel_->args)
        if (a.name == name) arg = &a;
      const BufferNode& t = *arg->tensor;
      std::vector<int64_t> strides(t.rank(), -1);
      int64_t span = 1;
      for (int d = t.rank() - 1; d >= 0; --d) {
        strides[d] = span;
        check +=
            fmt::format("{}{}_stride{} == {}", check.empty() ? "" : " && ", ident(name), d, span);
        std::optional<int64_t> extent = const_int(t.shape[d]);
        if (!extent) break;
        span *= *extent;
      }
      known_strides_[name] = strides;
    }
    open(fmt::format("if ({})", check));
    body();
    known_strides_.clear();
    --indent_;
    open("} else");
    body();
    close();
  }

  // The tile that `p` sets to +0.0 as a whole, if it is a clear(tile) of a whole row-major tile
  // in scratch; else null.
  static const BufferNode* cleared_tile(const Parallel* p) {
    const Store* st = p->body->as<Store>();
    if (st == nullptr || !p->limits.empty() || st->predicate ||
        st->buffer->scope == Scope::kGlobal || st->buffer->layout != Layout::kRowMajor ||
        st->indices.size() != p->vars.size() ||
        st->buffer->rank() != static_cast<int>(p->vars.size()))
      return nullptr;
    const FloatImm* f = st->value->as<FloatImm>();
    if (f == nullptr || f->value != 0.0 || std::signbit(f->value)) return nullptr;
    for (size_t d = 0; d < p->vars.size(); ++d) {
      std::optional<int64_t> extent = const_int(p->extents[d]);
      const Var* index = st->indices[d]->as<Var>();
      const Var* var = p->vars[d]->as<Var>();
      if (!index || !var || index->name != var->name || !extent ||
          *extent != st->buffer->const_dim(static_cast<int>(d)))
        return nullptr;
    }
    return st->buffer.get();
  }

  // clear(tile) of a whole row-major tile in scratch: one memset. As loops, GCC turned the
  // 192 x 256 accumulator's clear into a compare per store, 6% of a gemm at K = 384. A clear
  // folded into the K loop after it (find_folded_clears) is left to the loop's first step; the
  // memset stays for a launch where that loop runs no step (K = 0: acc must read as zeros).
  bool whole_tile_clear(const Parallel* p) {
    const BufferNode* tile = cleared_tile(p);
    if (tile == nullptr) return false;
    std::string memset =
        fmt::format("std::memset(static_cast<void*>({}), 0, sizeof({}) * {});", ident(tile->name),
                    storage_type(tile->dtype), tile->const_elements());
    auto folded = folded_clears_.find(p);
    if (folded == folded_clears_.end())
      emit(memset);
    else
      emit(fmt::format("if (!({} > 0)) {}  // else the K loop's first step writes {}",
                       expr(folded->second->extent), memset, ident(tile->name)));
    return true;
  }

  // Finds each clear(acc) directly followed by a loop in which acc is only the accumulator of one
  // gemm at the top of the loop's body (so it runs at every step, the first included): the gemm's
  // first step then writes acc instead of adding to it (`accumulate = false`, the micro-kernel
  // starts its registers at zero instead of loading acc), and the clear before the loop is left
  // for launches where the loop runs no step. At gpt_mini's shapes (K = 384, one or two K steps)
  // the memset was ~4% of the gemm. A loop that reads acc any other way (flash attention rescales
  // it), or a gemm under a condition (conv's taps), keeps the clear.
  void find_folded_clears(const Stmt& body) {
    struct Finder : IRVisitor {
      CpuRenderer* self;
      using IRVisitor::visit_node;
      void visit_node(const Seq* seq) override {
        for (size_t i = 0; i + 1 < seq->stmts.size(); ++i) {
          const Parallel* clear = seq->stmts[i]->as<Parallel>();
          const For* loop = seq->stmts[i + 1]->as<For>();
          const BufferNode* acc = clear ? cleared_tile(clear) : nullptr;
          if (acc == nullptr || loop == nullptr) continue;
          if (const Gemm* g = only_gemm_into(acc, *loop)) {
            self->folded_clears_[clear] = loop;
            self->first_step_writes_[g] = loop;
            std::vector<Stmt> after(seq->stmts.begin() + i + 2, seq->stmts.end());
            self->acc_read_limits_[g] = read_limits(acc, after, uses_of(acc, root));
          }
        }
        IRVisitor::visit_node(seq);
      }
      Stmt root;
    } finder;
    finder.self = this;
    finder.root = body;
    finder.visit(body);
  }

  // How many statements and expressions in `node` (an Expr or a Stmt) read or write `acc`.
  template <typename Node>
  static int uses_of(const BufferNode* acc, const Node& node) {
    struct Uses : IRVisitor {
      const BufferNode* acc;
      int uses = 0;
      using IRVisitor::visit_node;
      void visit_node(const Load* n) override {
        uses += n->buffer.get() == acc;
        IRVisitor::visit_node(n);
      }
      void visit_node(const Store* n) override {
        uses += n->buffer.get() == acc;
        IRVisitor::visit_node(n);
      }
      void visit_node(const Copy* n) override {
        uses += (n->src.buffer.get() == acc) + (n->dst.buffer.get() == acc);
        IRVisitor::visit_node(n);
      }
      void visit_node(const Gemm* n) override {
        uses +=
            (n->a.buffer.get() == acc) + (n->b.buffer.get() == acc) + (n->c.buffer.get() == acc);
        IRVisitor::visit_node(n);
      }
      void visit_node(const Fill* n) override {
        uses += n->dst.get() == acc;
        IRVisitor::visit_node(n);
      }
      void visit_node(const Reduce*) override { ++uses; }  // unlowered: be safe
    } uses;
    uses.acc = acc;
    uses.visit(node);
    return uses.uses;
  }

  // How far the statements after a folded K loop read `acc`, when that can be known at the gemm:
  // every read is acc[i, j] at the two variables of one parallel loop whose limits depend only on
  // sizes, scalars and block indices (gemm.tile's epilogue: min(BM, M - by * BM) rows,
  // min(BN, N - bx * BN) columns), and `uses` (all of acc's uses in the block) are those reads
  // plus the clear and the gemm. Those limits then bound what the first step must clear; an
  // empty vector when not known (clear all of acc outside what the gemm wrote).
  static std::vector<Expr> read_limits(const BufferNode* acc, const std::vector<Stmt>& after,
                                       int uses) {
    struct Reads : IRVisitor {
      const BufferNode* acc;
      std::vector<const Parallel*> open;  // enclosing parallel loops, innermost last
      const Parallel* reader = nullptr;
      int reads = 0;
      bool bounded = true;
      using IRVisitor::visit_node;
      void visit_node(const Parallel* p) override {
        open.push_back(p);
        IRVisitor::visit_node(p);
        open.pop_back();
      }
      void visit_node(const Load* n) override {
        IRVisitor::visit_node(n);
        if (n->buffer.get() != acc) return;
        ++reads;
        const Parallel* p = nullptr;
        for (auto it = open.rbegin(); it != open.rend() && p == nullptr; ++it)
          if ((*it)->vars.size() == 2 && n->indices.size() == 2 &&
              same_var(n->indices[0], (*it)->vars[0]) && same_var(n->indices[1], (*it)->vars[1]))
            p = *it;
        bounded =
            bounded && p != nullptr && !p->limits.empty() && (reader == nullptr || reader == p);
        reader = p;
      }
      static bool same_var(const Expr& a, const Expr& b) {
        const Var* x = a->as<Var>();
        const Var* y = b->as<Var>();
        return x && y && x->name == y->name;
      }
    } reads;
    reads.acc = acc;
    for (const Stmt& s : after)
      reads.visit(s);
    if (!reads.bounded || reads.reader == nullptr || reads.reads + 2 != uses) return {};
    // Evaluated at the gemm, inside the K loop: only names that mean the same there.
    struct Names : IRVisitor {
      bool outer_only = true;
      using IRVisitor::visit_node;
      void visit_node(const Var* v) override {
        outer_only =
            outer_only && (v->var_kind == VarKind::kSize || v->var_kind == VarKind::kScalar ||
                           v->var_kind == VarKind::kBlock);
      }
    } names;
    for (const Expr& limit : reads.reader->limits)
      names.visit(limit);
    return names.outer_only ? reads.reader->limits : std::vector<Expr>{};
  }

  // The gemm that is the only use of `acc` in `loop`, as a whole untransposed accumulator at the
  // top level of the loop's body; null if there is none or acc is used otherwise.
  static const Gemm* only_gemm_into(const BufferNode* acc, const For& loop) {
    if (uses_of(acc, loop.body) + uses_of(acc, loop.extent) != 1) return nullptr;
    std::vector<Stmt> top = {loop.body};
    if (const Seq* seq = loop.body->as<Seq>()) top = seq->stmts;
    for (const Stmt& s : top) {
      const Gemm* g = s->as<Gemm>();
      if (g == nullptr || g->c.buffer.get() != acc) continue;
      bool at_origin = !g->c.transposed;
      for (const Expr& e : g->c.origin) {
        std::optional<int64_t> v = const_int(e);
        at_origin = at_origin && v && *v == 0;
      }
      return at_origin && acc->rank() == 2 ? g : nullptr;
    }
    return nullptr;
  }

  // ----- epilogues fused into the last K step
  //
  // gemm.tile's block ends in a K loop whose last statement is gemm(As, Bs, acc) and then an
  // element-wise loop over acc that writes C (alpha, beta, bias, activation). Run after the loop,
  // that pass read the whole accumulator back from L2 (192 x 256 floats) and stored C in one
  // burst of write misses: ~7% of a 2048x1152x384 f32 gemm, single-threaded (perf). Fused, the
  // loop runs per micro-tile inside the last K step's gemm, on the 6 x 16 floats the
  // micro-kernel has just stored (tile_gemm.h: the gemm's epilogue argument), so C's stores
  // overlap the FMAs. Same arithmetic per element, so the same results. Conditions: acc is used
  // in the K loop by that gemm only (whole, untransposed, at the origin); the loop over acc reads
  // acc only at its own (i, j), stores only to tensors, reads no tile that the K loop writes and
  // has no loops or tile operations inside; and, checked at run time at the last step, the gemm
  // covers the loop's limits (the gemm writes rows x cols of acc, the loop reads up to its
  // limits), else the loop runs after the K loop as before (also where the loop runs no step).
  struct FusedEpilogue {
    const For* loop;
    const Parallel* epilogue;
    const Gemm* gemm;
    std::string lambda, flag;  // the C++ names of the epilogue and of "it ran in the last step"
  };

  void find_fused_epilogues(const Stmt& body) {
    struct Finder : IRVisitor {
      CpuRenderer* self;
      using IRVisitor::visit_node;
      void visit_node(const Seq* seq) override {
        for (size_t i = 0; i + 1 < seq->stmts.size(); ++i) {
          const For* loop = seq->stmts[i]->as<For>();
          const Parallel* epilogue = seq->stmts[i + 1]->as<Parallel>();
          if (loop == nullptr || epilogue == nullptr) continue;
          const Gemm* g = last_gemm(*loop);
          // f32 operands only: with bf16 ones (gemm_rounded, P = bf16) the lambda cost the AVX2
          // bf16 micro-kernel a third of its speed (bench gemm --dtypes bf16: 95-111 -> 66-71
          // GFLOP/s at 1024 and 2048x1152x384, 2 threads).
          if (g == nullptr || only_gemm_into(g->c.buffer.get(), *loop) != g ||
              g->a.buffer->dtype != kF32 || g->b.buffer->dtype != kF32 ||
              !fusable_epilogue(g->c.buffer.get(), *epilogue, *loop))
            continue;
          std::string n = std::to_string(self->fused_.size());
          auto fused = std::make_unique<FusedEpilogue>(
              FusedEpilogue{loop, epilogue, g, "_tepilogue" + n, "_tepilogue" + n + "_on"});
          self->fused_loops_[loop] = fused.get();
          self->fused_gemms_[g] = fused.get();
          self->fused_parallels_[epilogue] = fused.get();
          self->fused_.push_back(std::move(fused));
        }
        IRVisitor::visit_node(seq);
      }
    } finder;
    finder.self = this;
    finder.visit(body);
  }

  // The gemm that is the last statement of the loop's body, if it is one.
  static const Gemm* last_gemm(const For& loop) {
    const Stmt* last = &loop.body;
    if (const Seq* seq = loop.body->as<Seq>()) {
      if (seq->stmts.empty()) return nullptr;
      last = &seq->stmts.back();
    }
    return (*last)->as<Gemm>();
  }

  // Whether `p` may run per micro-tile of the gemm into `acc` in `loop` (see FusedEpilogue).
  static bool fusable_epilogue(const BufferNode* acc, const Parallel& p, const For& loop) {
    if (p.vars.size() != 2 || acc->rank() != 2 || !(p.limits.empty() || p.limits.size() == 2))
      return false;
    for (int d = 0; d < 2; ++d) {
      std::optional<int64_t> extent = const_int(p.extents[d]);
      if (!extent || *extent != acc->const_dim(d)) return false;
    }
    struct Check : IRVisitor {
      const BufferNode* acc;
      const Parallel* p;
      const For* loop;
      bool ok = true;
      using IRVisitor::visit_node;
      void visit_node(const Load* n) override {
        IRVisitor::visit_node(n);
        if (n->buffer.get() == acc)
          ok = ok && n->indices.size() == 2 && same_var(n->indices[0], p->vars[0]) &&
               same_var(n->indices[1], p->vars[1]);
        else if (n->buffer->scope != Scope::kGlobal)
          ok = ok && uses_of(n->buffer.get(), loop->body) == 0;
      }
      void visit_node(const Store* n) override {
        IRVisitor::visit_node(n);
        ok = ok && n->buffer->scope == Scope::kGlobal;
      }
      void visit_node(const For*) override { ok = false; }
      void visit_node(const Parallel*) override { ok = false; }
      void visit_node(const Copy*) override { ok = false; }
      void visit_node(const Gemm*) override { ok = false; }
      void visit_node(const Fill*) override { ok = false; }
      void visit_node(const Reduce*) override { ok = false; }
      void visit_node(const Barrier*) override { ok = false; }
      static bool same_var(const Expr& a, const Expr& b) {
        const Var* x = a->as<Var>();
        const Var* y = b->as<Var>();
        return x && y && x->name == y->name;
      }
    } check;
    check.acc = acc;
    check.p = &p;
    check.loop = &loop;
    check.visit(p.body);
    return check.ok;
  }

  // Before the K loop: the flag and the epilogue as a lambda over one micro-tile,
  // [i0, i0 + rows) x [j0, j0 + cols) of acc clipped to the loop's limits, whose columns run as
  // a loop of the micro-tile's literal width where they are whole (one or two vectors per row,
  // unrolled) and to the run-time end otherwise. Two things the compiler did not do for the
  // loop inside the gemm, which it had done for the loop after the K loop (perf annotate,
  // 2048x1152x384): it reloaded alpha, beta and C's pointer and stride from the closure after
  // every store to C (C might have pointed at them), so the lambda first copies every name it
  // reads into locals of its own (pointers `__restrict__` again); and it computed beta * C for
  // beta = 0 too, a read of C that misses the cache, so a select on scalars only (beta == 0) is
  // decided once per micro-tile, one version of the loop each way.
  void declare_fused_epilogue(const FusedEpilogue& f) {
    const Parallel* p = f.epilogue;
    const std::string vi = expr(p->vars[0]), vj = expr(p->vars[1]);
    emit(
        fmt::format("bool {} = false;  // the last K step ran the loop over acc after it", f.flag));
    open(
        fmt::format("auto {} = [&](int _ti0, int _tj0, int _trows, int _tcols) "
                    "__attribute__((always_inline))",
                    f.lambda));
    emit(fmt::format("if (!{}) return;", f.flag));
    std::string i_end = "_ti0 + _trows", j_end = "_tj0 + _tcols";
    if (!p->limits.empty()) {
      i_end = fmt::format("std::min<int64_t>({}, {})", i_end, expr(p->limits[0]));
      j_end = fmt::format("std::min<int64_t>({}, {})", j_end, expr(p->limits[1]));
    }
    emit(fmt::format("const int64_t _ti_end = {};", i_end));
    emit(fmt::format("const int64_t _tj_end = {};", j_end));
    emit(fmt::format("constexpr int64_t _tnr = tessel_cpu::MicroTile<{}>::kNR;",
                     pack_type(f.gemm->a.buffer->dtype)));
    // Every name the loop reads, copied, then declared again under its own name in a scope of
    // its own.
    std::vector<std::pair<std::string, std::string>> names = captured_names(*p);
    for (const auto& [type, name] : names)
      emit(fmt::format("{} const _tc_{} = {};", type, name, name));
    open("");
    for (const auto& [type, name] : names)
      emit(fmt::format("[[maybe_unused]] {} const {} = _tc_{};", type, name, name));
    unswitched(p->body, scalar_selects(p->body), [&](const Stmt& body) {
      stride_versions(p, [&] {
        open(fmt::format("for (int64_t {} = _ti0; {} < _ti_end; ++{})", vi, vi, vi));
        open("if (_tj_end - _tj0 == _tnr)");
        emit("#pragma omp simd");
        open("for (int64_t _tjj = 0; _tjj < _tnr; ++_tjj)");
        emit(fmt::format("const int64_t {} = _tj0 + _tjj;", vj));
        stmt(body);
        close();
        --indent_;
        open("} else");
        emit("#pragma omp simd");
        open(fmt::format("for (int64_t {} = _tj0; {} < _tj_end; ++{})", vj, vj, vj));
        stmt(body);
        close();
        close();
        close();
      });
    });
    close();
    --indent_;
    emit("};");
  }

  // The names `p` reads from outside (sizes, scalars, block indices, lets, tensors with their
  // strides, tiles), as (C++ type, name); tensors and tiles as `__restrict__` pointers.
  std::vector<std::pair<std::string, std::string>> captured_names(const Parallel& p) {
    struct Names : IRVisitor {
      std::map<std::string, const Var*> vars;
      std::set<std::string> bound;  // lets of the loop's own body
      std::map<std::string, const BufferNode*> buffers;
      using IRVisitor::visit_node;
      void visit_node(const Var* v) override {
        if (v->var_kind != VarKind::kLoop) vars.emplace(v->name, v);
      }
      void visit_node(const Let* n) override {
        bound.insert(n->var->as<Var>()->name);
        IRVisitor::visit_node(n);
      }
      void visit_node(const Load* n) override {
        buffers.emplace(n->buffer->name, n->buffer.get());
        IRVisitor::visit_node(n);
      }
      void visit_node(const Store* n) override {
        buffers.emplace(n->buffer->name, n->buffer.get());
        IRVisitor::visit_node(n);
      }
    } names;
    names.visit(p.body);
    for (const Expr& limit : p.limits)
      names.visit(limit);
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [name, v] : names.vars)
      if (!names.bound.count(name)) out.emplace_back(value_type(v->type), ident(name));
    for (const auto& [name, b] : names.buffers) {
      out.emplace_back(storage_type(b->dtype) + "* " + d_.restrict_keyword, ident(name));
      if (b->scope == Scope::kGlobal)
        for (int d = 0; d < b->rank(); ++d)
          out.emplace_back("int64_t", fmt::format("{}_stride{}", ident(name), d));
    }
    return out;
  }

  // The conditions of selects in `body` that read only run-time scalars and sizes (beta == 0),
  // at most two of them, each once.
  static std::vector<Expr> scalar_selects(const Stmt& body) {
    struct Finder : IRVisitor {
      std::vector<Expr> conds;
      std::set<std::string> seen;
      using IRVisitor::visit_node;
      void visit_node(const Select* n) override {
        IRVisitor::visit_node(n);
        if (conds.size() < 2 && only_scalars(n->cond) && seen.insert(to_string(n->cond)).second)
          conds.push_back(n->cond);
      }
      static bool only_scalars(const Expr& e) {
        struct Check : IRVisitor {
          bool ok = true, any = false;
          using IRVisitor::visit_node;
          void visit_node(const Var* v) override {
            any = true;
            ok = ok && (v->var_kind == VarKind::kScalar || v->var_kind == VarKind::kSize);
          }
          void visit_node(const Load*) override { ok = false; }
        } check;
        check.visit(e);
        return check.ok && check.any;
      }
    } finder;
    finder.visit(body);
    return finder.conds;
  }

  // render(body) once per outcome of `conds`, under `if`s on them, each version with the selects
  // on those conditions replaced by the branch taken.
  template <typename Render>
  void unswitched(const Stmt& body, const std::vector<Expr>& conds, Render&& render) {
    if (conds.empty()) return render(body);
    struct Decide : IRMutator {
      std::string cond;
      bool value;
      using IRMutator::mutate_node;
      Expr mutate_node(const Select* n, const Expr& self) override {
        if (to_string(n->cond) == cond) return mutate(value ? n->t : n->f);
        return IRMutator::mutate_node(n, self);
      }
    };
    const std::vector<Expr> rest(conds.begin() + 1, conds.end());
    open(fmt::format("if ({})", expr(conds[0])));
    for (bool value : {true, false}) {
      Decide decide;
      decide.cond = to_string(conds[0]);
      decide.value = value;
      unswitched(decide.mutate(body), rest, render);
      if (value) {
        --indent_;
        open("} else");
      }
    }
    close();
  }

  // The innermost loop stops at its run-time limit (a tensor's edge) in whole vectors: GCC 12
  // leaves the iterations past the last full vector to scalar code, so a row of 7 or 14 elements
  // (a 7 x 7 or 14 x 14 image under a 32-wide tile) ran as 7 or 14 scalar iterations. In the
  // version of a loop for contiguous tensors, a block inside the tensor runs the loop's literal
  // extent; a block at the edge runs the whole kMaskedLanes-vectors before the limit plainly,
  // then the rest up to the limit rounded up to kMaskedLanes (never past the extent) with the
  // body under `v < limit`, which the compiler turns into masks on the stores and loads
  // (infer_bounds dropped the conjuncts that the limit implies from their predicates).
  // The test is on the sign bit, since GCC's loop splitting (-O3) would turn `v < limit` back
  // into the loop's bound. The version for any strides keeps the plain bound: masked gathers and
  // scatters do not vectorise.
  static constexpr int64_t kMaskedLanes = 16;

  void loops(const Parallel* p) {
    if (whole_tile_clear(p)) return;
    if (reduction_loops(p)) return;
    size_t n = p->vars.size();
    for (size_t d = 0; d + 1 < n; ++d) {
      std::string v = expr(p->vars[d]);
      std::string bound = expr(p->limits.empty() ? p->extents[d] : p->limits[d]);
      open(fmt::format("for (int64_t {} = 0; {} < {}; ++{})", v, v, bound, v));
    }
    const std::string v = expr(p->vars[n - 1]);
    const Expr& last = p->limits.empty() ? p->extents[n - 1] : p->limits[n - 1];
    std::optional<int64_t> extent = const_int(p->extents[n - 1]);
    std::optional<HoistedLoadBounds> hoisted;
    if (!known_strides_.empty() && extent && *extent > 1 && p->limits.empty())
      hoisted = hoist_load_bounds(p->body, p->vars[n - 1]->as<Var>()->name, *extent);
    if (hoisted) {
      open(fmt::format("if ({})", expr(hoisted->condition)));
      emit("#pragma omp simd");
      open(fmt::format("for (int64_t {} = 0; {} < {}; ++{})", v, v, *extent, v));
      stmt(hoisted->body);
      close();
      --indent_;
      open("} else");
      emit("#pragma omp simd");
      open(fmt::format("for (int64_t {} = 0; {} < {}; ++{})", v, v, *extent, v));
      stmt(p->body);
      close();
      close();
    } else if (known_strides_.empty() || !extent || *extent <= 1 || const_int(last)) {
      emit("#pragma omp simd");
      open(fmt::format("for (int64_t {} = 0; {} < {}; ++{})", v, v, expr(last), v));
      stmt(p->body);
      close();
    } else {
      const std::string limit = "_tlimit" + v;
      open("");  // a scope of its own for the limit
      emit(fmt::format("const int64_t {} = {};", limit, expr(last)));
      open(fmt::format("if ({} == {})", limit, *extent));
      emit("#pragma omp simd");
      open(fmt::format("for (int64_t {} = 0; {} < {}; ++{})", v, v, *extent, v));
      stmt(p->body);
      close();
      --indent_;
      open("} else");
      // The whole vectors before the limit need no mask: under one, GCC computed the mask from
      // the 64-bit index for every vector (compares, shuffles and vmaskmovps), and a gemm
      // epilogue whose block is 128 of 256 columns wide (N = 384 or 128 under BN = 256) spent
      // ~17% of the gemm there (perf, 768x128x128 f32, two threads). Only the last partial
      // vector runs masked.
      const std::string full = "_tfull" + v;
      emit(fmt::format("const int64_t {} = std::max<int64_t>({}, 0) / {} * {};", full, limit,
                       kMaskedLanes, kMaskedLanes));
      emit("#pragma omp simd");
      open(fmt::format("for (int64_t {} = 0; {} < {}; ++{})", v, v, full, v));
      stmt(p->body);
      close();
      emit("#pragma omp simd");
      open(fmt::format(
          "for (int64_t {} = {}; {} < std::min<int64_t>({}, ({} + {}) / {} * {}); ++{})", v, full,
          v, *extent, limit, kMaskedLanes - 1, kMaskedLanes, kMaskedLanes, v));
      open(fmt::format("if (({} - {}) >> 63)", v, limit));
      stmt(p->body);
      close();
      close();
      close();
      close();
    }
    for (size_t d = 0; d + 1 < n; ++d)
      close();
  }

  // A lowered reduce(src, dst, axis, op) over scratch tiles: a parallel loop over dst's elements
  // whose body is one serial loop `dst[vars] = op(dst[vars], x(k))`. Written plainly, the simd
  // pragma sits on the parallel loop and GCC, which rarely vectorises an outer loop, ran every
  // reduction scalar: a row sum was a chain of dependent adds with a store per element
  // (layernorm_grad spent ~40% of its time in its four row sums at gpt_tiny's 128-wide rows), and
  // flash attention's column maximum was a compare and branch per score. Two shapes instead:
  // - k walks the last index of what x reads (axis = last: a row sum): each dst element keeps
  //   kReductionLanes partial results in a vector, one per lane, combined at the end (sums are
  //   reassociated, as every vectorised reduction is);
  // - otherwise (axis = 0 of a row-major tile): the serial loop goes outside and the vector loop
  //   runs over dst's last index, which is the same arithmetic in the same order per element.
  // Returns false (render as before) for anything else: predicates, limits, non-f32 dst.
  static constexpr int64_t kReductionLanes = 16;

  static bool mentions(const Expr& e, const std::string& name) {
    struct Finder : IRVisitor {
      const std::string* name;
      bool found = false;
      using IRVisitor::visit_node;
      void visit_node(const Var* v) override { found = found || v->name == *name; }
    } finder;
    finder.name = &name;
    finder.visit(e);
    return finder.found;
  }

  bool reduction_loops(const Parallel* p) {
    const For* f = p->body->as<For>();
    if (!p->limits.empty() || f == nullptr || f->for_kind != ForKind::kSerial) return false;
    std::optional<int64_t> k_extent = const_int(f->extent);
    const Store* st = f->body->as<Store>();
    if (!k_extent || st == nullptr || st->predicate || st->buffer->scope == Scope::kGlobal ||
        st->buffer->dtype != kF32 || st->indices.size() != p->vars.size())
      return false;
    for (size_t d = 0; d < p->vars.size(); ++d) {
      const Var* index = st->indices[d]->as<Var>();
      if (!index || index->name != p->vars[d]->as<Var>()->name) return false;
    }
    const Binary* update = st->value->as<Binary>();
    if (update == nullptr || (update->op != BinaryOp::kAdd && update->op != BinaryOp::kMax &&
                              update->op != BinaryOp::kMin))
      return false;
    const Load* old = update->a->as<Load>();
    if (old == nullptr || old->buffer.get() != st->buffer.get() || old->predicate ||
        old->indices.size() != st->indices.size() || update->b->type != kF32 ||
        uses_of(st->buffer.get(), update->b) != 0)
      return false;
    for (size_t d = 0; d < old->indices.size(); ++d) {
      const Var* index = old->indices[d]->as<Var>();
      if (!index || index->name != p->vars[d]->as<Var>()->name) return false;
    }
    // Does k walk only the last index of every load in x?
    const std::string k = f->var->as<Var>()->name;
    struct Loads : IRVisitor {
      std::vector<const Load*> loads;
      using IRVisitor::visit_node;
      void visit_node(const Load* n) override {
        loads.push_back(n);
        IRVisitor::visit_node(n);
      }
    } loads;
    loads.visit(update->b);
    bool k_last = !loads.loads.empty();
    for (const Load* l : loads.loads) {
      if (l->predicate || l->buffer->scope == Scope::kGlobal) return false;
      for (size_t d = 0; d < l->indices.size(); ++d) {
        const bool last = d + 1 == l->indices.size();
        const Var* index = l->indices[d]->as<Var>();
        if (last && !(index && index->name == k)) k_last = false;
        if (!last && mentions(l->indices[d], k)) k_last = false;
      }
    }
    const size_t n = p->vars.size();
    const std::string dst = element(st->buffer, st->indices);
    if (!k_last) {
      open(fmt::format("for (int64_t {} = 0; {} < {}; ++{})", ident(k), ident(k), *k_extent,
                       ident(k)));
      for (size_t d = 0; d < n; ++d) {
        std::string v = expr(p->vars[d]);
        if (d + 1 == n) emit("#pragma omp simd");
        open(fmt::format("for (int64_t {} = 0; {} < {}; ++{})", v, v, expr(p->extents[d]), v));
      }
      stmt(f->body);
      for (size_t d = 0; d <= n; ++d)
        close();
      return true;
    }
    if (*k_extent < kReductionLanes) return false;
    for (size_t d = 0; d < n; ++d) {
      std::string v = expr(p->vars[d]);
      open(fmt::format("for (int64_t {} = 0; {} < {}; ++{})", v, v, expr(p->extents[d]), v));
    }
    const std::string identity = update->op == BinaryOp::kAdd   ? "0.0f"
                                 : update->op == BinaryOp::kMax ? "-" + d_.infinity
                                                                : d_.infinity;
    // The accumulator and lane are Vars so that `op` renders as it does everywhere else.
    const Expr acc = Var::make("_racc", kF32, VarKind::kScalar, st->loc);
    const Expr part = Var::make("_rpart", kF32, VarKind::kScalar, st->loc);
    const int64_t full = *k_extent / kReductionLanes * kReductionLanes;
    emit(fmt::format("float _rparts[{}];", kReductionLanes));
    emit("#pragma omp simd");
    open(fmt::format("for (int64_t _rlane = 0; _rlane < {}; ++_rlane)", kReductionLanes));
    emit(fmt::format("_rparts[_rlane] = {};", identity));
    close();
    open(fmt::format("for (int64_t _rstep = 0; _rstep < {}; _rstep += {})", full, kReductionLanes));
    emit("#pragma omp simd");
    open(fmt::format("for (int64_t _rlane = 0; _rlane < {}; ++_rlane)", kReductionLanes));
    emit(fmt::format("const int64_t {} = _rstep + _rlane;", ident(k)));
    emit("const float _rpart = _rparts[_rlane];");
    emit(fmt::format("_rparts[_rlane] = {};",
                     expr(Binary::make(update->op, part, update->b, st->loc))));
    close();
    close();
    emit(fmt::format("float _racc = {};", dst));
    if (full < *k_extent) {
      open(fmt::format("for (int64_t {} = {}; {} < {}; ++{})", ident(k), full, ident(k), *k_extent,
                       ident(k)));
      emit(fmt::format("_racc = {};", expr(Binary::make(update->op, acc, update->b, st->loc))));
      close();
    }
    open(fmt::format("for (int64_t _rlane = 0; _rlane < {}; ++_rlane)", kReductionLanes));
    emit("const float _rpart = _rparts[_rlane];");
    emit(fmt::format("_racc = {};", expr(Binary::make(update->op, acc, part, st->loc))));
    close();
    emit(fmt::format("{} = _racc;", dst));
    for (size_t d = 0; d < n; ++d)
      close();
    return true;
  }

  // Strides and valid extents of the two tile axes of a copy's source, in the copy's view.
  struct SourceView {
    std::string base;       // pointer to element (0, 0) of the tile
    std::string stride[2];  // per view axis
    std::string valid[2];   // elements inside the tensor per view axis
  };

  SourceView source_view(const TileRef& src, const std::vector<int64_t>& tile) {
    SourceView v;
    const Buffer& b = src.buffer;
    std::string name = ident(b->name);
    if (!src.is_global()) {
      int64_t cols = b->const_dim(1);
      v.base = name;
      v.stride[0] = src.transposed ? "1" : std::to_string(cols);
      v.stride[1] = src.transposed ? std::to_string(cols) : "1";
      v.valid[0] = std::to_string(tile[0]);
      v.valid[1] = std::to_string(tile[1]);
      return v;
    }
    int rank = b->rank();
    std::vector<Expr> storage = src.origin;  // origin is in view coordinates
    if (src.transposed) std::swap(storage[rank - 2], storage[rank - 1]);
    v.base = fmt::format("({} + {})", name, global_offset(b, storage));
    for (int axis = 0; axis < 2; ++axis) {
      int view_dim = rank - 2 + axis;
      int storage_dim = src.transposed ? (rank - 1 - axis) : view_dim;
      v.stride[axis] = fmt::format("{}_stride{}", name, storage_dim);
      v.valid[axis] =
          fmt::format("tessel_cpu::tile_extent({}, {}, {})", expr(b->shape[storage_dim]),
                      expr(src.origin[view_dim]), tile[axis]);
    }
    return v;
  }

  // A copy into a packed tile is the packing step.
  void copy(const Copy* c) override { pack(c, /*claim=*/false); }

  // Packs the tile of copy `c`: into per-thread scratch, or into its slot of a shared table (as a
  // claim before the loop, or a get inside it, which packs only if no thread has).
  void pack(const Copy* c, bool claim) {
    const BufferNode& dst = *c->dst.buffer;
    TESSEL_CHECK(is_packed(dst));
    TESSEL_CHECK(c->src.is_global() ? c->src.buffer->rank() >= 2 : c->src.buffer->rank() == 2);
    std::vector<int64_t> tile = {dst.const_dim(0), dst.const_dim(1)};
    SourceView v = source_view(c->src, tile);
    // Operand axes: A is (i, k), B is (k, n); a tile the gemm reads transposed swaps them.
    int first = dst.packed_transposed ? 1 : 0, second = 1 - first;
    std::string name = ident(dst.name);
    std::string rows = fmt::format("_t{}_rows", name), cols = fmt::format("_t{}_cols", name);
    emit(fmt::format("const int {} = {};", rows, v.valid[first]));
    emit(fmt::format("const int {} = {};", cols, v.valid[second]));
    // Edge packing: the layout is that of a rows x cols tile.
    std::string size = dst.edge_packed ? fmt::format("{}, {}", rows, cols)
                                       : fmt::format("{}, {}", tile[first], tile[second]);
    std::string call = fmt::format("tessel_cpu::{}<{}, {}>({}, {}, {}, {}, {}, {}, {{}})",
                                   dst.layout == Layout::kPackedA ? "pack_a" : "pack_b",
                                   storage_type(c->src.buffer->dtype), pack_type(dst.dtype), v.base,
                                   v.stride[first], v.stride[second], rows, cols, size);
    // A's tile read in place (gemm_direct_a) instead of packed, where its elements already have
    // the packed type and K is contiguous: A's pack is the transposing one, and at gpt_mini's
    // shapes (K = 384) it took ~8% of the gemm. Only for edge-sized tiles (the in-place read
    // stops at the tensor's edge); the test is made at run time, per tile, the same way in the
    // claim pass and in the K loop, so a tile is either packed or read in place.
    const bool direct = dst.layout == Layout::kPackedA && dst.edge_packed && c->src.is_global() &&
                        storage_type(c->src.buffer->dtype) == pack_type(dst.dtype);
    std::string skip;
    if (direct) {
      std::string flag = fmt::format("_t{}_direct", name);
      emit(fmt::format("const bool {} = tessel_cpu::can_read_a_in_place<{}, {}>({}, {}, {});", flag,
                       storage_type(c->src.buffer->dtype), pack_type(dst.dtype), v.stride[first],
                       v.stride[second], cols));
      if (!claim) {
        emit(fmt::format("const {}* _t{}_src = {};", pack_type(dst.dtype), name, v.base));
        emit(fmt::format("const int64_t _t{}_lda = {};", name, v.stride[first]));
        direct_a_.insert(name);
      }
      skip = fmt::format("if (!{}) ", flag);
    }
    // B's tile read in place (gemm_direct_b) where it is f32 with contiguous columns: for every
    // tap of the implicit-gemm convolution B is a row-major view of the relaid input (rows =
    // channels a plane apart), and packing it was ~21% of a 1x1 layer on 56 x 56 images. The same
    // run-time test, per tile, as for A. Not for a tile shared by blocks (gemm.tile's B, packed
    // once per launch): there the packed panels win, 1 thread, CPU time, gpt_mini's shapes
    // 0.92-0.97x oneDNN packed against 0.46-0.77x read in place.
    const bool direct_b = dst.layout == Layout::kPackedB && dst.edge_packed &&
                          dst.memo_key.empty() && c->src.is_global() &&
                          storage_type(c->src.buffer->dtype) == "float" &&
                          std::string(pack_type(dst.dtype)) == "float";
    if (direct_b) {
      std::string flag = fmt::format("_t{}_direct", name);
      emit(fmt::format("const bool {} = tessel_cpu::can_read_b_in_place<float, float>({}, {}, {});",
                       flag, v.stride[first], v.stride[second], cols));
      if (!claim) {
        emit(fmt::format("const float* _t{}_src = {};", name, v.base));
        emit(fmt::format("const int64_t _t{}_ldb = {};", name, v.stride[first]));
        direct_b_.insert(name);
      }
      skip = fmt::format("if (!{}) ", flag);
    }
    if (dst.memo_key.empty()) {
      emit(skip + fmt::format(fmt::runtime(call), name) + ";");
      return;
    }
    std::string index;
    for (const std::string& key : dst.memo_key)
      index = index.empty() ? expr_of(key)
                            : fmt::format("({}) * {} + {}", index, key_extent(key), expr_of(key));
    std::string lambda = fmt::format("[&]({}* _tdst) {{ {}; }}", pack_type(dst.dtype),
                                     fmt::format(fmt::runtime(call), "_tdst"));
    if (claim)
      emit(skip + fmt::format("{}_table.claim({}, {});", name, index, lambda));
    else
      emit(skip + fmt::format("{} = {}_table.get({}, {});", name, name, index, lambda));
  }

  std::string expr_of(const std::string& var) { return ident(var); }

  void gemm(const Gemm* g) override {
    std::vector<int64_t> a = tile_shape(g->a), b = tile_shape(g->b);
    std::string an = ident(g->a.buffer->name), bn = ident(g->b.buffer->name);
    std::string cn = ident(g->c.buffer->name);
    const BufferNode& acc = *g->c.buffer;
    bool edge = g->a.buffer->edge_packed && g->b.buffer->edge_packed;
    std::string m = edge ? fmt::format("_t{}_rows", an) : std::to_string(a[0]);
    std::string n = edge ? fmt::format("_t{}_cols", bn) : std::to_string(b[1]);
    std::string k = edge ? fmt::format("_t{}_cols", an) : std::to_string(a[1]);
    // The loop's first step writes acc where a clear before the loop was folded into it.
    auto first = first_step_writes_.find(g);
    std::string accumulate =
        first == first_step_writes_.end() ? "" : fmt::format(", {} != 0", expr(first->second->var));
    // The loop over acc after the K loop runs in the last step, per micro-tile, where the gemm
    // covers what it reads (find_fused_epilogues).
    if (auto fused = fused_gemms_.find(g); fused != fused_gemms_.end()) {
      const FusedEpilogue& f = *fused->second;
      const Parallel* p = f.epilogue;
      std::string covers =
          p->limits.empty()
              ? fmt::format("{} == {} && {} == {}", m, expr(p->extents[0]), n, expr(p->extents[1]))
              : fmt::format("({}) <= {} && ({}) <= {}", expr(p->limits[0]), m, expr(p->limits[1]),
                            n);
      emit(fmt::format("{} = {} + 1 == ({}) && {};", f.flag, expr(f.loop->var),
                       expr(f.loop->extent), covers));
      if (accumulate.empty()) accumulate = ", true";
      accumulate += ", " + f.lambda;
    }
    std::string packed = fmt::format("tessel_cpu::gemm_packed<{}>({}, {}, {}, {}, {}, {}, {}{});",
                                     pack_type(g->a.buffer->dtype), an, bn, cn, acc.const_dim(1), m,
                                     n, k, accumulate);
    if (edge && direct_b_.count(bn)) {
      // B read in place; A packed, or read in place too where it may be.
      std::string a_args =
          direct_a_.count(an)
              ? fmt::format("_t{}_direct ? nullptr : {}, _t{}_src, _t{}_lda", an, an, an, an)
              : fmt::format("{}, nullptr, 0", an);
      emit(
          fmt::format("if (_t{}_direct) tessel_cpu::gemm_direct_b({}, _t{}_src, _t{}_ldb, {}, {}, "
                      "{}, {}, {}{});",
                      bn, a_args, bn, bn, cn, acc.const_dim(1), m, n, k, accumulate));
      emit("else");
    }
    if (!edge || !direct_a_.count(an)) {
      emit(packed);
    } else {
      emit(fmt::format(
          "if (_t{}_direct) tessel_cpu::gemm_direct_a<{}>(_t{}_src, _t{}_lda, {}, {}, {}, {}, {}, "
          "{}{});",
          an, pack_type(g->a.buffer->dtype), an, an, bn, cn, acc.const_dim(1), m, n, k,
          accumulate));
      emit("else " + packed);
    }
    // The gemm writes m x n of acc: at an edge block (or a gemm smaller than acc) the rest of acc
    // is cleared as the dropped clear would have, since an epilogue may read all of it.
    // Where the statements after the loop read acc only within limits known here (gemm.tile's
    // epilogue stops at C's edge, which is A's and B's), the clear runs only for a block whose
    // reads reach past what the gemm wrote: clearing the 128 unused columns of a 192 x 256 acc
    // at N = 384 or 128 was ~7% of a 768x128x128 f32 gemm (perf, rep stos).
    if (first != first_step_writes_.end() &&
        (edge || a[0] != acc.const_dim(0) || b[1] != acc.const_dim(1))) {
      std::string when = fmt::format("{} == 0", expr(first->second->var));
      auto limits = acc_read_limits_.find(g);
      if (limits != acc_read_limits_.end() && limits->second.size() == 2)
        when += fmt::format(" && ({} > {} || {} > {})", expr(limits->second[0]), m,
                            expr(limits->second[1]), n);
      emit(fmt::format("if ({}) tessel_cpu::clear_outside({}, {}, {}, {}, {}, {});", when, cn,
                       acc.const_dim(1), acc.const_dim(0), acc.const_dim(1), m, n));
    }
  }

  std::vector<Buffer> tiles_, shared_tiles_;
  std::set<std::string> direct_a_;  // packed A tiles with a read-in-place alternative in scope
  std::set<std::string> direct_b_;  // packed B tiles with a read-in-place alternative in scope
  // Clears folded into the K loop that follows them (find_folded_clears), and the gemm in that
  // loop whose first step writes acc.
  std::map<const Parallel*, const For*> folded_clears_;
  std::map<const Gemm*, const For*> first_step_writes_;
  // For such a gemm, the limits of the epilogue's reads of acc (read_limits); empty if unknown.
  std::map<const Gemm*, std::vector<Expr>> acc_read_limits_;
  std::map<std::string, Expr> loop_extents_;
  // Epilogues run in their K loop's last step (find_fused_epilogues), by loop, gemm and loop
  // over acc.
  std::vector<std::unique_ptr<FusedEpilogue>> fused_;
  std::map<const For*, const FusedEpilogue*> fused_loops_;
  std::map<const Gemm*, const FusedEpilogue*> fused_gemms_;
  std::map<const Parallel*, const FusedEpilogue*> fused_parallels_;
};

}  // namespace

std::string render_cpu(const Kernel& lowered) {
  return CpuRenderer().render(lowered);
}

}  // namespace tessel::tile
