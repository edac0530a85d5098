// Model registry (see model_registry.h) and the built-in models.
#include "train/model_registry.h"

#include <map>
#include <mutex>

#include "nn/cnn.h"
#include "nn/gpt.h"
#include "nn/layers.h"
#include "nn/resnet.h"

namespace tessel::train {
namespace {

Expected<std::unique_ptr<nn::Module>> make_mlp(const Config& table, const ModelContext& context) {
  TESSEL_TRY(table.check_keys({"name", "hidden"}));
  TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> hidden,
                          table.get_or<std::vector<int64_t>>("hidden", {512, 256}));
  std::vector<int64_t> sizes{shape_numel(context.input_shape)};
  for (int64_t h : hidden) {
    if (h < 1)
      return invalid_argument("{}: key 'model.hidden': sizes must be >= 1, got {}",
                              table.source(), h);
    sizes.push_back(h);
  }
  sizes.push_back(context.classes);
  return std::unique_ptr<nn::Module>(std::make_unique<nn::MLP>(sizes));
}

Expected<std::unique_ptr<nn::Module>> make_cnn(const Config& table, const ModelContext& context) {
  TESSEL_TRY(table.check_keys({"name"}));
  if (context.input_shape != Shape{28, 28} && context.input_shape != Shape{1, 28, 28})
    return invalid_argument("{}: model 'cnn' takes 28 x 28 images, the data has {}",
                            table.source(), shape_string(context.input_shape));
  return std::unique_ptr<nn::Module>(std::make_unique<nn::SmallCnn>(context.classes));
}

// nanoGPT's GPT-2 (nn/gpt.h); the vocabulary comes from the data, block_size defaults to the
// data's window.
Expected<std::unique_ptr<nn::Module>> make_gpt(const Config& table, const ModelContext& context) {
  TESSEL_TRY(table.check_keys({"name", "n_layer", "n_head", "n_embd", "block_size", "dropout",
                               "bias"}));
  if (context.input_shape.size() != 1)
    return invalid_argument("{}: model 'gpt' reads token windows [T] (data.name = 'text'), the "
                            "data has examples of shape {}",
                            table.source(), shape_string(context.input_shape));
  const int64_t window = context.input_shape[0];
  nn::GptConfig c = nn::gpt_tiny();
  c.vocab_size = context.classes;
  c.dropout_seed = context.seed;
  auto positive = [&](const char* key, int64_t& value) -> Status {
    TESSEL_ASSIGN_OR_RETURN(value, table.get_or<int64_t>(key, value));
    if (value < 1)
      return invalid_argument("{}: key 'model.{}': must be >= 1, got {}", table.source(), key,
                              value);
    return ok_status();
  };
  c.block_size = window;
  TESSEL_TRY(positive("n_layer", c.n_layer));
  TESSEL_TRY(positive("n_head", c.n_head));
  TESSEL_TRY(positive("n_embd", c.n_embd));
  TESSEL_TRY(positive("block_size", c.block_size));
  if (c.n_embd % c.n_head != 0)
    return invalid_argument("{}: key 'model.n_embd': {} is not a multiple of model.n_head = {}",
                            table.source(), c.n_embd, c.n_head);
  if (c.block_size < window)
    return invalid_argument("{}: key 'model.block_size': {} is shorter than the data's windows "
                            "(data.block_size = {})",
                            table.source(), c.block_size, window);
  TESSEL_ASSIGN_OR_RETURN(c.dropout, table.get_or<double>("dropout", 0.0));
  if (!(c.dropout >= 0.0 && c.dropout < 1.0))
    return invalid_argument("{}: key 'model.dropout': must be in [0, 1), got {}", table.source(),
                            c.dropout);
  TESSEL_ASSIGN_OR_RETURN(c.bias, table.get_or<bool>("bias", true));
  return std::unique_ptr<nn::Module>(std::make_unique<nn::GPT>(c));
}

// resnet18 / resnet34 / resnet50 (nn/resnet.h). Key: stem = "imagenet" (torchvision's 7x7/2 +
// max-pool, the default) or "cifar" (3x3/1, no max-pool, for 32x32 images). Channels and classes
// come from the data: an example [C, H, W] has C channels, [H, W] one.
ModelFactory make_resnet(int depth) {
  return [depth](const Config& table,
                 const ModelContext& context) -> Expected<std::unique_ptr<nn::Module>> {
    TESSEL_TRY(table.check_keys({"name", "stem"}));
    TESSEL_ASSIGN_OR_RETURN(std::string stem, table.get_or<std::string>("stem", "imagenet"));
    if (stem != "imagenet" && stem != "cifar")
      return invalid_argument("{}: key '{}': '{}' is not allowed; allowed: imagenet, cifar",
                              table.source(),
                              table.path().empty() ? "stem" : table.path() + ".stem", stem);
    const Shape& shape = context.input_shape;
    if (shape.size() != 2 && shape.size() != 3)
      return invalid_argument(
          "{}: model 'resnet{}' takes images [C, H, W] or [H, W], the data has {}", table.source(),
          depth, shape_string(shape));
    TESSEL_ASSIGN_OR_RETURN(
        nn::ResNetConfig config,
        nn::resnet_config(depth,
                          stem == "cifar" ? nn::ResNetStem::kCifar : nn::ResNetStem::kImageNet,
                          context.classes));
    config.in_channels = shape.size() == 3 ? shape[0] : 1;
    return std::unique_ptr<nn::Module>(std::make_unique<nn::ResNet>(config));
  };
}

struct Registry {
  std::mutex mutex;
  std::map<std::string, ModelFactory> factories;
};

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;
    reg->factories["mlp"] = make_mlp;
    reg->factories["cnn"] = make_cnn;
    reg->factories["gpt"] = make_gpt;
    for (int depth : {18, 34, 50})
      reg->factories["resnet" + std::to_string(depth)] = make_resnet(depth);
    return reg;
  }();
  return *r;
}

}  // namespace

void register_model(const std::string& name, ModelFactory factory) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.factories[name] = std::move(factory);
}

std::vector<std::string> model_names() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, f] : r.factories)
    names.push_back(name);
  return names;
}

Expected<std::unique_ptr<nn::Module>> make_model(const Config& table, const ModelContext& context) {
  TESSEL_ASSIGN_OR_RETURN(std::string name, table.get<std::string>("name"));
  ModelFactory factory;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    auto it = r.factories.find(name);
    if (it != r.factories.end()) factory = it->second;
  }
  if (!factory) {
    std::string known;
    for (const std::string& n : model_names())
      known += (known.empty() ? "" : ", ") + n;
    return invalid_argument("{}: key 'model.name': unknown model '{}'; allowed: {}",
                            table.source(), name, known);
  }
  return factory(table, context);
}

}  // namespace tessel::train
