// XXH64 against digests from the reference implementation (the `xxhash` Python package 4.1.0,
// which wraps libxxhash: xxhash.xxh64(data[:n]).hexdigest() for data[i] = (7 * i + 1) % 256),
// covering every tail path (8-, 4- and 1-byte steps) and the 32-byte stripe loop; streaming in
// any split must give the same digest.
#include "support/hash.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tessel {
namespace {

std::vector<unsigned char> pattern(size_t n) {
  std::vector<unsigned char> data(n);
  for (size_t i = 0; i < n; ++i)
    data[i] = static_cast<unsigned char>((i * 7 + 1) % 256);
  return data;
}

struct Vector {
  size_t length;
  uint64_t digest;
};

constexpr Vector kReference[] = {
    {0, 0xef46db3751d8e999ull},   {1, 0x8a4127811b21e730ull},  {3, 0xb6e6c910c2fd373aull},
    {4, 0x22eda2cf6af4c124ull},   {5, 0x1da48e4b4cafab76ull},  {7, 0x34084d91a233a751ull},
    {8, 0xc6f1803a5e0b3222ull},   {9, 0x9e8adf2a0ccdb6daull},  {12, 0x9178b724dce384c0ull},
    {15, 0x514c6f58d37ce6f1ull},  {16, 0xafe8f989a0735a8eull}, {17, 0xb191cd44210ea488ull},
    {31, 0x6ab1c40e29f50073ull},  {32, 0x5a0756fbe9ecd3d1ull}, {33, 0xdc50cdc37bb9c183ull},
    {63, 0x10dd94885c71894aull},  {64, 0x90083da9cdb9d795ull}, {100, 0xd248bfc5208b0b16ull},
    {300, 0xe99d1b8a38d407ddull},
};

TEST(Hash, MatchesReferenceDigests) {
  const std::vector<unsigned char> data = pattern(300);
  for (const Vector& v : kReference) {
    EXPECT_EQ(hash_bytes(data.data(), v.length), v.digest) << "length " << v.length;
  }
  EXPECT_EQ(hash_bytes(data.data(), 300, 0x9e3779b97f4a7c15ull), 0x16359d28bbde5b6eull);
  EXPECT_EQ(hash_text("abc"), 0x44bc2cf5ad770999ull);
  EXPECT_EQ(hash_text("tessel", 12345), 0xe1883188d9186b53ull);
}

TEST(Hash, StreamingInAnySplitGivesTheSameDigest) {
  const std::vector<unsigned char> data = pattern(300);
  const uint64_t whole = hash_bytes(data.data(), data.size());
  for (size_t piece : {1, 3, 7, 8, 31, 32, 33, 100}) {
    Hasher h;
    for (size_t at = 0; at < data.size(); at += piece) {
      h.update(data.data() + at, std::min(piece, data.size() - at));
    }
    EXPECT_EQ(h.digest(), whole) << "pieces of " << piece;
  }
}

TEST(Hash, HexAndFields) {
  EXPECT_EQ(hash_hex(0xef46db3751d8e999ull), "ef46db3751d8e999");
  EXPECT_EQ(hash_hex(0x1ull), "0000000000000001");
  EXPECT_EQ(Hasher().hex_digest(), "ef46db3751d8e999");
  const uint64_t ab_c = Hasher().add_field("ab").add_field("c").digest();
  const uint64_t a_bc = Hasher().add_field("a").add_field("bc").digest();
  EXPECT_NE(ab_c, a_bc);
  EXPECT_NE(hash_text("ab"), hash_text("ab", 1));  // the seed matters
}

}  // namespace
}  // namespace tessel
