// Module tree and flat parameter layout (see module.h).
#include "nn/module.h"

#include <algorithm>
#include <map>

#include "nn/module_scope.h"
#include "ops/ops.h"

namespace tessel::nn {
namespace {

// Entry e's part of a flat buffer, in the parameter's shape.
Expected<Tensor> entry_view(const Tensor& flat, const FlatParameters::Entry& e) {
  TESSEL_ASSIGN_OR_RETURN(Tensor view, flat.slice(0, e.offset, e.offset + e.numel));
  return view.reshape(e.parameter->shape);
}

// The innermost module call (operator()) that has already named itself in the error going up.
thread_local int g_call_depth = 0;
thread_local bool g_error_named = false;
// The innermost module call running on this thread (module_scope.h).
thread_local const Module* g_current = nullptr;

}  // namespace

const Module* current_module() {
  return g_current;
}

Expected<Variable> Module::forward(const Variable&) {
  return unimplemented("{} has no one-input forward", type_name());
}

Expected<Variable> Module::operator()(const Expected<Variable>& input) {
  if (!input.ok()) return input.status();
  if (g_call_depth == 0) g_error_named = false;
  ++g_call_depth;
  const Module* outer = g_current;
  g_current = this;
  Expected<Variable> out = forward(*input);
  g_current = outer;
  --g_call_depth;
  if (out.ok() || g_error_named) return out;
  g_error_named = true;
  const std::string where = path();
  if (where.empty()) return out.status().with_context("{}", type_name());
  return out.status().with_context("{} ({})", where, type_name());
}

std::string Module::path() const {
  if (!parent_) return "";
  std::string above = parent_->path();
  return above.empty() ? name_ : above + "." + name_;
}

StateDict Module::state_dict() {
  StateDict out;
  for (auto& [name, p] : named_parameters())
    if (p->variable.defined()) out[name] = p->variable.data();
  for (auto& [name, b] : named_buffers())
    if (b->tensor.defined()) out[name] = b->tensor;
  return out;
}

namespace {

// `saved` in the dtype of `target` (PyTorch's copy_ converts), ready for copy_from.
Expected<Tensor> matching_dtype(const Tensor& saved, const Tensor& target) {
  if (saved.dtype() == target.dtype()) return saved;
  return ops::cast(saved, target.dtype());
}

std::string joined(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys)
    out += (out.empty() ? "\"" : ", \"") + k + "\"";
  return out;
}

}  // namespace

Expected<IncompatibleKeys> Module::load_state_dict(const StateDict& state, bool strict) {
  std::vector<std::pair<std::string, Tensor>> targets;
  for (auto& [name, p] : named_parameters()) {
    if (!p->variable.defined())
      return failed_precondition(
          "load_state_dict into {}: parameter '{}' has no memory yet (call "
          "FlatParameters::create on the model first)",
          type_name(), name);
    targets.emplace_back(name, p->variable.data());
  }
  for (auto& [name, b] : named_buffers())
    if (b->tensor.defined()) targets.emplace_back(name, b->tensor);

  // Everything is checked before anything is copied, so a failed load leaves the model as it was.
  IncompatibleKeys keys;
  std::vector<std::string> size_mismatches;
  std::map<std::string, bool> known;
  for (auto& [name, target] : targets) {
    known[name] = true;
    auto it = state.find(name);
    if (it == state.end()) {
      keys.missing_keys.push_back(name);
      continue;
    }
    if (it->second.shape() != target.shape())
      size_mismatches.push_back(fmt::format(
          "size mismatch for {}: copying a tensor of shape {} from the state dict, the shape in "
          "the module is {}",
          name, shape_string(it->second.shape()), shape_string(target.shape())));
  }
  for (const auto& [name, tensor] : state)
    if (!known.contains(name)) keys.unexpected_keys.push_back(name);
  std::vector<std::string> errors;
  if (strict && !keys.missing_keys.empty())
    errors.push_back("Missing key(s) in state_dict: " + joined(keys.missing_keys) + ".");
  if (strict && !keys.unexpected_keys.empty())
    errors.push_back("Unexpected key(s) in state_dict: " + joined(keys.unexpected_keys) + ".");
  errors.insert(errors.end(), size_mismatches.begin(), size_mismatches.end());
  if (!errors.empty()) {
    std::string message = fmt::format("Error(s) in loading state_dict for {}:", type_name());
    for (const std::string& e : errors)
      message += "\n\t" + e;
    return invalid_argument("{}", message);
  }

  for (auto& [name, target] : targets) {
    auto it = state.find(name);
    if (it == state.end()) continue;
    Expected<Tensor> saved = matching_dtype(it->second, target);
    Status s = saved.ok() ? target.copy_from(*saved) : saved.status();
    if (!s.ok()) return s.with_context("load_state_dict: '{}'", name);
  }
  return keys;
}

