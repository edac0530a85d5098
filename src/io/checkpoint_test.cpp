// Checkpoint bundles: model, optimizer state and metadata come back as saved; a failed save leaves
// the previous checkpoint whole; a data position and RNG saved in one continue the same stream.
#include "io/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "data/batches.h"
#include "support/atomic_file.h"

namespace tessel {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tessel_ckpt_XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

Checkpoint small_checkpoint(float scale) {
  Checkpoint c;
  c.model["fc.weight"] =
      *Tensor::from_vector<float>({1 * scale, 2 * scale, 3 * scale, 4 * scale}, {2, 2});
  c.model["fc.bias"] = *Tensor::from_vector<float>({0.5f, -0.5f}, {2});
  c.optimizer["state.fc.weight.exp_avg"] = *Tensor::full({2, 2}, 0.25, DType::kF32);
  c.optimizer["state.fc.weight.step"] = *Tensor::from_vector<int64_t>({12}, {});
  c.metadata = {{"step", "12"}, {"config.hash", "0123abcd"}};
  return c;
}

TEST(Checkpoint, RoundTripsModelOptimizerAndMetadata) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  ASSERT_TRUE(save_checkpoint(path, small_checkpoint(1.0f)).ok());

  // As a plain safetensors file: model names unchanged, optimizer state prefixed.
  SafetensorsFile raw = *load_safetensors(path);
  EXPECT_TRUE(raw.tensors.contains("fc.weight"));
  EXPECT_TRUE(raw.tensors.contains("optimizer.state.fc.weight.exp_avg"));
  EXPECT_EQ(raw.metadata.at("format"), kCheckpointFormat);

  Expected<Checkpoint> back = load_checkpoint(path);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->model.size(), 2u);
  EXPECT_EQ(back->optimizer.size(), 2u);
  EXPECT_EQ(*back->model.at("fc.weight").to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(*back->optimizer.at("state.fc.weight.exp_avg").to_vector<float>(),
            (std::vector<float>(4, 0.25f)));
  EXPECT_EQ(*back->optimizer.at("state.fc.weight.step").to_vector<int64_t>(),
            (std::vector<int64_t>{12}));
  EXPECT_EQ(*back->get_int("step"), 12);
  EXPECT_EQ(*back->get("config.hash"), "0123abcd");
  EXPECT_FALSE(back->metadata.contains("format"));

  Expected<std::string> missing = back->get("rng.dropout");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(
      missing.status().message().find("no metadata key 'rng.dropout' (present: config.hash, step)"),
      std::string::npos)
      << missing.status().message();
  Expected<int64_t> not_int = back->get_int("config.hash");
  ASSERT_FALSE(not_int.ok());
  EXPECT_NE(not_int.status().message().find("expected an integer"), std::string::npos);
}

TEST(Checkpoint, RefusesAmbiguousNamesAndForeignFiles) {
  TempDir dir;
  Checkpoint c = small_checkpoint(1.0f);
  c.model["optimizer.lr"] = *Tensor::zeros({1}, DType::kF32);
  EXPECT_EQ(save_checkpoint(dir.file("a"), c).code(), Code::kInvalidArgument);
  c = small_checkpoint(1.0f);
  c.metadata["format"] = "mine";
  EXPECT_EQ(save_checkpoint(dir.file("a"), c).code(), Code::kInvalidArgument);

  ASSERT_TRUE(save_safetensors(dir.file("plain"), {{"w", *Tensor::zeros({1}, DType::kF32)}}).ok());
  Expected<Checkpoint> foreign = load_checkpoint(dir.file("plain"));
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.status().message().find("not a tessel checkpoint"), std::string::npos);
}

TEST(Checkpoint, AFailedWriteLeavesThePreviousCheckpointIntact) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  ASSERT_TRUE(save_checkpoint(path, small_checkpoint(1.0f)).ok());
  const std::string before = *read_file(path);

  // A checkpoint too big for the file-size limit: the write fails part-way (EFBIG), as it would
  // on a full disk.
  Checkpoint big = small_checkpoint(2.0f);
  big.model["big"] = *Tensor::zeros({1 << 16}, DType::kF32);  // 256 KiB
  struct rlimit old_limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  struct rlimit limit = old_limit;
  limit.rlim_cur = 64 * 1024;
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  const Status failed = save_checkpoint(path, big);
  setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.code(), Code::kIoError) << failed.to_string();

  EXPECT_EQ(*read_file(path), before);
  EXPECT_EQ(*load_checkpoint(path)->model.at("fc.weight").to_vector<float>(),
            (std::vector<float>{1, 2, 3, 4}));
  // No temporary file left behind.
  int files = 0;
  for ([[maybe_unused]] auto& entry : std::filesystem::directory_iterator(dir.path()))
    ++files;
  EXPECT_EQ(files, 1);

  // A later save succeeds and replaces it.
  ASSERT_TRUE(save_checkpoint(path, small_checkpoint(3.0f)).ok());
  EXPECT_EQ(*load_checkpoint(path)->model.at("fc.weight").to_vector<float>(),
            (std::vector<float>{3, 6, 9, 12}));
}

