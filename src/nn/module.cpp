// Module tree and flat parameter layout (see module.h).
#include "nn/module.h"

#include <map>

namespace tessel::nn {

Expected<Variable> Module::forward(const Variable&) {
  return unimplemented("{} has no one-input forward", type_name());
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

Expected<FlatParameters> FlatParameters::create(Module& root, Device* device, Pcg32& rng) {
  FlatParameters flat;
  flat.device_ = device;
  std::vector<int64_t> lengths;
  for (auto& [name, p] : root.named_parameters()) {
    if (p->variable.defined())
      return failed_precondition(
          "parameter '{}' already has memory (FlatParameters::create "
          "was called on this model before)",
          name);
    size_t group = 0;
    while (group < flat.groups_.size() && flat.groups_[group].dtype != p->dtype)
      ++group;
    if (group == flat.groups_.size()) {
      flat.groups_.push_back(Group{p->dtype, Tensor(), Tensor()});
      lengths.push_back(0);
    }
    int64_t numel = shape_numel(p->shape);
    flat.entries_.push_back(Entry{name, p, group, lengths[group], numel});
    lengths[group] += (numel + kAlignElements - 1) / kAlignElements * kAlignElements;
  }
  for (size_t g = 0; g < flat.groups_.size(); ++g) {
    Group& group = flat.groups_[g];
    int64_t length = std::max<int64_t>(lengths[g], kAlignElements);
    TESSEL_ASSIGN_OR_RETURN(group.values, Tensor::zeros({length}, group.dtype, device));
    TESSEL_ASSIGN_OR_RETURN(group.grads, Tensor::zeros({length}, group.dtype, device));
  }
  for (Entry& e : flat.entries_) {
    const Group& group = flat.groups_[e.group];
    TESSEL_ASSIGN_OR_RETURN(Tensor value, group.values.slice(0, e.offset, e.offset + e.numel));
    TESSEL_ASSIGN_OR_RETURN(value, value.reshape(e.parameter->shape));
    TESSEL_ASSIGN_OR_RETURN(Tensor grad, group.grads.slice(0, e.offset, e.offset + e.numel));
    TESSEL_ASSIGN_OR_RETURN(grad, grad.reshape(e.parameter->shape));
    if (e.parameter->init) {
      Status s = e.parameter->init(value, rng);
      if (!s.ok()) return s.with_context("initialising '{}'", e.name);
    }
    e.parameter->variable = Variable(value, /*requires_grad=*/true);
    e.parameter->grad = grad;
    e.parameter->variable.state()->grad = grad;
  }
  for (auto& [name, b] : root.named_buffers()) {
    TESSEL_ASSIGN_OR_RETURN(b->tensor, Tensor::full(b->shape, b->fill, b->dtype, device));
  }
  return flat;
}

FlatParameters FlatParameters::over(Device* device, std::vector<Group> groups,
                                    std::vector<Entry> entries) {
  FlatParameters flat;
  flat.device_ = device;
  flat.groups_ = std::move(groups);
  flat.entries_ = std::move(entries);
  return flat;
}

void FlatParameters::release_grads() {
  for (Group& g : groups_)
    g.grads = Tensor();
  for (Entry& e : entries_) {
    e.parameter->grad = Tensor();
    e.parameter->variable.state()->grad = Tensor();
  }
}

void FlatParameters::release_values() {
  for (Group& g : groups_)
    g.values = Tensor();
  for (Entry& e : entries_)
    e.parameter->variable.set_data(Tensor());
}

Status FlatParameters::zero_grad() {
  for (Group& g : groups_)
    if (g.grads.defined()) TESSEL_TRY(g.grads.fill(0.0));
  for (Entry& e : entries_)
    e.parameter->variable.state()->grad = e.parameter->grad;
  return ok_status();
}

std::vector<std::pair<std::string, Tensor>> FlatParameters::named_tensors() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const Entry& e : entries_)
    out.emplace_back(e.name, e.parameter->variable.data());
  return out;
}

}  // namespace tessel::nn
