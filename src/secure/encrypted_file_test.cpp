// Encrypted files: what goes in comes out across chunk boundaries; a wrong key, any changed byte,
// a cut, a swap of chunks or appended bytes is refused with an error naming the file and the
// failure; keys read from hex files, raw files and environment variables agree.
#include "secure/encrypted_file.h"

#include <gtest/gtest.h>
#include <sodium.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "support/atomic_file.h"
#include "support/random.h"

namespace tessel::secure {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tessel_enc_XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::string random_bytes(size_t n, uint64_t seed) {
  Pcg32 rng(seed);
  std::string out(n, '\0');
  for (char& c : out)
    c = char(rng.next_u32() & 0xff);
  return out;
}

// A plain overwrite: the tamper loops write thousands of files, and fsync would dominate.
void write_plain(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

Status encrypt_with_chunk(const std::string& path, const std::string& bytes, const SecretKey& key,
                          uint32_t chunk, size_t piece) {
  TESSEL_ASSIGN_OR_RETURN(EncryptedFileWriter out,
                          EncryptedFileWriter::open(path, key, bytes.size(), chunk));
  for (size_t at = 0; at < bytes.size(); at += piece)
    TESSEL_TRY(out.write(bytes.data() + at, std::min(piece, bytes.size() - at)));
  return out.commit();
}

Expected<std::string> read_all(const std::string& path, const SecretKey& key) {
  TESSEL_ASSIGN_OR_RETURN(EncryptedFileReader in, EncryptedFileReader::open(path, key));
  std::string out(in.size(), '\0');
  // Uneven pieces, so reads straddle chunk boundaries.
  for (size_t at = 0, piece = 1; at < out.size(); at += piece, piece = piece * 3 % 97 + 1)
    TESSEL_TRY(in.read_at(out.data() + at, std::min(piece, out.size() - at), at));
  TESSEL_TRY(in.finish());
  return out;
}

TEST(EncryptedFile, RoundTripsAcrossChunkBoundaries) {
  TempDir dir;
  const SecretKey key = SecretKey::generate();
  for (size_t size : {0, 1, 63, 64, 65, 128, 1000}) {
    const std::string bytes = random_bytes(size, size + 1);
    const std::string path = dir.file("f" + std::to_string(size));
    ASSERT_TRUE(encrypt_with_chunk(path, bytes, key, 64, 7).ok());
    EXPECT_TRUE(is_encrypted_file(path));
    Expected<std::string> back = read_all(path, key);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(*back, bytes) << size;
    // The file is the header, the plaintext and one 17-byte tag per chunk, nothing else.
    const size_t chunks = std::max<size_t>(1, (size + 63) / 64);
    EXPECT_EQ(std::filesystem::file_size(path), 56 + size + 17 * chunks);
    // The plaintext does not appear in the file.
    if (size >= 64) {
      std::string raw = *read_file(path);
      EXPECT_EQ(raw.find(bytes.substr(0, 16)), std::string::npos);
    }
  }
}

TEST(EncryptedFile, WrongKeyIsNamed) {
  TempDir dir;
  const SecretKey key = SecretKey::generate(), other = SecretKey::generate();
  const std::string path = dir.file("f");
  ASSERT_TRUE(encrypt_with_chunk(path, "secret weights", key, 64, 5).ok());
  Expected<EncryptedFileReader> in = EncryptedFileReader::open(path, other);
  ASSERT_FALSE(in.ok());
  EXPECT_NE(in.status().message().find(path), std::string::npos);
  EXPECT_NE(in.status().message().find("wrong key"), std::string::npos);
  EXPECT_NE(in.status().message().find(key.key_id()), std::string::npos);
}

TEST(EncryptedFile, EveryFlippedByteIsRefused) {
  TempDir dir;
  const SecretKey key = SecretKey::generate();
  const std::string bytes = random_bytes(300, 7);  // 5 chunks of 64
  const std::string path = dir.file("f");
  ASSERT_TRUE(encrypt_with_chunk(path, bytes, key, 64, 300).ok());
  const std::string good = *read_file(path);
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = char(bad[i] ^ (1 << (i % 8)));
    write_plain(path, bad);
    Expected<std::string> back = read_all(path, key);
    ASSERT_FALSE(back.ok()) << "byte " << i << " flipped was not noticed";
    EXPECT_NE(back.status().message().find(path), std::string::npos) << back.status().message();
  }
}

TEST(EncryptedFile, CutsSwapsAndAppendsAreRefused) {
  TempDir dir;
  const SecretKey key = SecretKey::generate();
  const std::string path = dir.file("f");
  ASSERT_TRUE(encrypt_with_chunk(path, random_bytes(256, 3), key, 64, 256).ok());
  const std::string good = *read_file(path);
  const size_t chunk = 64 + 17;
  for (size_t cut = 0; cut < good.size(); ++cut) {
    write_plain(path, good.substr(0, cut));
    Expected<std::string> back = read_all(path, key);
    ASSERT_FALSE(back.ok()) << cut;
    EXPECT_NE(back.status().message().find("truncated"), std::string::npos)
        << back.status().message();
  }
  // A cut at a chunk boundary with the size field rewritten to match: the first chunk, which
  // authenticates the header, fails.
  std::string cut = good.substr(0, 56 + 3 * chunk);
  const uint64_t smaller = 3 * 64;
  for (int i = 0; i < 8; ++i)
    cut[16 + i] = char(smaller >> (8 * i));
  write_plain(path, cut);
  Expected<std::string> back = read_all(path, key);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("chunk 0 of 3 failed authentication"), std::string::npos)
      << back.status().message();
  // Chunks 1 and 2 swapped.
  std::string swapped = good;
  std::copy_n(good.begin() + 56 + 2 * chunk, chunk, swapped.begin() + 56 + chunk);
  std::copy_n(good.begin() + 56 + chunk, chunk, swapped.begin() + 56 + 2 * chunk);
  write_plain(path, swapped);
  back = read_all(path, key);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("chunk 1 of 4 failed authentication"), std::string::npos)
      << back.status().message();
  write_plain(path, good + "x");
  back = read_all(path, key);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("appended"), std::string::npos);
}

