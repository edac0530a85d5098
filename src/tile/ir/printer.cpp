// Printing the tile IR as .tile text (see printer.h).
#include "tile/ir/printer.h"

#include <cmath>

namespace tessel::tile {

namespace {

// Binding strength of an expression's outermost operator, for minimal parentheses.
int precedence(const Expr& e) {
  if (const Binary* b = e->as<Binary>()) {
    switch (b->op) {
      case BinaryOp::kOr:
        return 1;
      case BinaryOp::kAnd:
        return 2;
      case BinaryOp::kEq:
      case BinaryOp::kNe:
        return 3;
      case BinaryOp::kLt:
      case BinaryOp::kLe:
      case BinaryOp::kGt:
      case BinaryOp::kGe:
        return 4;
      case BinaryOp::kAdd:
      case BinaryOp::kSub:
        return 5;
      case BinaryOp::kMul:
      case BinaryOp::kDiv:
      case BinaryOp::kMod:
        return 6;
      default:
        return 9;  // min, max, cdiv print as calls
    }
  }
  if (e->as<Unary>()) return 7;
  if (const FloatImm* f = e->as<FloatImm>(); f && std::signbit(f->value)) return 7;
  if (const IntImm* i = e->as<IntImm>(); i && i->value < 0) return 7;
  return 9;
}

std::string float_literal(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string expr_text(const Expr& e);

std::string operand(const Expr& e, int min_precedence) {
  std::string s = expr_text(e);
  return precedence(e) < min_precedence ? fmt::format("({})", s) : s;
}

std::string list(const std::vector<Expr>& es) {
  std::string out;
  for (size_t i = 0; i < es.size(); ++i) {
    if (i) out += ", ";
    out += expr_text(es[i]);
  }
  return out;
}

std::string expr_text(const Expr& e) {
  switch (e->kind) {
    case NodeKind::kIntImm: {
      const IntImm* i = e->as<IntImm>();
      if (i->type.is_bool()) return i->value ? "true" : "false";
      return std::to_string(i->value);
    }
    case NodeKind::kFloatImm:
      return float_literal(e->as<FloatImm>()->value);
    case NodeKind::kVar:
      return e->as<Var>()->name;
    case NodeKind::kBinary: {
      const Binary* b = e->as<Binary>();
      if (is_function_style(b->op))
        return fmt::format("{}({}, {})", binary_op_name(b->op), expr_text(b->a), expr_text(b->b));
      int p = precedence(e);
      return fmt::format("{} {} {}", operand(b->a, p), binary_op_name(b->op), operand(b->b, p + 1));
    }
    case NodeKind::kUnary: {
      const Unary* u = e->as<Unary>();
      return fmt::format("{}{}", u->op == UnaryOp::kNeg ? "-" : "!", operand(u->a, 8));
    }
    case NodeKind::kCall: {
      const Call* c = e->as<Call>();
      return fmt::format("{}({})", math_fn_name(c->fn), list(c->args));
    }
    case NodeKind::kCast: {
      const Cast* c = e->as<Cast>();
      return fmt::format("{}({})", c->type.name(), expr_text(c->a));
    }
    case NodeKind::kSelect: {
      const Select* s = e->as<Select>();
      return fmt::format("select({}, {}, {})", expr_text(s->cond), expr_text(s->t),
                         expr_text(s->f));
    }
    case NodeKind::kLoad: {
      const Load* l = e->as<Load>();
      std::string access = fmt::format("{}[{}]", l->buffer->name, list(l->indices));
      if (!l->predicate) return access;
      return fmt::format("masked({}, {}, other={})", access, expr_text(l->predicate),
                         expr_text(l->other));
    }
    default:
      TESSEL_CHECK(false, "not an expression: {}", node_kind_name(e->kind));
  }
  return "";
}

std::string tile_text(const TileRef& t) {
  return fmt::format("{}{}{}", t.buffer->name, t.transposed ? ".T" : "",
                     t.is_global() ? shape_string(t.origin) : "");
}

class StmtPrinter {
 public:
  std::string out;

  void print(const Stmt& s, int indent) {
    std::string pad(indent * 2, ' ');
    switch (s->kind) {
      case NodeKind::kSeq:
        for (const Stmt& c : s->as<Seq>()->stmts)
          print(c, indent);
        return;
      case NodeKind::kGrid: {
        const Grid* g = s->as<Grid>();
        out +=
            fmt::format("{}grid ({}) as ({}){} {{\n", pad, list(g->extents), list(g->vars),
                        g->threads.empty() ? "" : fmt::format(" threads ({})", list(g->threads)));
        print(g->body, indent + 1);
        out += pad;
        out += "}\n";
        return;
      }
      case NodeKind::kAlloc: {
        const BufferNode& b = *s->as<Alloc>()->buffer;
        out += fmt::format("{}{} = {}<{}>{}", pad, b.name, scope_name(b.scope), b.dtype.name(),
                           shape_string(b.shape));
        if (b.layout != Layout::kRowMajor)
          out +=
              fmt::format("  layout {}{}{}", layout_name(b.layout),
                          b.packed_transposed ? " transposed" : "", b.edge_packed ? " edge" : "");
        if (!b.memo_key.empty())
          out += fmt::format("  shared by blocks per ({})", fmt::join(b.memo_key, ", "));
        out += "\n";
        return;
      }
      case NodeKind::kLet: {
        const Let* l = s->as<Let>();
        out += fmt::format("{}{} = {}\n", pad, expr_text(l->var), expr_text(l->value));
        return;
      }
      case NodeKind::kFor: {
        const For* f = s->as<For>();
        if (f->for_kind == ForKind::kPipelined)
          out += fmt::format("{}for {} in pipelined({}, stages={}) {{\n", pad, expr_text(f->var),
                             expr_text(f->extent), expr_text(f->stages));
        else
          out += fmt::format("{}for {} in range({}) {{\n", pad, expr_text(f->var),
                             expr_text(f->extent));
        print(f->body, indent + 1);
        out += pad;
        out += "}\n";
        return;
      }
      case NodeKind::kParallel: {
        const Parallel* p = s->as<Parallel>();
        out += fmt::format("{}parallel ({}) in [{}]", pad, list(p->vars), list(p->extents));
        if (!p->limits.empty()) out += fmt::format(" limit [{}]", list(p->limits));
        out += " {\n";
        print(p->body, indent + 1);
        out += pad;
        out += "}\n";
        return;
      }
      case NodeKind::kIfThenElse: {
        const IfThenElse* i = s->as<IfThenElse>();
        out += fmt::format("{}if {} {{\n", pad, expr_text(i->cond));
        print(i->then_case, indent + 1);
        if (i->else_case) {
          out += pad;
          out += "} else {\n";
          print(i->else_case, indent + 1);
        }
        out += pad;
        out += "}\n";
        return;
      }
      case NodeKind::kStore: {
        const Store* st = s->as<Store>();
        out += fmt::format("{}{}[{}] = {}", pad, st->buffer->name, list(st->indices),
                           expr_text(st->value));
        if (st->predicate) out += fmt::format("  where {}", expr_text(st->predicate));
        out += "\n";
        return;
      }
      case NodeKind::kCopy: {
        const Copy* c = s->as<Copy>();
        out += fmt::format("{}copy({}, {}", pad, tile_text(c->src), tile_text(c->dst));
        if (c->pad) out += ", pad=" + expr_text(c->pad);
        out += ")\n";
        return;
      }
      case NodeKind::kGemm: {
        const Gemm* g = s->as<Gemm>();
        out += fmt::format("{}gemm({}, {}, {})\n", pad, tile_text(g->a), tile_text(g->b),
                           tile_text(g->c));
        return;
      }
      case NodeKind::kFill: {
        const Fill* f = s->as<Fill>();
        out += fmt::format("{}fill({}, {})\n", pad, f->dst->name, expr_text(f->value));
        return;
      }
      case NodeKind::kReduce: {
        const Reduce* r = s->as<Reduce>();
        out += fmt::format("{}reduce({}, {}, axis={}, op={})\n", pad, r->src->name, r->dst->name,
                           r->axis, reduce_op_name(r->op));
        return;
      }
      case NodeKind::kBarrier:
        out += fmt::format("{}barrier()\n", pad);
        return;
      default:
        TESSEL_CHECK(false, "not a statement: {}", node_kind_name(s->kind));
    }
  }
};

}  // namespace

std::string shape_string(const std::vector<Expr>& shape) {
  return fmt::format("[{}]", list(shape));
}

std::string to_string(const Expr& e) {
  return expr_text(e);
}

std::string to_string(const Stmt& s, int indent) {
  StmtPrinter p;
  p.print(s, indent);
  return p.out;
}

std::string to_string(const Kernel& k) {
  std::string out = "kernel " + k.name;
  if (!k.params.empty()) {
    out += "<";
    for (size_t i = 0; i < k.params.size(); ++i) {
      const Param& p = k.params[i];
      out += i ? ", " : "";
      out += p.is_dtype ? fmt::format("{}: dtype = {}", p.name, p.dtype_value.name())
                        : fmt::format("{} = {}", p.name, p.int_value);
    }
    out += ">";
  }
  out += "(";
  for (size_t i = 0; i < k.args.size(); ++i) {
    const KernelArg& a = k.args[i];
    out += i ? ", " : "";
    if (a.is_tensor())
      out += fmt::format("{}: {}{}", a.name, a.tensor->dtype.name(), shape_string(a.tensor->shape));
    else
      out += fmt::format("{}: {}", a.name, a.scalar->type.name());
  }
  out += ")";
  for (const TargetDefaults& t : k.target_defaults) {
    out += fmt::format("\n    on {} <", t.target);
    for (size_t i = 0; i < t.values.size(); ++i)
      out += fmt::format("{}{} = {}", i ? ", " : "", t.values[i].first, t.values[i].second);
    out += ">";
  }
  out += " {\n";
  StmtPrinter p;
  p.print(k.body, 1);
  out += p.out;
  out += "}\n";
  return out;
}

}  // namespace tessel::tile