// Every single-byte change of a checkpoint, in the header or in the data, is refused: the data by
// its tensor's checksum (the error names the tensor), the header by its own checksum or by the
// parser. Nothing damaged loads.
TEST(Checkpoint, EverySingleByteFlipIsRefusedNamingTheTensorOrTheHeader) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  ASSERT_TRUE(save_checkpoint(path, small_checkpoint(1.0f)).ok());
  const std::string good = *read_file(path);
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | uint8_t(good[size_t(i)]);
  const size_t data_start = 8 + header_size;
  ASSERT_LT(data_start, good.size());
  // Where each tensor's bytes are, from the header the writer wrote (largest elements first).
  SafetensorsFile raw = *load_safetensors(path);
  const std::string flipped = dir.file("flipped.safetensors");
  int header_refusals = 0, data_refusals = 0;
  for (size_t at = 0; at < good.size(); ++at) {
    for (unsigned char mask : {0x01, 0xFF}) {
      std::string bad = good;
      bad[at] = char(uint8_t(bad[at]) ^ mask);
      std::ofstream(flipped, std::ios::binary | std::ios::trunc) << bad;
      Expected<Checkpoint> back = load_checkpoint(flipped);
      ASSERT_FALSE(back.ok()) << "a flip of byte " << at << " (mask " << int(mask) << ") loaded";
      const std::string& m = back.status().message();
      EXPECT_EQ(m.rfind(flipped, 0), 0u) << m;
      if (at < data_start) {
        ++header_refusals;
        continue;
      }
      ++data_refusals;
      EXPECT_NE(m.find("checksum mismatch"), std::string::npos) << m;
      bool names_a_tensor = false;
      for (const auto& [name, tensor] : raw.tensors)
        names_a_tensor |= m.find("tensor '" + name + "'") != std::string::npos;
      EXPECT_TRUE(names_a_tensor) << m;
    }
  }
  EXPECT_EQ(header_refusals, 2 * int(data_start));
  EXPECT_EQ(data_refusals, 2 * int(good.size() - data_start));
  // Trailing bytes are refused too.
  std::ofstream(flipped, std::ios::binary | std::ios::trunc) << good << "x";
  Expected<Checkpoint> longer = load_checkpoint(flipped);
  ASSERT_FALSE(longer.ok());
  EXPECT_NE(longer.status().message().find("1 bytes of trailing data after the last tensor"),
            std::string::npos)
      << longer.status().to_string();
}

TEST(Checkpoint, RangedIntegersNameTheKeyAndTheRange) {
  Checkpoint c = small_checkpoint(1.0f);
  c.path = "c.safetensors";
  EXPECT_EQ(*c.get_int("step", 0, 100), 12);
  c.metadata["step"] = "-50";
  EXPECT_EQ(c.get_int("step", 0, 100).status().message(),
            "checkpoint c.safetensors: metadata 'step' is -50, expected a value in [0, 100]");
  c.metadata["step"] = "9223372036854775807";
  EXPECT_FALSE(c.get_int("step", 0, 100).ok());
  c.metadata["step"] = "99999999999999999999";
  EXPECT_NE(c.get_int("step", 0, 100).status().message().find("expected an integer"),
            std::string::npos);
}

// A save killed mid-write leaves ".<name>.tmp.<pid>.<n>"; the next save of the same path removes
// those of processes that no longer run, and leaves a live writer's alone.
TEST(Checkpoint, TheNextSaveRemovesTemporariesOfDeadWriters) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  const std::string dead = dir.file(fmt::format(".ckpt.safetensors.tmp.{}.3", child));
  const std::string live = dir.file(".ckpt.safetensors.tmp.1.0");  // init never exits
  const std::string other = dir.file(fmt::format(".other.safetensors.tmp.{}.0", child));
  for (const std::string& f : {dead, live, other}) std::ofstream(f) << "partial";
  ASSERT_TRUE(save_checkpoint(path, small_checkpoint(1.0f)).ok());
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(live));
  EXPECT_TRUE(std::filesystem::exists(other));  // another file's: not this save's business
  EXPECT_TRUE(load_checkpoint(path).ok());
}

TEST(Checkpoint, DataPositionAndRngResumeTheSameStream) {
  std::string text;
  for (int i = 0; i < 3000; ++i)
    text.push_back(static_cast<char>('A' + (i * 31 + i / 7) % 50));
  CharDataset ds = *CharDataset::from_text(text, 0.9);
  auto straight = TextBatches::make(ds, "train", 4, 16, 2024).value();
  Pcg32 dropout(77, 1);
  std::vector<std::vector<int64_t>> expected;
  std::vector<uint32_t> expected_draws;
  for (int i = 0; i < 10; ++i) {
    expected.push_back(*straight->next()->inputs.to_vector<int64_t>());
    expected_draws.push_back(dropout.next_u32());
  }

  TempDir dir;
  auto first = TextBatches::make(ds, "train", 4, 16, 2024).value();
  Pcg32 first_dropout(77, 1);
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(first->next().ok());
    first_dropout.next_u32();
  }
  Checkpoint c = small_checkpoint(1.0f);
  c.metadata["step"] = "6";
  c.metadata["data.train"] = first->position().to_string();
  c.metadata["rng.dropout"] = first_dropout.state_string();
  ASSERT_TRUE(save_checkpoint(dir.file("c"), c).ok());

  Checkpoint back = *load_checkpoint(dir.file("c"));
  auto resumed = TextBatches::make(ds, "train", 4, 16, /*seed=*/1).value();
  ASSERT_TRUE(resumed->restore(*DataPosition::parse(*back.get("data.train"))).ok());
  Pcg32 resumed_dropout = *Pcg32::from_state_string(*back.get("rng.dropout"));
  for (int i = *back.get_int("step"); i < 10; ++i) {
    EXPECT_EQ(*resumed->next()->inputs.to_vector<int64_t>(), expected[i]) << i;
    EXPECT_EQ(resumed_dropout.next_u32(), expected_draws[i]) << i;
  }
}

}  // namespace
}  // namespace tessel
