// The Module tree: layers that own parameters and sub-modules under the names PyTorch would give
// them, and FlatParameters, which puts every parameter (and its gradient) of a tree into one
// buffer per dtype.
//
//   auto model = std::make_unique<Sequential>();
//   model->append(std::make_unique<Linear>(784, 512));      // "0.weight", "0.bias"
//   model->append(std::make_unique<ReLU>());
//   Pcg32 rng(seed);
//   TESSEL_ASSIGN_OR_RETURN(FlatParameters params, FlatParameters::create(*model, device, rng));
//   TESSEL_ASSIGN_OR_RETURN(Variable logits, (*model)(x));    // forward, errors name the module
//   ... loss.backward(); optimizer.step(); TESSEL_TRY(params.zero_grad());   // one fill
//   nn::StateDict weights = model->state_dict();             // "0.weight", ... as in PyTorch
//   TESSEL_TRY(model->load_state_dict(weights).status());    // strict: every key, same shapes
//
// A module declares its parameters (name, shape, dtype, default initialiser) in its constructor;
// they get memory only when FlatParameters::create() lays the whole tree out, so that each
// parameter's value and gradient are views into two flat buffers (see FlatParameters). Forward
// before create() is an error that says so.
//
// Calling a module (operator()) runs its forward; an error on the way names the innermost module
// called so, by its path from the root and its type ("encoder.layer2.fc1 (Linear): linear: ..."),
// which is how modules should call their children too.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/variable.h"
#include "runtime/tensor.h"
#include "support/random.h"
#include "support/status.h"

namespace tessel::nn {

using autograd::Variable;

// Tensors by name, as torch.nn.Module.state_dict() gives them: parameters and buffers.
using StateDict = std::map<std::string, Tensor>;

// What load_state_dict(strict = false) left out, as PyTorch's _IncompatibleKeys.
struct IncompatibleKeys {
  std::vector<std::string> missing_keys;     // the module's, absent from the state dict
  std::vector<std::string> unexpected_keys;  // the state dict's, absent from the module
};

class FlatParameters;
// The flat buffers' shared state (FlatParameters is a handle on it).
struct FlatState;

// How a parameter is filled when it gets memory (init.h's functions fit).
using Initializer = std::function<Status(Tensor&, Pcg32&)>;

struct Parameter {
  Shape shape;
  DType dtype = DType::kF32;
  Initializer init;
  // Undefined until FlatParameters::create(); then data() and grad() are views of the flat
  // buffers. The gradient view is installed as the leaf's gradient, and autograd accumulates
  // into it in place.
  Variable variable;
  Tensor grad;  // the same view as variable.grad() after create(); kept here across zero_grad
  std::shared_ptr<FlatState> flat;  // the buffers it lives in (for Module::to)
};

// State that is saved with the model but not trained (torch.nn.Module.register_buffer):
// BatchNorm's running statistics. It gets memory with the parameters (FlatParameters::create),
// filled with `fill`; a module may replace `tensor` (same shape, dtype and device) as it updates.
struct Buffer {
  Shape shape;
  DType dtype = DType::kF32;
  double fill = 0.0;
  Tensor tensor;
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Most modules map one input to one output (a Sequential chains them). Modules with other
  // signatures add their own functions; this one then says it has none.
  virtual Expected<Variable> forward(const Variable& input);
  // The module's type as PyTorch prints it ("Linear"), for messages.
  virtual std::string type_name() const = 0;

  // forward(input) (an input that is already an error passes through). An error names the
  // innermost module called this way (see the top of this file).
  Expected<Variable> operator()(const Expected<Variable>& input);
  // The dotted path from the root of the tree ("encoder.layer2.fc1"; "" for the root).
  std::string path() const;

  // Parameters and buffers by name (torch.nn.Module.state_dict()): the tensors themselves, not
  // copies. Only once the tree has memory (FlatParameters::create).
  StateDict state_dict();
  // Copies `state` into the parameters and buffers (torch.nn.Module.load_state_dict): a shape
  // that differs is an error, a dtype that differs is converted (f32/f16/bf16). strict: a missing
  // or unexpected key is an error listing them all, and nothing is copied; otherwise they are
  // returned and the keys both have are copied.
  Expected<IncompatibleKeys> load_state_dict(const StateDict& state, bool strict = true);
  // Sets every parameter's gradient to zero in place (FlatParameters::zero_grad does the same
  // with one fill per dtype).
  Status zero_grad();
  // Moves the parameters (values and gradients: the whole flat buffers, which every
  // FlatParameters handle and optimizer then sees) and the buffers to `device`, as
  // torch.nn.Module.to(device). Optimizer state does not move: as in PyTorch, move the model
  // before creating its optimizer.
  Status to(Device* device);

  // Every parameter of the tree, depth first in registration order, named with dots
  // ("0.weight", "blocks.1.attn.c_attn.bias"), as torch.nn.Module.named_parameters().
  std::vector<std::pair<std::string, Parameter*>> named_parameters();
  std::vector<std::pair<std::string, Module*>> named_children() const;
  int64_t num_parameters();
  // Every buffer of the tree, named like parameters ("bn1.running_mean").
  std::vector<std::pair<std::string, Buffer*>> named_buffers();
  // This module ("") and every descendant, depth first, named with dots ("blocks.0.attn").
  std::vector<std::pair<std::string, Module*>> named_modules();

