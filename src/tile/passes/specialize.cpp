// Parameter substitution (see specialize.h).
#include "tile/passes/specialize.h"

#include <charconv>

#include "tile/ir/visitor.h"
#include "tile/passes/simplify.h"

namespace tessel::tile {

namespace {

class Substitute : public IRMutator {
 public:
  Substitute(const std::map<std::string, int64_t>& ints, const std::map<std::string, DType>& dtypes)
      : ints_(ints), dtypes_(dtypes) {}

  DType resolve(const DType& t) const {
    if (!t.is_param()) return t;
    return dtypes_.at(t.param_name());
  }

  Buffer mutate_buffer(const Buffer& b) override {
    auto it = buffers_.find(b.get());
    if (it != buffers_.end()) return it->second;
    std::vector<Expr> shape;
    for (const Expr& d : b->shape) shape.push_back(simplify(mutate(d)));
    Buffer nb = make_buffer(b->name, resolve(b->dtype), b->scope, std::move(shape), b->loc);
    buffers_[b.get()] = nb;
    return nb;
  }

 protected:
  using IRMutator::mutate_node;

  Expr mutate_node(const Var* n, const Expr& self) override {
    if (n->var_kind == VarKind::kParam) return IntImm::make(ints_.at(n->name), kI64, n->loc);
    if (n->type.is_param()) return Var::make(n->name, resolve(n->type), n->var_kind, n->loc);
    return self;
  }
  Expr mutate_node(const IntImm* n, const Expr& self) override {
    if (n->type.is_param()) return IntImm::make(n->value, resolve(n->type), n->loc);
    return self;
  }
  Expr mutate_node(const FloatImm* n, const Expr& self) override {
    if (n->type.is_param()) return FloatImm::make(n->value, resolve(n->type), n->loc);
    return self;
  }
  Expr mutate_node(const Cast* n, const Expr& self) override {
    Expr a = mutate(n->a);
    if (a == n->a && !n->type.is_param()) return self;
    return Cast::make(resolve(n->type), a, n->loc);
  }

 private:
  const std::map<std::string, int64_t>& ints_;
  const std::map<std::string, DType>& dtypes_;
  std::map<const BufferNode*, Buffer> buffers_;
};

std::string param_names(const Kernel& k) {
  std::string out;
  for (const Param& p : k.params) out += (out.empty() ? "" : ", ") + p.name;
  return out.empty() ? "none" : out;
}

}  // namespace

Expected<Kernel> specialize(const Kernel& kernel, const std::map<std::string, std::string>& user_overrides,
                            const std::string& target) {
  TESSEL_CHECK(!kernel.specialized, "kernel '{}' specialised twice", kernel.name);
  for (const auto& [name, value] : user_overrides)
    if (!kernel.find_param(name))
      return error_at(kernel.loc, "kernel '{}' has no parameter '{}' (its parameters: {})", kernel.name,
                      name, param_names(kernel));
  // Target defaults, least specific first, then the caller's overrides.
  std::map<std::string, std::string> overrides;
  bool gpu = target == "opencl" || target == "cuda";
  for (const char* level : {"gpu", "target"})
    for (const TargetDefaults& t : kernel.target_defaults)
      if ((std::string(level) == "gpu" && gpu && t.target == "gpu") ||
          (std::string(level) == "target" && t.target == target))
        for (const auto& [name, value] : t.values) overrides[name] = value;
  for (const auto& [name, value] : user_overrides) overrides[name] = value;

  Kernel out = kernel;
  std::map<std::string, int64_t> ints;
  std::map<std::string, DType> dtypes;
  for (Param& p : out.params) {
    auto it = overrides.find(p.name);
    if (it != overrides.end()) {
      const std::string& text = it->second;
      if (p.is_dtype) {
        auto t = scalar_type_from_name(text);
        if (!t || !same_dtype_class(DType(*t), p.dtype_value))
          return error_at(p.loc, "parameter '{}' is {}; got '{}'", p.name,
                          dtype_class_name(p.dtype_value), text);
        p.dtype_value = DType(*t);
      } else {
        int64_t v = 0;
        auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc() || ptr != text.data() + text.size())
          return error_at(p.loc, "parameter '{}' is an integer; got '{}'", p.name, text);
        p.int_value = v;
      }
    }
    if (p.is_dtype) dtypes[p.name] = p.dtype_value;
    else ints[p.name] = p.int_value;
  }

  Substitute sub(ints, dtypes);
  for (KernelArg& a : out.args) {
    if (a.is_tensor()) a.tensor = sub.mutate_buffer(a.tensor);
    else a.scalar = sub.mutate(a.scalar);
  }
  out.body = simplify(sub.mutate(kernel.body));
  out.specialized = true;
  return out;
}

}  // namespace tessel::tile
