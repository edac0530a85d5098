// The ResNet entries of the model registry: stem and channels from the config and the data, and
// a wrong key or value named with what is allowed.
#include "train/model_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "nn/resnet.h"

namespace tessel::train {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<nn::Module> make(const std::string& toml, const ModelContext& context) {
  Config cfg = Config::parse(toml, "m.toml").value();
  Expected<std::unique_ptr<nn::Module>> model = make_model(cfg.table("model").value(), context);
  EXPECT_TRUE(model.ok()) << model.status().message();
  return model.ok() ? std::move(*model) : nullptr;
}

std::string error_of(const std::string& toml, const ModelContext& context) {
  Config cfg = Config::parse(toml, "m.toml").value();
  Expected<std::unique_ptr<nn::Module>> model = make_model(cfg.table("model").value(), context);
  return model.ok() ? "(no error)" : model.status().message();
}

TEST(ModelRegistry, ResNetsTakeStemChannelsAndClassesFromConfigAndData) {
  // shared/WORKLOADS.md's resnet18: CIFAR stem, 10 classes on 3x32x32.
  auto r18 = make("[model]\nname = \"resnet18\"\nstem = \"cifar\"\n",
                  {.input_shape = {3, 32, 32}, .classes = 10});
  ASSERT_TRUE(r18);
  auto* resnet = dynamic_cast<nn::ResNet*>(r18.get());
  ASSERT_NE(resnet, nullptr);
  EXPECT_EQ(resnet->config().stem, nn::ResNetStem::kCifar);
  EXPECT_EQ(resnet->config().in_channels, 3);
  EXPECT_EQ(resnet->config().classes, 10);
  EXPECT_EQ(r18->num_parameters(), 11173962);  // torchvision's, see nn/testdata/resnet_manifest.txt

  // The default stem is torchvision's (ImageNet); a 1-channel [H, W] example gives in_channels 1.
  auto r50 = make("[model]\nname = \"resnet50\"\n", {.input_shape = {28, 28}, .classes = 10});
  ASSERT_TRUE(r50);
  resnet = dynamic_cast<nn::ResNet*>(r50.get());
  EXPECT_EQ(resnet->config().stem, nn::ResNetStem::kImageNet);
  EXPECT_EQ(resnet->config().in_channels, 1);
  EXPECT_EQ(resnet->config().block, nn::ResNetBlock::kBottleneck);

  auto r34 =
      make("[model]\nname = \"resnet34\"\n", {.input_shape = {3, 224, 224}, .classes = 1000});
  ASSERT_TRUE(r34);
  EXPECT_EQ(r34->num_parameters(), 21797672);
}

TEST(ModelRegistry, ResNetKeysAndValuesAreChecked) {
  const ModelContext context{.input_shape = {3, 32, 32}, .classes = 10};
  EXPECT_THAT(error_of("[model]\nname = \"resnet18\"\nstemm = \"cifar\"\n", context),
              HasSubstr("unknown key 'model.stemm' (did you mean 'stem'?); allowed in [model]: "
                        "name, stem"));
  EXPECT_THAT(error_of("[model]\nname = \"resnet18\"\nstem = \"mnist\"\n", context),
              HasSubstr("m.toml: key 'model.stem': 'mnist' is not allowed; allowed: imagenet, "
                        "cifar"));
  EXPECT_THAT(error_of("[model]\nname = \"resnet50\"\n", {.input_shape = {784}, .classes = 10}),
              HasSubstr("model 'resnet50' takes images [C, H, W] or [H, W], the data has [784]"));
}

}  // namespace
}  // namespace tessel::train