Status Module::zero_grad() {
  for (auto& [name, p] : named_parameters())
    if (p->variable.defined()) TESSEL_TRY(p->variable.zero_grad());
  return ok_status();
}

Status Module::to(Device* device) {
  // Each flat state once: the parameters of a tree normally share one.
  std::vector<std::shared_ptr<FlatState>> flats;
  for (auto& [name, p] : named_parameters()) {
    const std::shared_ptr<FlatState>& flat = p->flat;
    if (!p->variable.defined() || !flat)
      return failed_precondition(
          "{}.to({}): parameter '{}' has no memory yet (FlatParameters::create takes the device)",
          type_name(), device->id(), name);
    if (std::find(flats.begin(), flats.end(), flat) == flats.end()) flats.push_back(flat);
  }
  for (const std::shared_ptr<FlatState>& flat : flats) {
    FlatParameters handle;
    handle.state_ = flat;
    TESSEL_TRY(handle.to(device));
  }
  for (auto& [name, b] : named_buffers()) {
    if (b->tensor.defined()) {
      TESSEL_ASSIGN_OR_RETURN(b->tensor, b->tensor.to(device));
    }
  }
  return ok_status();
}

Parameter& Module::register_parameter(std::string name, Shape shape, Initializer init,
                                      DType dtype) {
  auto p = std::make_unique<Parameter>();
  p->shape = std::move(shape);
  p->dtype = dtype;
  p->init = std::move(init);
  Parameter& ref = *p;
  parameters_.emplace_back(std::move(name), std::move(p));
  return ref;
}

Buffer& Module::register_buffer(std::string name, Shape shape, DType dtype, double fill) {
  auto b = std::make_unique<Buffer>();
  b->shape = std::move(shape);
  b->dtype = dtype;
  b->fill = fill;
  Buffer& ref = *b;
  buffers_.emplace_back(std::move(name), std::move(b));
  return ref;
}

std::vector<std::pair<std::string, Buffer*>> Module::named_buffers() {
  std::vector<std::pair<std::string, Buffer*>> out;
  for (auto& [prefix, module] : named_modules())
    for (auto& [name, b] : module->buffers_)
      out.emplace_back(prefix.empty() ? name : prefix + "." + name, b.get());
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (auto& [name, child] : children_)
    for (auto& [sub, module] : child->named_modules())
      out.emplace_back(sub.empty() ? name : name + "." + sub, module);
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_)
    child->train(on);
}

Expected<Variable> Module::value(const Parameter& p) const {
  if (!p.variable.defined())
    return failed_precondition(
        "{}: forward before its parameters have memory (call FlatParameters::create on the model)",
        type_name());
  return p.variable;
}

void Module::collect(const std::string& prefix,
                     std::vector<std::pair<std::string, Parameter*>>& out) {
  for (auto& [name, p] : parameters_)
    out.emplace_back(prefix + name, p.get());
  for (auto& [name, child] : children_)
    child->collect(prefix + name + ".", out);
}

