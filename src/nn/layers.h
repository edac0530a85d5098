// The layers of torch.nn that tessel's models are made of, with PyTorch's parameter names, shapes
// and default initialisers, so a state dict moves between the two unchanged.
//
//   Linear(in, out)        weight [out, in], bias [out]: U(-1/sqrt(in), 1/sqrt(in)) both
//   LayerNorm(c)           weight [c] = 1, bias [c] = 0, over the last axis
//   Embedding(v, c)        weight [v, c] ~ N(0, 1); forward takes i64 ids
//   ReLU, GELU             no parameters (GELU is the tanh approximation, as GPT-2 uses)
//   Sequential             children "0", "1", ...; forward chains them
//   ModuleList             children "0", "1", ...; no forward (the owner calls them)
//   MLP(sizes)             Linear/ReLU pairs as a Sequential: 784-512-256-10 names its layers
//                          "0", "2", "4" like nn.Sequential(Linear, ReLU, Linear, ReLU, Linear)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"

namespace tessel::nn {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Expected<Variable> forward(const Variable& x) override;
  std::string type_name() const override { return "Linear"; }
  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }

 private:
  Parameter* weight_;
  Parameter* bias_ = nullptr;
  int64_t out_features_;
};

class ReLU : public Module {
 public:
  Expected<Variable> forward(const Variable& x) override;
  std::string type_name() const override { return "ReLU"; }
};

class GELU : public Module {
 public:
  Expected<Variable> forward(const Variable& x) override;
  std::string type_name() const override { return "GELU"; }
};

class LayerNorm : public Module {
 public:
  // bias = false: no bias parameter (nanoGPT's LayerNorm(ndim, bias=False)).
  explicit LayerNorm(int64_t features, double eps = 1e-5, bool bias = true);
  Expected<Variable> forward(const Variable& x) override;
  std::string type_name() const override { return "LayerNorm"; }

 private:
  Parameter* weight_;
  Parameter* bias_ = nullptr;
  Tensor zero_bias_;  // without a bias parameter: zeros on the weight's device, made once
  double eps_;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  // ids: i64 of any shape -> [..., embedding_dim].
  Expected<Variable> forward(const Variable& ids) override;
  std::string type_name() const override { return "Embedding"; }
  Parameter& weight() { return *weight_; }

 private:
  Parameter* weight_;
};

class Sequential : public Module {
 public:
  // Appends a child named by its position.
  template <typename M>
  M& append(std::unique_ptr<M> module) {
    M& ref = register_module(std::to_string(size_), std::move(module));
    modules_.push_back(&ref);
    ++size_;
    return ref;
  }
  Expected<Variable> forward(const Variable& x) override;
  std::string type_name() const override { return "Sequential"; }
  size_t size() const { return size_; }

 private:
  std::vector<Module*> modules_;
  size_t size_ = 0;
};

class ModuleList : public Module {
 public:
  template <typename M>
  M& append(std::unique_ptr<M> module) {
    M& ref = register_module(std::to_string(modules_.size()), std::move(module));
    modules_.push_back(&ref);
    return ref;
  }
  Module& operator[](size_t i) { return *modules_.at(i); }
  size_t size() const { return modules_.size(); }
  std::string type_name() const override { return "ModuleList"; }

 private:
  std::vector<Module*> modules_;
};

// A multi-layer perceptron over flattened inputs: Linear(sizes[i], sizes[i+1]) with a ReLU between
// consecutive layers. forward() flattens [B, ...] to [B, sizes[0]].
class MLP : public Sequential {
 public:
  explicit MLP(const std::vector<int64_t>& sizes);
  Expected<Variable> forward(const Variable& x) override;
  std::string type_name() const override { return "MLP"; }

 private:
  int64_t in_features_;
};

}  // namespace tessel::nn
