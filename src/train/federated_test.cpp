// Federated training with an aggregator (rank 0) and 2 data owners, ranks as threads (shm):
//  - after one round the owners hold the average of two independent trainers' weights, each run
//    alone on its shard (the reference: plain trainers and an average computed here), to within
//    the fixed-point bound under Paillier and exactly in the clear;
//  - over several rounds the encrypted run's model equals the plaintext federated run's to within
//    the fixed-point error and reaches the same accuracy (within 0.1 points).
#include "train/federated.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "secure/paillier.h"
#include "train/testing/trainer_check.h"

namespace tessel::train {
namespace {

TrainConfig config(const std::string& folder, int64_t steps, bool secure) {
  std::string text = fmt::format(R"(
seed = 4
[model]
name = "mlp"
hidden = [8]
[data]
name = "fashion_mnist"
batch_size = 16
eval_batch_size = 5000
[optimizer]
name = "sgd"
lr = 0.05
[train]
steps = {}
log_interval = 100
[federated]
local_steps = 4
secure = {}
{}
)",
                                 steps, secure ? "true" : "false",
                                 secure ? fmt::format("key_file = \"{}/owners.key\"", folder) : "");
  return parse_train_config(Config::parse(text, "federated.toml").value()).value();
}

std::vector<FederatedSummary> run_ranks(const TrainConfig& c, int ranks) {
  auto groups = dist::ProcessGroup::in_process(ranks).value();
  std::vector<FederatedSummary> out(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      Expected<FederatedSummary> s = run_federated(c, *groups[size_t(r)], check::quiet());
      ASSERT_TRUE(s.ok()) << s.status().to_string();
      out[size_t(r)] = std::move(*s);
    });
  for (auto& t : threads)
    t.join();
  return out;
}

// The parameters' values in entry order (the flat buffers' alignment gaps left out).
std::vector<float> values_of(Trainer& t) {
  std::vector<float> out;
  for (const auto& e : t.parameters().entries()) {
    std::vector<float> v = t.parameters()
                               .groups()[e.group]
                               .values.slice(0, e.offset, e.offset + e.numel)
                               .value()
                               .to_vector<float>()
                               .value();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST(Federated, OneRoundIsTheAverageOfTheOwnersLocalModels) {
  const std::string folder = check::temp_folder("Federated", "one_round");
  ASSERT_TRUE(secure::SecretKey::generate().save(folder + "/owners.key").ok());
  // The reference: each owner's trainer alone on its shard for 4 steps, averaged here.
  std::vector<std::vector<float>> local;
  for (int shard = 0; shard < 2; ++shard) {
    TrainerOptions options = check::quiet();
    options.data_shard = shard;
    options.data_shards = 2;
    auto t = Trainer::create(config(folder, 4, false), options).value();
    ASSERT_TRUE(t->run().ok());
    local.push_back(values_of(*t));
  }
  for (bool secure : {false, true}) {
    std::vector<FederatedSummary> ranks = run_ranks(config(folder, 4, secure), 3);
    EXPECT_TRUE(ranks[0].aggregator);
    EXPECT_TRUE(ranks[0].weights.empty());  // the aggregator holds no model
    ASSERT_EQ(ranks[1].weights.size(), local[0].size());
    EXPECT_EQ(ranks[1].weights, ranks[2].weights);
    const int frac_bits = tessel::secure::PackedCodec::kDefaultFracBits;
    const double bound = secure ? 2 * std::ldexp(1.0, -(frac_bits + 1)) / 2 + 1e-7 : 1e-7;
    for (size_t i = 0; i < local[0].size(); ++i) {
      ASSERT_NEAR(ranks[1].weights[i], 0.5 * (double(local[0][i]) + double(local[1][i])), bound)
          << (secure ? "secure" : "plain") << ", value " << i;
    }
    if (secure) {
      EXPECT_EQ(ranks[1].ciphertexts_per_round, 156);  // 6370 values / 41, rounded up
    }
  }
  std::filesystem::remove_all(folder);
}

TEST(Federated, EncryptedAggregationMatchesThePlaintextRun) {
  const std::string folder = check::temp_folder("Federated", "rounds");
  ASSERT_TRUE(secure::SecretKey::generate().save(folder + "/owners.key").ok());
  std::vector<FederatedSummary> plain = run_ranks(config(folder, 8, false), 3);
  std::vector<FederatedSummary> secure = run_ranks(config(folder, 8, true), 3);
  ASSERT_EQ(secure[1].rounds, 2);
  double largest = 0.0;
  for (size_t i = 0; i < plain[1].weights.size(); ++i)
    largest = std::max(largest, std::abs(double(plain[1].weights[i]) - secure[1].weights[i]));
  EXPECT_LT(largest, 1e-5);
  EXPECT_NEAR(secure[1].final_eval.accuracy, plain[1].final_eval.accuracy, 0.001);
  EXPECT_GT(secure[1].final_eval.accuracy, 0.2);  // above chance (0.1) after 8 steps
  std::filesystem::remove_all(folder);
}

}  // namespace
}  // namespace tessel::train
