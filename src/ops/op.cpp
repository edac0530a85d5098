// The operator registry and the checks every op call goes through (see op.h).
#include "ops/op.h"

#include <algorithm>
#include <unordered_map>

#include "ops/op_scope.h"

namespace tessel::ops {

int64_t Attrs::get_int(const std::string& name, int64_t fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  if (const double* d = std::get_if<double>(&it->second)) return static_cast<int64_t>(*d);
  if (const int64_t* i = std::get_if<int64_t>(&it->second)) return *i;
  return fallback;
}

double Attrs::get_double(const std::string& name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  if (const double* d = std::get_if<double>(&it->second)) return *d;
  if (const int64_t* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  return fallback;
}

std::vector<int64_t> Attrs::get_ints(const std::string& name, std::vector<int64_t> fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  if (const auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  if (const int64_t* i = std::get_if<int64_t>(&it->second)) return {*i};
  return fallback;
}

std::vector<double> Attrs::get_doubles(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return {};
  if (const auto* v = std::get_if<std::vector<double>>(&it->second)) return *v;
  if (const auto* v = std::get_if<std::vector<int64_t>>(&it->second))
    return std::vector<double>(v->begin(), v->end());
  return {get_double(name, 0.0)};
}

std::string Attrs::to_string() const {
  std::string out;
  for (const auto& [name, value] : values_) {
    if (!out.empty()) out += ", ";
    out += name + "=";
    if (const int64_t* i = std::get_if<int64_t>(&value))
      out += std::to_string(*i);
    else if (const double* d = std::get_if<double>(&value))
      out += fmt::format("{}", *d);
    else if (const auto* ints = std::get_if<std::vector<int64_t>>(&value))
      out += shape_string(*ints);
    else
      out += fmt::format("[{}]", fmt::join(std::get<std::vector<double>>(value), ", "));
  }
  return out;
}

std::string shapes_string(const std::vector<TensorMeta>& inputs) {
  std::string out;
  for (const TensorMeta& m : inputs) {
    if (!out.empty()) out += ", ";
    out += shape_string(m.shape) + " " + dtype_name(m.dtype);
  }
  return out;
}

namespace {

// Backward rules see no empty tensors, as forwards see no empty outputs (run()): an input with
// no elements gets an empty gradient, and when the output has none every input's gradient is
// zero (nothing downstream depends on it).
using BackwardFn = std::function<Expected<std::vector<Tensor>>(const BackwardArgs&)>;
BackwardFn with_empty_gradients(BackwardFn rule) {
  return [rule = std::move(rule)](const BackwardArgs& b) -> Expected<std::vector<Tensor>> {
    const bool empty_output = b.grad_output.numel() == 0;
    BackwardArgs rest = b;
    bool any_left = false, any_empty = empty_output;
    for (size_t i = 0; i < b.input_meta.size(); ++i) {
      if (shape_numel(b.input_meta[i].shape) == 0 || empty_output) {
        any_empty = any_empty || b.needs_grad[i];
        rest.needs_grad[i] = false;
      }
      any_left = any_left || rest.needs_grad[i];
    }
    if (!any_empty) return rule(b);
    std::vector<Tensor> grads(b.input_meta.size());
    if (any_left) {
      TESSEL_ASSIGN_OR_RETURN(grads, rule(rest));
    }
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!b.needs_grad[i] || rest.needs_grad[i]) continue;
      TESSEL_ASSIGN_OR_RETURN(grads[i], Tensor::zeros(b.input_meta[i].shape, b.input_meta[i].dtype,
                                                      b.grad_output.device()));
    }
    return grads;
  };
}

}  // namespace

const std::vector<OpDef>& all_ops() {
  static const std::vector<OpDef> ops = [] {
    std::vector<OpDef> list;
    add_elementwise_ops(list);
    add_matmul_ops(list);
    add_reduce_ops(list);
    add_nn_ops(list);
    add_view_ops(list);
    add_mask_ops(list);
    add_conv_ops(list);
    add_batch_norm_ops(list);
    add_math_ops(list);
    add_index_ops(list);
    add_norm_ops(list);
    add_pool_ops(list);
    add_attention_ops(list);
    add_conv_transpose_ops(list);
    add_conv1d_ops(list);
    add_integer_ops(list);
    add_conv3d_ops(list);  // after add_conv_ops: it runs conv2d
    for (OpDef& op : list) {
      TESSEL_CHECK(op.infer && op.forward && op.reference, "op '{}' is missing a part", op.name);
      op.save_inputs.resize(op.arity, false);
      op.differentiable.resize(op.arity, true);
      if (op.backward) op.backward = with_empty_gradients(std::move(op.backward));
    }
    return list;
  }();
  return ops;
}

Expected<const OpDef*> find_op(std::string_view name) {
  // Every typed function (ops::add, ...) looks its op up by name on each call: a hash, not a scan.
  static const std::unordered_map<std::string_view, const OpDef*> by_name = [] {
    std::unordered_map<std::string_view, const OpDef*> m;
    for (const OpDef& op : all_ops())
      m.emplace(op.name, &op);
    return m;
  }();
  if (auto it = by_name.find(name); it != by_name.end()) return it->second;
  std::string known;
  for (const OpDef& op : all_ops())
    known += (known.empty() ? "" : ", ") + op.name;
  return not_found("no op named '{}' (known: {})", name, known);
}

Expected<TensorMeta> infer(const OpDef& op, const std::vector<TensorMeta>& inputs,
                           const Attrs& attrs) {
  if (static_cast<int>(inputs.size()) != op.arity)
    return invalid_argument("{}: takes {} inputs, got {}", op.name, op.arity, inputs.size());
  for (const auto& [name, value] : attrs.values()) {
    if (std::find(op.attrs.begin(), op.attrs.end(), name) == op.attrs.end()) {
      std::string allowed;
      for (const std::string& a : op.attrs)
        allowed += (allowed.empty() ? "" : ", ") + a;
      return invalid_argument("{}: unknown attribute '{}' (allowed: {})", op.name, name,
                              allowed.empty() ? "none" : allowed);
    }
  }
  return op.infer(inputs, attrs);
}

namespace {

// The innermost ops::run on this thread (op_scope.h).
thread_local const char* g_current_op = nullptr;

Expected<Tensor> run_unscoped(const OpDef& op, const std::vector<Tensor>& inputs,
                              const Attrs& attrs) {
  std::vector<TensorMeta> metas;
  metas.reserve(inputs.size());
  Device* device = nullptr;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined()) return invalid_argument("{}: input {} is undefined", op.name, i);
    if (device && t.device() != device)
      return invalid_argument("{}: inputs on {} and {}; move them to one device first", op.name,
                              device->id(), t.device()->id());
    device = t.device();
    metas.push_back(TensorMeta{t.shape(), t.dtype()});
  }
  TESSEL_ASSIGN_OR_RETURN(TensorMeta out, infer(op, metas, attrs));
  // An output with no elements (a 0-sized dimension) needs no kernel: PyTorch's empty result.
  if (!op.is_view && shape_numel(out.shape) == 0)
    return Tensor::empty(out.shape, out.dtype, device);
  return op.forward(inputs, attrs, out);
}

}  // namespace

const char* current_op() {
  return g_current_op;
}

Expected<Tensor> run(const OpDef& op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  const char* outer = g_current_op;
  g_current_op = op.name.c_str();
  Expected<Tensor> out = run_unscoped(op, inputs, attrs);
  g_current_op = outer;
  return out;
}

Expected<Tensor> run(std::string_view name, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  TESSEL_ASSIGN_OR_RETURN(const OpDef* op, find_op(name));
  return run(*op, inputs, attrs);
}

}  // namespace tessel::ops