  // Training or evaluation mode for the whole subtree (torch's train()/eval()): batch norm uses
  // batch statistics and dropout drops only in training mode. Modules start in training mode.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // A tap on a layer's forward: Linear and Conv2d pass their input and output through it when
  // one is set (DP-SGD's per-sample gradients, secure/dp_sgd.h, save the input and route the
  // output's gradient to a leaf there). It returns the output to use.
  using ForwardTap =
      std::function<Expected<Variable>(Module& layer, const Variable& input, Variable output)>;
  void set_forward_tap(ForwardTap tap) { tap_ = std::move(tap); }

 protected:
  Parameter& register_parameter(std::string name, Shape shape, Initializer init,
                                DType dtype = DType::kF32);
  Buffer& register_buffer(std::string name, Shape shape, DType dtype, double fill);
  template <typename M>
  M& register_module(std::string name, std::unique_ptr<M> module) {
    M& ref = *module;
    Module& base = ref;
    base.parent_ = this;
    base.name_ = name;
    children_.emplace_back(std::move(name), std::move(module));
    return ref;
  }
  // The variable of a parameter, or an error naming the module when the tree has no memory yet.
  Expected<Variable> value(const Parameter& p) const;
  // `output` through the forward tap, if any.
  Expected<Variable> tapped(const Variable& input, Expected<Variable> output) {
    if (!tap_ || !output.ok()) return output;
    return tap_(*this, input, std::move(*output));
  }

 private:
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Parameter*>>& out);
  std::vector<std::pair<std::string, std::unique_ptr<Parameter>>> parameters_;
  std::vector<std::pair<std::string, std::unique_ptr<Buffer>>> buffers_;
  bool training_ = true;
  ForwardTap tap_;
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  Module* parent_ = nullptr;  // set when a parent registers this module
  std::string name_;          // under that parent
};

// The memory of a module tree's parameters.
//
// Layout: one group per dtype (in order of first appearance), on one device. A group has two
// 1-D buffers of the same length, `values` and `grads`. Its parameters follow each other in
// named_parameters() order, each starting at an offset that is a multiple of kAlignElements (so
// each starts on a 64-byte boundary for f32), and the group's length is rounded up to a multiple
// of kAlignElements too, so it cuts into equal rows for reductions and into equal shards for a
// world size that divides its rows. The gaps are zeros in both buffers and stay zero under every
// optimizer here (a zero gradient and a zero value give a zero update). Optimizer state
// (optim/) uses the same layout, so one element-wise kernel over the flat buffers updates
// everything, and zeroing the gradients is one fill per group.
//
// A FlatParameters is a handle: copies share one layout and one set of buffers, and an optimizer
// keeps its own copy, so moving or destroying the caller's object leaves the optimizer working
// on the same memory. A moved-from handle is empty (no entries, no groups).
class FlatParameters {
 public:
  static constexpr int64_t kAlignElements = 1024;

  struct Entry {
    std::string name;
    Parameter* parameter;
    size_t group;
    int64_t offset;  // in elements, into the group's buffers
    int64_t numel;
  };
  struct Group {
    DType dtype;
    Tensor values;  // [length], contiguous, offset 0 in its own storage
    Tensor grads;   // [length]
  };

  // Lays out, allocates on `device`, initialises each parameter with its initializer (drawing from
  // rng in named_parameters() order) and zeroes the gradients. Buffers get their own memory on
  // `device` too (they are not flat: optimizers never touch them). The module must outlive this
  // object's use of its parameters.
  static Expected<FlatParameters> create(Module& root, Device* device, Pcg32& rng);
  // Flat buffers that are a slice of some model's (a DDP bucket, a ZeRO shard), for an optimizer
  // to update. `entries` (offsets into these groups) name the optimizer's state; none: unnamed.
  static FlatParameters over(Device* device, std::vector<Group> groups,
                             std::vector<Entry> entries = {});

  FlatParameters();

  const std::vector<Entry>& entries() const;
  const std::vector<Group>& groups() const;
  Device* device() const;
  // Sets every gradient to zero (one fill per group) and re-installs the views as the leaves'
  // gradients.
  Status zero_grad();
  // Frees the full gradient buffers (ZeRO-2 and 3 keep a shard elsewhere): the leaves' gradients
  // are then autograd's own per backward, and zero_grad() only clears them.
  void release_grads();
  // Frees the full value buffers (ZeRO-3 keeps a shard elsewhere and puts gathered values in
  // place with Variable::set_data while they are in use).
  void release_values();
  // Name -> value view, for checkpoints.
  std::vector<std::pair<std::string, Tensor>> named_tensors() const;
  // Moves both flat buffers of every group to `device` and points every parameter's views at
  // them (Module::to does this for the tree's parameters).
  Status to(Device* device);

 private:
  friend class Module;
  std::shared_ptr<FlatState> state_;
};

struct FlatState {
  Device* device = nullptr;
  std::vector<FlatParameters::Entry> entries;
  std::vector<FlatParameters::Group> groups;
};

}  // namespace tessel::nn