TEST(EncryptedFile, WholeFileEncryptDecryptVerify) {
  TempDir dir;
  const SecretKey key = SecretKey::generate();
  const std::string bytes = random_bytes(200'000, 11);  // four 64 KiB chunks
  write_plain(dir.file("plain"), bytes);
  ASSERT_TRUE(encrypt_file(dir.file("plain"), dir.file("enc"), key).ok());
  Expected<uint64_t> size = verify_file(dir.file("enc"), key);
  ASSERT_TRUE(size.ok()) << size.status().to_string();
  EXPECT_EQ(*size, bytes.size());
  ASSERT_TRUE(decrypt_file(dir.file("enc"), dir.file("back"), key).ok());
  EXPECT_EQ(*read_file(dir.file("back")), bytes);
  // A damaged file leaves no plaintext behind.
  std::string bad = *read_file(dir.file("enc"));
  bad[bad.size() - 5] ^= 1;
  write_plain(dir.file("enc"), bad);
  EXPECT_FALSE(verify_file(dir.file("enc"), key).ok());
  EXPECT_FALSE(decrypt_file(dir.file("enc"), dir.file("back2"), key).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.file("back2")));
}

TEST(EncryptedFile, ReadsMoveForwardOnly) {
  TempDir dir;
  const SecretKey key = SecretKey::generate();
  ASSERT_TRUE(encrypt_with_chunk(dir.file("f"), random_bytes(300, 1), key, 64, 300).ok());
  Expected<EncryptedFileReader> in = EncryptedFileReader::open(dir.file("f"), key);
  ASSERT_TRUE(in.ok());
  char buffer[10];
  ASSERT_TRUE(in->read_at(buffer, 10, 200).ok());
  EXPECT_FALSE(in->read_at(buffer, 10, 0).ok());
  EXPECT_FALSE(in->read_at(buffer, 10, 295).ok());  // past the end
}

TEST(SecretKey, HexRawAndEnvironmentAgree) {
  TempDir dir;
  const SecretKey key = SecretKey::generate();
  ASSERT_TRUE(key.save(dir.file("hex.key")).ok());
  EXPECT_FALSE(key.save(dir.file("hex.key")).ok());  // never overwrites a key
  EXPECT_EQ(
      std::filesystem::status(dir.file("hex.key")).permissions() & std::filesystem::perms::all,
      std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  write_plain(dir.file("raw.key"), std::string(reinterpret_cast<const char*>(key.data()), 32));
  const std::string hex = *read_file(dir.file("hex.key"));
  ::setenv("TESSEL_TEST_KEY", hex.c_str(), 1);
  const auto expect_same_key = [&](const Expected<SecretKey>& k) {
    ASSERT_TRUE(k.ok()) << k.status().to_string();
    EXPECT_EQ(sodium_memcmp(k->data(), key.data(), 32), 0);
    EXPECT_EQ(k->key_id(), key.key_id());
  };
  expect_same_key(SecretKey::from_file(dir.file("hex.key")));
  expect_same_key(SecretKey::from_file(dir.file("raw.key")));
  expect_same_key(SecretKey::from_env("TESSEL_TEST_KEY"));
  ::unsetenv("TESSEL_TEST_KEY");
  EXPECT_FALSE(SecretKey::from_env("TESSEL_TEST_KEY").ok());
  write_plain(dir.file("short.key"), "abcd");
  Expected<SecretKey> bad = SecretKey::from_file(dir.file("short.key"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("64 hex digits"), std::string::npos);
  EXPECT_NE(SecretKey::generate().key_id(), key.key_id());
}

}  // namespace
}  // namespace tessel::secure
