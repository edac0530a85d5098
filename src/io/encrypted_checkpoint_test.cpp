// Encrypted checkpoints (save_checkpoint / load_checkpoint with a key): they come back as saved,
// the tensor names are not in the file, and every tamper case the issue lists (a wrong key, each
// byte of a small checkpoint flipped in turn, a cut at every 1 KiB boundary) is refused with an
// error naming the file and what failed, never with weights.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "io/checkpoint.h"
#include "secure/secret_key.h"
#include "support/atomic_file.h"

namespace tessel {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tessel_eckpt_XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A plain overwrite: the tamper loops write hundreds of files, and fsync would dominate.
void overwrite(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

Checkpoint checkpoint_of(int64_t weights) {
  Checkpoint c;
  std::vector<float> w(weights);
  for (int64_t i = 0; i < weights; ++i)
    w[i] = 0.01f * float(i) - 1.0f;
  c.model["classifier.weight"] = *Tensor::from_vector<float>(w, {weights});
  c.model["classifier.bias"] = *Tensor::from_vector<float>({0.5f, -0.5f}, {2});
  c.optimizer["state.classifier.weight.exp_avg"] = *Tensor::full({weights}, 0.25, DType::kF32);
  c.metadata = {{"step", "12"}};
  return c;
}

TEST(EncryptedCheckpoint, RoundTripsAndHidesNames) {
  TempDir dir;
  const auto key = secure::SecretKey::generate();
  const std::string path = dir.file("ckpt.safetensors");
  ASSERT_TRUE(save_checkpoint(path, checkpoint_of(1000), &key).ok());
  const std::string raw = *read_file(path);
  EXPECT_EQ(raw.find("classifier"), std::string::npos);
  EXPECT_EQ(raw.find("exp_avg"), std::string::npos);
  EXPECT_EQ(raw.find("tessel.checkpoint"), std::string::npos);
  Expected<Checkpoint> back = load_checkpoint(path, &key);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back->get_int("step"), 12);
  const Tensor& w = back->model.at("classifier.weight");
  ASSERT_EQ(w.numel(), 1000);
  for (int64_t i = 0; i < 1000; ++i)
    ASSERT_EQ(w.data<float>()[i], 0.01f * float(i) - 1.0f);
  EXPECT_EQ(back->optimizer.at("state.classifier.weight.exp_avg").data<float>()[999], 0.25f);

  // Without the key, and with a key for a plain file: errors that say what is wrong.
  Expected<Checkpoint> no_key = load_checkpoint(path);
  ASSERT_FALSE(no_key.ok());
  EXPECT_NE(no_key.status().message().find("encrypted; give its key"), std::string::npos);
  ASSERT_TRUE(save_checkpoint(dir.file("plain.safetensors"), checkpoint_of(10)).ok());
  Expected<Checkpoint> plain = load_checkpoint(dir.file("plain.safetensors"), &key);
  ASSERT_FALSE(plain.ok());
  EXPECT_NE(plain.status().message().find("not an encrypted tessel file"), std::string::npos);
}

TEST(EncryptedCheckpoint, WrongKeyIsRefused) {
  TempDir dir;
  const auto key = secure::SecretKey::generate(), other = secure::SecretKey::generate();
  const std::string path = dir.file("ckpt.safetensors");
  ASSERT_TRUE(save_checkpoint(path, checkpoint_of(10), &key).ok());
  Expected<Checkpoint> back = load_checkpoint(path, &other);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find(path), std::string::npos);
  EXPECT_NE(back.status().message().find("wrong key"), std::string::npos);
}

TEST(EncryptedCheckpoint, EachFlippedByteIsRefused) {
  TempDir dir;
  const auto key = secure::SecretKey::generate();
  const std::string path = dir.file("ckpt.safetensors");
  ASSERT_TRUE(save_checkpoint(path, checkpoint_of(10), &key).ok());
  const std::string good = *read_file(path);
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = char(bad[i] ^ 0x01);
    overwrite(path, bad);
    Expected<Checkpoint> back = load_checkpoint(path, &key);
    ASSERT_FALSE(back.ok()) << "byte " << i << " of " << good.size() << " flipped: loaded anyway";
    EXPECT_NE(back.status().message().find(path), std::string::npos) << back.status().message();
  }
}

TEST(EncryptedCheckpoint, EveryKibibyteCutIsRefused) {
  TempDir dir;
  const auto key = secure::SecretKey::generate();
  const std::string path = dir.file("ckpt.safetensors");
  ASSERT_TRUE(save_checkpoint(path, checkpoint_of(40'000), &key).ok());  // ~313 KiB, 5 chunks
  const std::string good = *read_file(path);
  ASSERT_GT(good.size(), 300'000u);
  for (size_t cut = 0; cut < good.size(); cut += 1024) {
    overwrite(path, good.substr(0, cut));
    Expected<Checkpoint> back = load_checkpoint(path, &key);
    ASSERT_FALSE(back.ok()) << "cut at " << cut;
    EXPECT_NE(back.status().message().find(path), std::string::npos);
    EXPECT_NE(back.status().message().find("truncated"), std::string::npos)
        << back.status().message();
  }
}

}  // namespace
}  // namespace tessel
