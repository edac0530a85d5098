// The trainer with [privacy]: it stops before the step that would spend more than target_epsilon
// (the reference: the accountant's closed loop over steps, computed here with
// sampled_gaussian_rdp at the run's sampling rate), reports the epsilon it spent, writes it into
// the metrics, and still learns; configs that DP-SGD cannot honour are refused.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "secure/rdp_accountant.h"
#include "train/testing/trainer_check.h"
#include "train/trainer.h"

namespace tessel::train {
namespace {

constexpr const char kConfig[] = R"(
seed = 2
[model]
name = "mlp"
hidden = [16]
[data]
name = "fashion_mnist"
batch_size = 600
eval_batch_size = 5000
[optimizer]
name = "adamw"
lr = 0.01
[train]
steps = 100
log_interval = 5
metrics_path = "{}/metrics.jsonl"
[privacy]
noise_multiplier = 0.7
max_grad_norm = 1.0
delta = 1e-5
target_epsilon = 2.7
seed = 9
{}
)";

TEST(TrainerPrivacy, StopsAtTheBudgetAndReportsEpsilon) {
  const std::string folder = check::temp_folder("TrainerPrivacy", "budget");
  const TrainConfig config =
      parse_train_config(
          Config::parse(fmt::format(fmt::runtime(kConfig), folder, ""), "dp.toml").value())
          .value();
  auto trainer = Trainer::create(config, check::quiet()).value();
  RunSummary summary = trainer->run().value();

  // q = 600 / 60000; the last step k with epsilon(k) <= 2.7.
  const std::vector<double> orders = secure::default_rdp_orders();
  const auto epsilon_after = [&](int64_t steps) {
    return secure::rdp_to_epsilon(orders, secure::sampled_gaussian_rdp(0.01, 0.7, steps, orders),
                                  1e-5)
        .epsilon;
  };
  int64_t want = 0;
  while (epsilon_after(want + 1) <= 2.7)
    ++want;
  ASSERT_GT(want, 5);
  ASSERT_LT(want, 100);
  EXPECT_TRUE(summary.budget_reached);
  EXPECT_EQ(summary.last_step, want);
  EXPECT_NEAR(summary.epsilon, epsilon_after(want), 1e-9);
  EXPECT_LE(summary.epsilon, 2.7);
  EXPECT_GT(summary.final_eval.accuracy, 0.4) << "DP-SGD should still learn something";

  std::ifstream in(folder + "/metrics.jsonl");
  double last_logged = -1;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("epsilon")) last_logged = j["epsilon"].get<double>();
  }
  EXPECT_NEAR(last_logged, epsilon_after(want / 5 * 5), 1e-9);  // logged every 5 steps
  std::filesystem::remove_all(folder);
}

TEST(TrainerPrivacy, RefusesWhatDpSgdCannotHonour) {
  for (const char* extra : {"[distributed]\n", "[schedule]\nname = \"cosine\"\n[bad]\n"}) {
    Expected<Config> c =
        Config::parse(fmt::format(fmt::runtime(kConfig), "/tmp", extra), "dp.toml");
    ASSERT_TRUE(c.ok());
    EXPECT_FALSE(parse_train_config(*c).ok()) << extra;
  }
  std::string text = fmt::format(fmt::runtime(kConfig), "/tmp", "");
  text.replace(text.find("steps = 100"), 11, "steps = 100\nclip_grad_norm = 1.0");
  Expected<TrainConfig> clip = parse_train_config(Config::parse(text, "dp.toml").value());
  ASSERT_FALSE(clip.ok());
  EXPECT_NE(clip.status().message().find("DP-SGD clips each example"), std::string::npos)
      << clip.status().message();
}

}  // namespace
}  // namespace tessel::train
