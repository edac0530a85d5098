// idx reader: files assembled byte by byte in the test, plain and gzip, every element type, and
// every kind of malformed file with the message it must give.
#include "data/idx.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>

#include "data/test_files.h"
#include "support/atomic_file.h"

namespace tessel {
namespace {

using testing::expect_contains;
using testing::idx_bytes;
using testing::TempDir;

template <typename T>
std::string big_endian(const std::vector<T>& values) {
  std::string out;
  for (T v : values) {
    unsigned char bytes[sizeof(T)];
    std::memcpy(bytes, &v, sizeof(T));
    for (size_t i = sizeof(T); i-- > 0;)
      out.push_back(static_cast<char>(bytes[i]));
  }
  return out;
}

TEST(Idx, ReadsUnsignedBytesPlainAndGzip) {
  TempDir dir;
  std::string pixels;
  for (int i = 0; i < 24; ++i)
    pixels.push_back(static_cast<char>((i * 37 + 5) & 0xff));
  const std::string bytes = idx_bytes(0x08, {2, 3, 4}, pixels);
  testing::write_plain(dir.file("a-idx3-ubyte"), bytes);
  testing::write_gzip(dir.file("a-idx3-ubyte.gz"), bytes);
  for (const char* name : {"a-idx3-ubyte", "a-idx3-ubyte.gz"}) {
    Expected<Tensor> t = read_idx(dir.file(name));
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->dtype(), DType::kU8);
    EXPECT_EQ(t->shape(), (Shape{2, 3, 4}));
    std::vector<uint8_t> values = *t->to_vector<uint8_t>();
    for (int i = 0; i < 24; ++i)
      EXPECT_EQ(values[i], (i * 37 + 5) & 0xff) << name << " " << i;
  }
}

TEST(Idx, ReadsEveryElementTypeInHostOrder) {
  TempDir dir;
  const std::string path = dir.file("x.gz");

  testing::write_gzip(path, idx_bytes(0x09, {3}, std::string{'\xff', '\x05', '\x80'}));
  EXPECT_EQ(*read_idx(path)->to_vector<int8_t>(), (std::vector<int8_t>{-1, 5, -128}));

  testing::write_gzip(path, idx_bytes(0x0B, {3}, big_endian<int16_t>({-3, 300, -32768})));
  Expected<Tensor> shorts = read_idx(path);
  ASSERT_TRUE(shorts.ok()) << shorts.status().to_string();
  EXPECT_EQ(shorts->dtype(), DType::kI32);
  EXPECT_EQ(*shorts->to_vector<int32_t>(), (std::vector<int32_t>{-3, 300, -32768}));

  testing::write_gzip(path, idx_bytes(0x0C, {2, 2}, big_endian<int32_t>({1, -2, 0x01020304, 0})));
  Expected<Tensor> ints = read_idx(path);
  EXPECT_EQ(ints->shape(), (Shape{2, 2}));
  EXPECT_EQ(*ints->to_vector<int32_t>(), (std::vector<int32_t>{1, -2, 0x01020304, 0}));

  testing::write_plain(path, idx_bytes(0x0D, {2}, big_endian<float>({1.5f, -0.25f})));
  EXPECT_EQ(*read_idx(path)->to_vector<float>(), (std::vector<float>{1.5f, -0.25f}));

  testing::write_plain(path, idx_bytes(0x0E, {1, 2}, big_endian<double>({3.25, -1e300})));
  EXPECT_EQ(*read_idx(path)->to_vector<double>(), (std::vector<double>{3.25, -1e300}));
}

// The message of reading `bytes` from a plain file and from a gzip file.
std::pair<std::string, std::string> errors_for(const TempDir& dir, const std::string& bytes) {
  testing::write_plain(dir.file("bad"), bytes);
  testing::write_gzip(dir.file("bad.gz"), bytes);
  Expected<Tensor> plain = read_idx(dir.file("bad"));
  Expected<Tensor> gz = read_idx(dir.file("bad.gz"));
  EXPECT_FALSE(plain.ok());
  EXPECT_FALSE(gz.ok());
  if (plain.ok() || gz.ok()) return {};
  EXPECT_EQ(plain.status().code(), Code::kInvalidArgument);
  return {plain.status().message(), gz.status().message()};
}

// A header that announces more data than the file holds is refused before anything is allocated
// (a 12-byte file announcing 2 GiB once took 2.1 GB and then threw std::bad_alloc): a plain file
// by its length, a gzip file by what deflate can expand to (at most ~1032 times its size).
TEST(Idx, AHeaderPromisingMoreThanTheFileHoldsIsRefusedBeforeAllocating) {
  TempDir dir;
  const std::string plain = dir.file("bad"), gz = dir.file("bad.gz");
  auto [p, g] = errors_for(dir, idx_bytes(0x08, {65536, 32768}, ""));
  expect_contains(p, {plain + ": byte offset 12: expected 2147483648 elements of type unsigned byte "
                              "for dimensions [65536, 32768] (2147483648 bytes), but the file ends "
                              "after 0"});
  expect_contains(g, {gz + ": byte offset 12 of the decompressed data: the header promises "
                           "2147483648 elements", "more than a gzip file of "});
}

// Found by tools/fuzz/fuzz_data: a shape with a zero dimension holds no element, but its strides
// (zeros counted as ones) overflowed int64 (UBSan: signed overflow in contiguous_strides).
TEST(Idx, AnEmptyShapeWhoseStridesOverflowIsRefused) {
  TempDir dir;
  const std::string plain = dir.file("bad");
  auto [p, g] = errors_for(dir, idx_bytes(0x0D, {65535, 0, 6, 4294967295u, 4294967295u}, ""));
  expect_contains(p, {plain + ": dimensions at byte offset 4: shape [65535, 0, 6, 4294967295, "
                              "4294967295] is too large: its byte size overflows"});
}

TEST(Idx, MalformedFilesNameThePathTheOffsetAndWhatWasExpected) {
  TempDir dir;
  const std::string plain = dir.file("bad"), gz = dir.file("bad.gz");
  {
    auto [p, g] = errors_for(dir, std::string("\x01\x00\x08\x01", 4) + std::string(8, '\0'));
    expect_contains(p, {plain + ": byte offset 0: expected the idx magic number", "0x01 0x00"});
    expect_contains(g, {gz + ": byte offset 0 of the decompressed data: expected the idx magic"});
  }
  {
    auto [p, g] = errors_for(dir, idx_bytes(0x07, {1}, "a"));
    expect_contains(p, {plain + ": byte offset 2: expected an idx element type", "found 0x07"});
  }
  {
    auto [p, g] = errors_for(dir, idx_bytes(0x08, {}, ""));
    expect_contains(p, {plain + ": byte offset 3: expected a rank of at least 1, found 0"});
  }
  {  // rank 3 but only one dimension present
    auto [p, g] = errors_for(dir, std::string("\0\0\x08\x03\0\0\0\x02", 8));
    expect_contains(p, {plain + ": byte offset 4: expected 3 big-endian u32 dimension sizes (12 "
                                "bytes), but the file ends after 4"});
    expect_contains(g, {gz + ": byte offset 4 of the decompressed data: expected 3 big-endian"});
  }
  {  // 10 elements announced, 7 present
    auto [p, g] = errors_for(dir, idx_bytes(0x08, {10}, std::string(7, 'x')));
    expect_contains(p, {plain + ": byte offset 8: expected 10 elements of type unsigned byte for "
                                "dimensions [10] (10 bytes), but the file ends after 7"});
    expect_contains(g, {gz + ": byte offset 8 of the decompressed data: expected 10 elements"});
  }
  {  // i32 data cut inside an element
    auto [p, g] = errors_for(dir, idx_bytes(0x0C, {2, 3}, std::string(22, 'x')));
    expect_contains(p, {plain + ": byte offset 12: expected 6 elements of type int for dimensions "
                                "[2, 3] (24 bytes), but the file ends after 22"});
  }
  {  // bytes after the data
    auto [p, g] = errors_for(dir, idx_bytes(0x08, {2, 5}, std::string(11, 'x')));
    expect_contains(p, {plain + ": byte offset 22: expected the end of the file after 10 elements",
                        "found more bytes"});
  }
  {  // an empty file
    auto [p, g] = errors_for(dir, "");
    expect_contains(p, {plain + ": byte offset 0: expected the idx magic number", "ends after 0"});
  }
}

TEST(Idx, CorruptGzipAndMissingFilesAreErrorsNotCrashes) {
  TempDir dir;
  std::string pixels(4096, '\0');
  for (size_t i = 0; i < pixels.size(); ++i)
    pixels[i] = static_cast<char>(i * 7919 % 251);
  testing::write_gzip(dir.file("good.gz"), idx_bytes(0x08, {4096}, pixels));
  const std::string compressed = *read_file(dir.file("good.gz"));

  // Cut the compressed stream in half: the data ends early.
  testing::write_plain(dir.file("cut.gz"), compressed.substr(0, compressed.size() / 2));
  Expected<Tensor> cut = read_idx(dir.file("cut.gz"));
  ASSERT_FALSE(cut.ok());
  expect_contains(cut.status().message(),
                  {dir.file("cut.gz") + ": byte offset 8 of the "
                                        "decompressed data: expected 4096 elements"});

  // Flip bytes in the middle of the deflate data.
  std::string garbled = compressed;
  for (size_t i = 20; i < 60 && i < garbled.size(); ++i)
    garbled[i] = static_cast<char>(~garbled[i]);
  testing::write_plain(dir.file("garbled.gz"), garbled);
  Expected<Tensor> bad = read_idx(dir.file("garbled.gz"));
  ASSERT_FALSE(bad.ok());
  expect_contains(bad.status().message(), {dir.file("garbled.gz") + ":"});

  Expected<Tensor> missing = read_idx(dir.file("nope"));
  ASSERT_FALSE(missing.ok());
  expect_contains(missing.status().message(), {dir.file("nope"), "No such file"});
}

}  // namespace
}  // namespace tessel
