// Launch argument binding (see bind.h).
#include "tile/run/bind.h"

#include <set>

#include "tile/ir/printer.h"
#include "tile/ir/visitor.h"

namespace tessel::tile {

Expected<int64_t> eval_int(const Expr& e, const std::map<std::string, int64_t>& env) {
  if (auto c = const_int(e)) return *c;
  if (const Var* v = e->as<Var>()) {
    auto it = env.find(v->name);
    if (it == env.end()) return internal_error("no value for '{}'", v->name);
    return it->second;
  }
  if (const Cast* c = e->as<Cast>()) return eval_int(c->a, env);
  const Binary* b = e->as<Binary>();
  if (!b) return internal_error("cannot evaluate {} on the host", to_string(e));
  TESSEL_ASSIGN_OR_RETURN(int64_t x, eval_int(b->a, env));
  TESSEL_ASSIGN_OR_RETURN(int64_t y, eval_int(b->b, env));
  switch (b->op) {
    case BinaryOp::kAdd:
      return x + y;
    case BinaryOp::kSub:
      return x - y;
    case BinaryOp::kMul:
      return x * y;
    case BinaryOp::kMin:
      return std::min(x, y);
    case BinaryOp::kMax:
      return std::max(x, y);
    case BinaryOp::kDiv:
    case BinaryOp::kMod:
    case BinaryOp::kCDiv:
      if (y == 0) return invalid_argument("division by zero in {}", to_string(e));
      return b->op == BinaryOp::kDiv ? x / y : b->op == BinaryOp::kMod ? x % y : (x + y - 1) / y;
    default:
      return internal_error("cannot evaluate {} on the host", to_string(e));
  }
}

std::vector<bool> used_arguments(const Kernel& k) {
  struct Uses : IRVisitor {
    std::set<std::string> names;
    using IRVisitor::visit_node;
    void visit_node(const Load* n) override {
      names.insert(n->buffer->name);
      IRVisitor::visit_node(n);
    }
    void visit_node(const Store* n) override {
      names.insert(n->buffer->name);
      IRVisitor::visit_node(n);
    }
    void visit_node(const Copy* n) override {
      names.insert(n->src.buffer->name);
      names.insert(n->dst.buffer->name);
      IRVisitor::visit_node(n);
    }
    void visit_node(const Var* v) override { names.insert(v->name); }
  } uses;
  uses.visit(k.body);
  std::vector<bool> used;
  for (const KernelArg& a : k.args)
    used.push_back(uses.names.count(a.name) > 0);
  return used;
}

Expected<BoundLaunch> bind_launch(const Kernel& k, const std::vector<bool>& used,
                                  const std::vector<LaunchArg>& args) {
  return bind_launch(k, used, args, kernel_slots(k));
}

namespace {

// The first tensor argument before `before` whose shape names `size`: the one that gave the size
// its value (for an error message).
std::string first_binder(const Kernel& k, size_t before, const std::string& size) {
  for (size_t a = 0; a < before; ++a) {
    if (!k.args[a].is_tensor()) continue;
    for (const Expr& d : k.args[a].tensor->shape)
      if (const Var* v = d->as<Var>(); v && v->name == size) return k.args[a].name;
  }
  return "?";
}

}  // namespace

Expected<BoundLaunch> bind_launch(const Kernel& k, const std::vector<bool>& used,
                                  const std::vector<LaunchArg>& args,
                                  const std::vector<ArgSlot>& slots) {
  if (args.size() != k.args.size()) {
    std::string names;
    for (const KernelArg& a : k.args)
      names += (names.empty() ? "" : ", ") + a.name;
    return invalid_argument("kernel '{}' takes {} arguments ({}), got {}", k.name, k.args.size(),
                            names, args.size());
  }
  std::map<std::string, int64_t> env;
  BoundLaunch out;
  // Sizes first: strides and scalars need no order, but every size must be known before slots.
  for (size_t a = 0; a < args.size(); ++a) {
    const KernelArg& ka = k.args[a];
    if (!ka.is_tensor()) {
      if (std::holds_alternative<TensorArg>(args[a]))
        return invalid_argument(
            "kernel '{}': argument {} ('{}') is a scalar of type {}; got a tensor", k.name, a,
            ka.name, ka.scalar->type.name());
      if (ka.scalar->type.is_int()) {
        if (!std::holds_alternative<int64_t>(args[a]))
          return invalid_argument(
              "kernel '{}': argument {} ('{}') is an integer; got a floating-point value", k.name,
              a, ka.name);
        env[ka.name] = std::get<int64_t>(args[a]);
      }
      continue;
    }
    const TensorArg* t = std::get_if<TensorArg>(&args[a]);
    if (!t)
      return invalid_argument("kernel '{}': argument {} ('{}') is a tensor; got a scalar", k.name,
                              a, ka.name);
    const BufferNode& b = *ka.tensor;
    if (DType(t->dtype) != b.dtype)
      return invalid_argument("kernel '{}': argument '{}' must hold {}, got {}", k.name, ka.name,
                              b.dtype.name(), scalar_type_name(t->dtype));
    if (static_cast<int>(t->shape.size()) != b.rank())
      return invalid_argument("kernel '{}': argument '{}' must have {} dimensions {}, got {}",
                              k.name, ka.name, b.rank(), shape_string(b.shape), t->shape.size());
    if (!t->strides.empty() && t->strides.size() != t->shape.size())
      return invalid_argument("kernel '{}': argument '{}' has {} strides for {} dimensions", k.name,
                              ka.name, t->strides.size(), t->shape.size());
    if (!t->data && used[a])
      return invalid_argument("kernel '{}': argument '{}' has no data", k.name, ka.name);
    if (t->offset < 0)
      return invalid_argument("kernel '{}': argument '{}' has negative offset {}", k.name, ka.name,
                              t->offset);
    for (int d = 0; d < b.rank(); ++d) {
      int64_t n = t->shape[d];
      if (n < 0)
        return invalid_argument("kernel '{}': argument '{}' has negative size {}", k.name, ka.name,
                                n);
      if (auto c = const_int(b.shape[d])) {
        if (*c != n)
          return invalid_argument("kernel '{}': dimension {} of '{}' must be {}, got {}", k.name, d,
                                  ka.name, *c, n);
        continue;
      }
      const std::string& size = b.shape[d]->as<Var>()->name;
      auto [it, fresh] = env.emplace(size, n);
      if (!fresh && it->second != n)
        return invalid_argument("kernel '{}': size {} is {} in '{}' but {} in '{}'", k.name, size,
                                it->second, first_binder(k, a + 1, size), n, ka.name);
    }
  }
  out.slots.reserve(slots.size());
  for (const ArgSlot& s : slots) {
    tessel_cpu::Arg v{};
    switch (s.kind) {
      case ArgSlot::Kind::kData:
        v.ptr = std::get<TensorArg>(args[s.arg]).data;
        break;
      case ArgSlot::Kind::kOffset:
        v.i64 = std::get<TensorArg>(args[s.arg]).offset;
        break;
      case ArgSlot::Kind::kStride: {
        const TensorArg& t = std::get<TensorArg>(args[s.arg]);
        if (!t.strides.empty()) {
          v.i64 = t.strides[s.dim];
        } else {
          v.i64 = 1;
          for (size_t e = s.dim + 1; e < t.shape.size(); ++e)
            v.i64 *= t.shape[e];
        }
        break;
      }
      case ArgSlot::Kind::kScalar: {
        const LaunchArg& x = args[s.arg];
        double f = std::holds_alternative<double>(x) ? std::get<double>(x)
                                                     : static_cast<double>(std::get<int64_t>(x));
        if (s.type == kF32)
          v.f32 = static_cast<float>(f);
        else if (s.type == DType(ScalarType::kF64))
          v.f64 = f;
        else if (s.type == kI32)
          v.i32 = static_cast<int32_t>(std::get<int64_t>(x));
        else if (s.type.is_int())
          v.i64 = std::get<int64_t>(x);
        else
          return unimplemented("kernel '{}': scalar argument '{}' of type {}", k.name, s.name,
                               s.type.name());
        break;
      }
      case ArgSlot::Kind::kSize:
        v.i64 = env.at(s.name);
        break;
    }
    out.slots.push_back(v);
  }
  const Grid* g = k.grid();
  for (size_t d = 0; d < g->extents.size(); ++d) {
    TESSEL_ASSIGN_OR_RETURN(out.grid[d], eval_int(g->extents[d], env));
    if (out.grid[d] < 0) out.grid[d] = 0;
  }
  out.blocks = out.grid[0] * out.grid[1] * out.grid[2];
  return out;
}

}  // namespace tessel::tile