std::vector<std::pair<std::string, Parameter*>> Module::named_parameters() {
  std::vector<std::pair<std::string, Parameter*>> out;
  collect("", out);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_children() const {
  std::vector<std::pair<std::string, Module*>> out;
  for (const auto& [name, child] : children_)
    out.emplace_back(name, child.get());
  return out;
}

int64_t Module::num_parameters() {
  int64_t n = 0;
  for (auto& [name, p] : named_parameters())
    n += shape_numel(p->shape);
  return n;
}

FlatParameters::FlatParameters() : state_(std::make_shared<FlatState>()) {}

const std::vector<FlatParameters::Entry>& FlatParameters::entries() const {
  static const std::vector<Entry> kNone;
  return state_ ? state_->entries : kNone;
}

const std::vector<FlatParameters::Group>& FlatParameters::groups() const {
  static const std::vector<Group> kNone;
  return state_ ? state_->groups : kNone;
}

Device* FlatParameters::device() const {
  return state_ ? state_->device : nullptr;
}

Expected<FlatParameters> FlatParameters::create(Module& root, Device* device, Pcg32& rng) {
  FlatParameters flat;
  FlatState& state = *flat.state_;
  state.device = device;
  std::vector<int64_t> lengths;
  for (auto& [name, p] : root.named_parameters()) {
    if (p->variable.defined())
      return failed_precondition(
          "parameter '{}' already has memory (FlatParameters::create "
          "was called on this model before)",
          name);
    size_t group = 0;
    while (group < state.groups.size() && state.groups[group].dtype != p->dtype)
      ++group;
    if (group == state.groups.size()) {
      state.groups.push_back(Group{p->dtype, Tensor(), Tensor()});
      lengths.push_back(0);
    }
    int64_t numel = shape_numel(p->shape);
    state.entries.push_back(Entry{name, p, group, lengths[group], numel});
    lengths[group] += (numel + kAlignElements - 1) / kAlignElements * kAlignElements;
  }
  for (size_t g = 0; g < state.groups.size(); ++g) {
    Group& group = state.groups[g];
    int64_t length = std::max<int64_t>(lengths[g], kAlignElements);
    TESSEL_ASSIGN_OR_RETURN(group.values, Tensor::zeros({length}, group.dtype, device));
    TESSEL_ASSIGN_OR_RETURN(group.grads, Tensor::zeros({length}, group.dtype, device));
  }
  for (Entry& e : state.entries) {
    const Group& group = state.groups[e.group];
    TESSEL_ASSIGN_OR_RETURN(Tensor value, entry_view(group.values, e));
    TESSEL_ASSIGN_OR_RETURN(Tensor grad, entry_view(group.grads, e));
    if (e.parameter->init) {
      Status s = e.parameter->init(value, rng);
      if (!s.ok()) return s.with_context("initialising '{}'", e.name);
    }
    e.parameter->variable = Variable(value, /*requires_grad=*/true);
    e.parameter->grad = grad;
    e.parameter->variable.state()->grad = grad;
    e.parameter->flat = flat.state_;
  }
  for (auto& [name, b] : root.named_buffers()) {
    TESSEL_ASSIGN_OR_RETURN(b->tensor, Tensor::full(b->shape, b->fill, b->dtype, device));
  }
  return flat;
}

FlatParameters FlatParameters::over(Device* device, std::vector<Group> groups,
                                    std::vector<Entry> entries) {
  FlatParameters flat;
  flat.state_->device = device;
  flat.state_->groups = std::move(groups);
  flat.state_->entries = std::move(entries);
  return flat;
}

void FlatParameters::release_grads() {
  if (!state_) return;
  for (Group& g : state_->groups)
    g.grads = Tensor();
  for (Entry& e : state_->entries) {
    e.parameter->grad = Tensor();
    e.parameter->variable.state()->grad = Tensor();
  }
}

void FlatParameters::release_values() {
  if (!state_) return;
  for (Group& g : state_->groups)
    g.values = Tensor();
  for (Entry& e : state_->entries)
    e.parameter->variable.set_data(Tensor());
}

Status FlatParameters::zero_grad() {
  if (!state_) return ok_status();
  for (Group& g : state_->groups)
    if (g.grads.defined()) TESSEL_TRY(g.grads.fill(0.0));
  for (Entry& e : state_->entries)
    e.parameter->variable.state()->grad = e.parameter->grad;
  return ok_status();
}

std::vector<std::pair<std::string, Tensor>> FlatParameters::named_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const Entry& e : entries())
    out.emplace_back(e.name, e.parameter->variable.data());
  return out;
}

Status FlatParameters::to(Device* device) {
  if (!state_ || state_->device == device) return ok_status();
  std::vector<Group> moved;
  for (const Group& g : state_->groups) {
    Group m{g.dtype, Tensor(), Tensor()};
    if (g.values.defined()) {
      TESSEL_ASSIGN_OR_RETURN(m.values, g.values.to(device));
    }
    if (g.grads.defined()) {
      TESSEL_ASSIGN_OR_RETURN(m.grads, g.grads.to(device));
    }
    moved.push_back(std::move(m));
  }
  for (const Entry& e : state_->entries) {
    const Group& g = moved[e.group];
    Parameter& p = *e.parameter;
    if (g.values.defined()) {
      TESSEL_ASSIGN_OR_RETURN(Tensor value, entry_view(g.values, e));
      p.variable.set_data(value);
    }
    if (g.grads.defined()) {
      TESSEL_ASSIGN_OR_RETURN(p.grad, entry_view(g.grads, e));
      p.variable.state()->grad = p.grad;
    }
  }
  state_->groups = std::move(moved);
  state_->device = device;
  return ok_status();
}

}  // namespace tessel::nn
