// The operator registry. Each op is declared once, as an OpDef: its name and arity, the attrs it
// takes, shape/dtype inference (errors name the op and the shapes), the forward implementation
// (tile kernels launched on the inputs' device, or a view), the backward rule, which tensors
// backward needs (so the tape keeps only those), and a plain-C++ reference in double that only
// tests use.
//
//   TESSEL_ASSIGN_OR_RETURN(Tensor y, ops::run("softmax", {x}));
//   TESSEL_ASSIGN_OR_RETURN(Tensor s, ops::run("sum", {x}, Attrs().set("axes", {0}).set("keepdim",
//   1)));
//
// ops.h has typed functions for each op (ops::add(a, b)); autograd/ records run() calls on a tape
// and calls `backward` in reverse. docs/DESIGN.md, "Operators and autograd", says how to add one.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "runtime/tensor.h"
#include "support/status.h"

namespace tessel::ops {

// Named attributes of one op call: integers, reals, integer lists, real lists.
class Attrs {
 public:
  using Value = std::variant<int64_t, double, std::vector<int64_t>, std::vector<double>>;
  Attrs& set(const std::string& name, int64_t v) { return put(name, v); }
  Attrs& set(const std::string& name, int v) { return put(name, static_cast<int64_t>(v)); }
  Attrs& set(const std::string& name, double v) { return put(name, v); }
  Attrs& set(const std::string& name, std::vector<int64_t> v) { return put(name, std::move(v)); }
  // Not an overload of set(): `set("axes", {0, 2})` would be ambiguous.
  Attrs& set_reals(const std::string& name, std::vector<double> v) {
    return put(name, std::move(v));
  }

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_double(const std::string& name, double fallback) const;
  std::vector<int64_t> get_ints(const std::string& name, std::vector<int64_t> fallback = {}) const;
  std::vector<double> get_doubles(const std::string& name) const;  // empty when absent
  const std::map<std::string, Value>& values() const { return values_; }
  std::string to_string() const;

 private:
  Attrs& put(const std::string& name, Value v) {
    values_[name] = std::move(v);
    return *this;
  }
  std::map<std::string, Value> values_;
};

struct TensorMeta {
  Shape shape;
  DType dtype = DType::kF32;
};

// A tensor of the reference implementations: row-major values in double (integer inputs such as
// class targets too).
struct RefTensor {
  Shape shape;
  std::vector<double> values;
};

// What a backward rule receives. Inputs and the output are defined only where the op's
// save_inputs / save_output asked for them; input_meta is always there.
struct BackwardArgs {
  std::vector<Tensor> inputs;
  Tensor output;
  std::vector<TensorMeta> input_meta;
  const Attrs& attrs;
  Tensor grad_output;            // same shape as the output
  std::vector<bool> needs_grad;  // per input
  // Per input, where defined: the leaf gradient this input's gradient is headed for (contiguous,
  // the input's shape and dtype). A rule may add its gradient into it in place (a gemm with
  // beta = 1) and return an undefined tensor for that input, which saves a temporary, an add and
  // a copy per parameter; a rule that returns a tensor anyway is still correct.
  std::vector<Tensor> grad_into;
};

struct OpDef {
  std::string name;
  int arity = 1;
  std::vector<std::string> attrs;  // the attribute names it accepts
  // Output shape and dtype; an error says which op and which shapes.
  std::function<Expected<TensorMeta>(const std::vector<TensorMeta>&, const Attrs&)> infer;
  // Computes the output (already checked by infer) on the inputs' device.
  std::function<Expected<Tensor>(const std::vector<Tensor>&, const Attrs&, const TensorMeta&)>
      forward;
  // Gradients of the inputs (undefined where needs_grad is false or the input has none).
  // Empty: the op is not differentiable.
  std::function<Expected<std::vector<Tensor>>(const BackwardArgs&)> backward;
  std::vector<bool> save_inputs;     // which inputs backward reads (default: none)
  bool save_output = false;          // whether backward reads the output
  std::vector<bool> differentiable;  // inputs that can have gradients (default: all)
  // The plain-C++ reference, in double. Tests only.
  std::function<RefTensor(const std::vector<RefTensor>&, const Attrs&)> reference;
  bool is_view = false;  // forward returns a view of input 0, launching nothing
};

// Every registered op, in registration order.
const std::vector<OpDef>& all_ops();
// The op called `name`; not_found lists the known ones.
Expected<const OpDef*> find_op(std::string_view name);

// Checks arity, attrs, devices and shapes, then runs the op's forward.
Expected<Tensor> run(const OpDef& op, const std::vector<Tensor>& inputs, const Attrs& attrs = {});
Expected<Tensor> run(std::string_view name, const std::vector<Tensor>& inputs,
                     const Attrs& attrs = {});
// Just the checks and the inferred output.
Expected<TensorMeta> infer(const OpDef& op, const std::vector<TensorMeta>& inputs,
                           const Attrs& attrs);

// ---- For op definitions (ops/*_ops.cpp) ----

// Each *_ops.cpp adds its ops here; all_ops() calls them in order.
void add_elementwise_ops(std::vector<OpDef>& ops);
void add_matmul_ops(std::vector<OpDef>& ops);
void add_reduce_ops(std::vector<OpDef>& ops);
void add_nn_ops(std::vector<OpDef>& ops);
void add_view_ops(std::vector<OpDef>& ops);
void add_mask_ops(std::vector<OpDef>& ops);
void add_conv_ops(std::vector<OpDef>& ops);
void add_batch_norm_ops(std::vector<OpDef>& ops);
void add_math_ops(std::vector<OpDef>& ops);
void add_index_ops(std::vector<OpDef>& ops);
void add_norm_ops(std::vector<OpDef>& ops);
void add_pool_ops(std::vector<OpDef>& ops);
void add_attention_ops(std::vector<OpDef>& ops);
void add_conv_transpose_ops(std::vector<OpDef>& ops);
void add_conv1d_ops(std::vector<OpDef>& ops);
void add_conv3d_ops(std::vector<OpDef>& ops);           // after conv2d, which it runs
void add_integer_ops(std::vector<OpDef>& ops);          // floor_divide, div_trunc, remainder
void add_flash_attention_ops(std::vector<OpDef>& ops);  // by add_attention_ops

std::string shapes_string(const std::vector<TensorMeta>& inputs);

}  // namespace tessel::ops
