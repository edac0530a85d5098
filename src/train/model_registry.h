// The models a config can name in [model] name = "...", each made by a factory from the rest of
// its [model] table and what the data says about the task.
//
//   TESSEL_ASSIGN_OR_RETURN(auto model, make_model(cfg_model_table, {.input_shape = {28, 28},
//                                                                    .classes = 10, .seed = 1}));
//
// Built in: "mlp" (key hidden = [512, 256], the sizes between input and classes), "cnn" (the
// small CNN of nn/cnn.h, no keys), "gpt" (nn/gpt.h, on text data: n_layer, n_head, n_embd,
// block_size (default: data.block_size), dropout, bias; defaults gpt_tiny's; the vocabulary is
// the data's) and "resnet18", "resnet34", "resnet50" (nn/resnet.h; key stem = "imagenet"
// (default) or "cifar"; channels and classes come from the data). A model added elsewhere
// registers itself once before configs are read (add a line to builtin_models() in
// model_registry.cpp for models inside tessel).
// A factory must check its keys with Config::check_keys so a typo names the allowed keys.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"
#include "support/config.h"

namespace tessel::train {

// What a model factory may need to know about the data and the run.
struct ModelContext {
  Shape input_shape;    // of one example, e.g. {28, 28}; {T} for token windows
  int64_t classes = 0;  // output classes (or vocabulary size for language models)
  uint64_t seed = 0;    // for modules with generators of their own (dropout)
};

// `table` is the [model] table; its "name" key is the registry's and is allowed already.
using ModelFactory =
    std::function<Expected<std::unique_ptr<nn::Module>>(const Config& table, const ModelContext&)>;

// Adds or replaces a model name.
void register_model(const std::string& name, ModelFactory factory);
// The names known, sorted.
std::vector<std::string> model_names();
// Reads [model] name and calls its factory; an unknown name lists the known ones.
Expected<std::unique_ptr<nn::Module>> make_model(const Config& table, const ModelContext& context);

}  // namespace tessel::train
