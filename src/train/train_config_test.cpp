// Config errors: each wrong key or value names the key and what is allowed (the expected
// messages are written out here), and a good config reads back the values written.
#include "train/train_config.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "train/model_registry.h"

namespace tessel::train {
namespace {

using ::testing::HasSubstr;

const char* kGood = R"(
seed = 7
device = "cpu"
[model]
name = "mlp"
hidden = [32]
[data]
name = "fashion_mnist"
batch_size = 16
[optimizer]
name = "sgd"
lr = 0.05
momentum = 0.9
[schedule]
name = "warmup_cosine"
warmup_steps = 10
[train]
steps = 100
clip_grad_norm = 1.0
)";

std::string error_of(const std::string& text) {
  Expected<TrainConfig> c = parse_train_config(Config::parse(text, "run.toml").value());
  EXPECT_FALSE(c.ok()) << text;
  return c.ok() ? std::string() : c.status().message();
}

// kGood with one line replaced.
std::string with(const std::string& from, const std::string& to) {
  std::string text = kGood;
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(TrainConfig, ReadsTheValuesWritten) {
  TrainConfig c = parse_train_config(Config::parse(kGood, "run.toml").value()).value();
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.target.device, "cpu");
  EXPECT_EQ(c.target.key, "device");
  EXPECT_EQ(c.data.name, "fashion_mnist");
  EXPECT_EQ(c.data.path, "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(c.data.batch_size, 16);
  EXPECT_EQ(c.data.eval_batch_size, 1000);
  EXPECT_EQ(c.optimizer.name, "sgd");
  EXPECT_DOUBLE_EQ(c.optimizer.sgd.lr, 0.05);
  EXPECT_DOUBLE_EQ(c.optimizer.sgd.momentum, 0.9);
  EXPECT_EQ(c.schedule.kind, optim::ScheduleKind::kWarmupCosine);
  EXPECT_DOUBLE_EQ(c.schedule.base_lr, 0.05);
  EXPECT_EQ(c.schedule.warmup_steps, 10);
  EXPECT_EQ(c.steps, 100);
  EXPECT_EQ(c.epochs, 0);
  EXPECT_DOUBLE_EQ(c.clip_grad_norm, 1.0);
  EXPECT_EQ(c.log_interval, 50);
  EXPECT_EQ(c.checkpoint_path, "");
}

TEST(TrainConfig, UnknownKeysNameTheKeyAndTheAllowedOnes) {
  EXPECT_THAT(error_of(with("momentum = 0.9", "momentun = 0.9")),
              HasSubstr("unknown key 'optimizer.momentun' (did you mean 'momentum'?); allowed in "
                        "[optimizer]: name, lr, momentum, dampening, nesterov, weight_decay"));
  EXPECT_THAT(error_of(with("seed = 7", "seeds = 7")),
              HasSubstr("unknown key 'seeds' (did you mean 'seed'?); allowed in the top level: "
                        "seed, device, target, model, data, optimizer, schedule, train, sample"));
  EXPECT_THAT(error_of(with("steps = 100", "step = 100")),
              HasSubstr("unknown key 'train.step' (did you mean 'steps'?)"));
}

TEST(TrainConfig, WrongValuesNameTheKeyAndWhatIsAllowed) {
  EXPECT_EQ(error_of(with("device = \"cpu\"", "device = \"gpu\"")),
            "run.toml: key 'device': 'gpu' is not allowed; allowed: auto, cpu, opencl:N, cuda:N "
            "(N = 0, 1, ...)");
  EXPECT_EQ(error_of(with("name = \"sgd\"", "name = \"adam\"")),
            "run.toml: key 'optimizer.name': 'adam' is not allowed; allowed: adamw, sgd");
  EXPECT_EQ(error_of(with("name = \"warmup_cosine\"", "name = \"linear\"")),
            "run.toml: key 'schedule.name': 'linear' is not allowed; allowed: constant, cosine, "
            "warmup_constant, warmup_cosine");
  EXPECT_EQ(error_of(with("name = \"fashion_mnist\"", "name = \"cifar10\"")),
            "run.toml: key 'data.name': 'cifar10' is not allowed; allowed: fashion_mnist, mnist, "
            "text, synthetic");
  EXPECT_EQ(error_of(with("batch_size = 16", "batch_size = 0")),
            "run.toml: key 'data.batch_size': must be >= 1, got 0");
  EXPECT_EQ(error_of(with("steps = 100", "steps = 100\nepochs = 2")),
            "run.toml: [train] needs exactly one of 'train.steps' and 'train.epochs'");
  EXPECT_THAT(error_of(with("lr = 0.05", "lr = \"fast\"")),
              HasSubstr("key 'optimizer.lr': expected a number, got a string"));
  EXPECT_THAT(error_of(with("[model]\nname = \"mlp\"", "[model]")),
              HasSubstr("missing key 'model.name'"));
}

// The device is the one [target] setting (ops/target_config.h); the top-level `device` is its
// older spelling. Form is checked when the file is read; whether the device is here, when the
// run is made.
// A fused step's replay sees kernel launches only: collectives and DP-SGD's clipping write
// gradients outside them, so fuse is refused beside [distributed] and [privacy], naming both.
TEST(TrainConfig, FuseIsRefusedWithDistributedAndPrivacy) {
  const std::string fused = with("steps = 100", "steps = 100\nfuse = true");
  EXPECT_TRUE(parse_train_config(Config::parse(fused, "run.toml").value()).ok());
  EXPECT_THAT(error_of(fused + "[distributed]\n"),
              HasSubstr("key 'train.fuse' (or --fuse): not yet with [distributed]"));
  std::string dp = fused;
  dp.replace(dp.find("clip_grad_norm = 1.0"), 20, "");
  dp += "[privacy]\nnoise_multiplier = 0.7\nmax_grad_norm = 1.0\n";
  EXPECT_THAT(error_of(dp), HasSubstr("key 'train.fuse' (or --fuse): not yet with [privacy]"));
}

TEST(TrainConfig, TheDeviceIsTheTargetTable) {
  // [target] goes before [model] (a key after a table header belongs to that table).
  const std::string opencl = with("device = \"cpu\"\n[model]",
                                  "[target]\ndevice = \"opencl:1\"\n[target.opencl]\nthreads = "
                                  "64\n[model]");
  TrainConfig c = parse_train_config(Config::parse(opencl, "run.toml").value()).value();
  EXPECT_EQ(c.target.device, "opencl:1");
  EXPECT_EQ(c.target.key, "target.device");
  EXPECT_EQ(c.target.options.at(DeviceKind::kOpenCL).threads_per_block, 64);

  EXPECT_EQ(error_of(with("[model]", "[target]\ndevice = \"cpu\"\n[model]")),
            "run.toml: key 'device': the device is set twice, here and in 'target.device'; keep "
            "'[target] device' (the top-level 'device' is its older spelling)");
  EXPECT_EQ(error_of(with("[model]", "[target.cuda]\nthreads = 128\n[model]")),
            "run.toml: key 'target.cuda': options for cuda devices, but 'device' = \"cpu\" is a "
            "cpu device; remove the table or change the device");
}

// Numbers that would train to NaN, or silently change the run, are config errors naming the key.
TEST(TrainConfig, NonFiniteAndInconsistentNumbersNameTheKey) {
  EXPECT_EQ(error_of(with("lr = 0.05", "lr = nan")),
            "run.toml: key 'optimizer.lr': must be a finite number, got nan");
  EXPECT_EQ(error_of(with("lr = 0.05", "lr = inf")),
            "run.toml: key 'optimizer.lr': must be a finite number, got inf");
  EXPECT_EQ(
      error_of(with("name = \"sgd\"\nlr = 0.05\nmomentum = 0.9", "name = \"adamw\"\neps = nan")),
      "run.toml: key 'optimizer.eps': must be a finite number, got nan");
  EXPECT_EQ(error_of(with("name = \"sgd\"\nlr = 0.05\nmomentum = 0.9",
                          "name = \"adamw\"\nbetas = [nan, 0.999]")),
            "run.toml: key 'optimizer.betas': expected two numbers in [0, 1)");
  EXPECT_EQ(error_of(with("clip_grad_norm = 1.0", "clip_grad_norm = nan")),
            "run.toml: key 'train.clip_grad_norm': must be a finite number, got nan");
  EXPECT_EQ(error_of(with("warmup_steps = 10", "warmup_steps = 10\nmin_lr = 0.1")),
            "run.toml: key 'schedule.min_lr': must be <= the optimizer's lr (0.05), got 0.1");
  EXPECT_EQ(error_of(with("warmup_steps = 10", "warmup_steps = 10\nmin_lr = -inf")),
            "run.toml: key 'schedule.min_lr': must be a finite number, got -inf");
}

TEST(TrainConfig, PrecisionIsFp32Bf16OrFp16) {
  TrainConfig fp32 = parse_train_config(Config::parse(kGood, "run.toml").value()).value();
  EXPECT_EQ(fp32.precision, "fp32");
  EXPECT_EQ(fp32.compute_dtype(), DType::kF32);
  for (auto [name, dtype] : {std::pair{"bf16", DType::kBF16}, std::pair{"fp16", DType::kF16}}) {
    std::string text =
        with("clip_grad_norm = 1.0", fmt::format("clip_grad_norm = 1.0\nprecision = \"{}\"", name));
    TrainConfig c = parse_train_config(Config::parse(text, "run.toml").value()).value();
    EXPECT_EQ(c.precision, name);
    EXPECT_EQ(c.compute_dtype(), dtype);
  }
  EXPECT_EQ(error_of(with("clip_grad_norm = 1.0", "precision = \"half\"")),
            "run.toml: key 'train.precision': 'half' is not allowed; allowed: fp32, bf16, fp16");
}

TEST(TrainConfig, MemoryLimitIsASizeOrTheCgroup) {
  auto limit_of = [](const std::string& value) {
    std::string text = with("clip_grad_norm = 1.0",
                            fmt::format("clip_grad_norm = 1.0\nmemory_limit = \"{}\"", value));
    return parse_train_config(Config::parse(text, "run.toml").value()).value().memory_limit;
  };
  EXPECT_EQ(parse_train_config(Config::parse(kGood, "run.toml").value()).value().memory_limit, 0);
  EXPECT_EQ(limit_of("6GiB"), int64_t(6) << 30);
  EXPECT_EQ(limit_of("512 MB"), int64_t(512000000));
  EXPECT_EQ(limit_of("1.5KiB"), int64_t(1536));
  EXPECT_EQ(limit_of("4096"), int64_t(4096));
  EXPECT_EQ(limit_of("cgroup"), -1);
  EXPECT_THAT(error_of(with("clip_grad_norm = 1.0", "memory_limit = \"lots\"")),
              HasSubstr("run.toml: key 'train.memory_limit': 'lots' is not a size"));
  EXPECT_THAT(error_of(with("clip_grad_norm = 1.0", "memory_limit = \"-2GB\"")),
              HasSubstr("'-2GB' is not a size"));
  EXPECT_THAT(error_of(with("clip_grad_norm = 1.0", "memory_limit = \"2 parsecs\"")),
              HasSubstr("'2 parsecs' is not a size"));
}

TEST(ModelRegistry, UnknownModelsAndKeysAreNamed) {
  Config cfg =
      Config::parse("[model]\nname = \"cnnn\"\n[other]\nname = \"mlp\"\nhiden = [4]\n", "m.toml")
          .value();
  ModelContext context{.input_shape = {28, 28}, .classes = 10};
  Expected<std::unique_ptr<nn::Module>> unknown = make_model(cfg.table("model").value(), context);
  ASSERT_FALSE(unknown.ok());
  // Other models may be registered too; these two are built in.
  EXPECT_THAT(unknown.status().message(),
              HasSubstr("m.toml: key 'model.name': unknown model 'cnnn'; allowed: cnn, "));
  EXPECT_THAT(unknown.status().message(), HasSubstr("mlp"));
  Expected<std::unique_ptr<nn::Module>> typo = make_model(cfg.table("other").value(), context);
  ASSERT_FALSE(typo.ok());
  EXPECT_THAT(typo.status().message(),
              HasSubstr("unknown key 'other.hiden' (did you mean 'hidden'?); allowed in [other]: "
                        "name, hidden"));
}

TEST(ModelRegistry, MakesTheMlpWithTheSizesOfTheData) {
  Config cfg = Config::parse("name = \"mlp\"\nhidden = [20, 30]\n", "m.toml").value();
  auto model = make_model(cfg, {.input_shape = {28, 28}, .classes = 10}).value();
  // 784*20+20 + 20*30+30 + 30*10+10
  EXPECT_EQ(model->num_parameters(), 15700 + 630 + 310);
}

}  // namespace
}  // namespace tessel::train
