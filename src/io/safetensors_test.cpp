// safetensors: round trips of every dtype checked against the bytes on disk, a file assembled by
// hand here, and the errors of corrupt files.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/atomic_file.h"
#include "support/hash.h"

namespace tessel {
namespace {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tessel_io_XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void expect_contains(const std::string& message, const std::vector<std::string>& parts) {
  for (const std::string& part : parts)
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
}

template <typename T>
std::string le_bytes(const std::vector<T>& values) {  // the host is little-endian
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

TEST(Safetensors, RoundTripsEveryDtypeWithTheLayoutOfTheFormat) {
  TempDir dir;
  NamedTensors tensors;
  tensors["f32"] = *Tensor::from_vector<float>({1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f}, {2, 3});
  tensors["f64"] = *Tensor::from_vector<double>({3.141592653589793, -1e300}, {2});
  tensors["f16"] = *Tensor::from_vector<Half>({Half(0.5f), Half(-65504.0f), Half(1e-7f)}, {3});
  tensors["bf16"] = *Tensor::from_vector<BFloat16>({BFloat16(1.0f), BFloat16(-3e38f)}, {1, 2});
  tensors["i64"] = *Tensor::from_vector<int64_t>({INT64_MIN, 0, INT64_MAX}, {3, 1});
  tensors["i32"] = *Tensor::from_vector<int32_t>({-5, 70000}, {2});
  tensors["i8"] = *Tensor::from_vector<int8_t>({-128, 127, 0}, {3});
  tensors["u8"] = *Tensor::from_vector<uint8_t>({255, 1}, {2});
  tensors["bool"] = *Tensor::from_vector<bool>({true, false, true}, {3});
  tensors["scalar"] = *Tensor::from_vector<float>({42.0f}, {});
  // A transposed view is written contiguous: [[1, 4], [2, 5], [3, 6]].
  Tensor base = *Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  tensors["blocks.0.attn.weight"] = *base.transpose(0, 1);
  const std::string path = dir.file("all.safetensors");
  ASSERT_TRUE(save_safetensors(path, tensors, {{"step", "7"}, {"note", "héllo"}}).ok());

  // The file, read with plain code: length, JSON, contiguous aligned offsets, little-endian data.
  const std::string bytes = *read_file(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["__metadata__"]["step"], "7");
  EXPECT_EQ(header["blocks.0.attn.weight"]["shape"], nlohmann::json({3, 2}));
  EXPECT_EQ(header["bf16"]["dtype"], "BF16");
  EXPECT_EQ(header["bool"]["dtype"], "BOOL");
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const uint64_t begin = info["data_offsets"][0], end = info["data_offsets"][1];
    const size_t element = dtype_size(tensors[name].dtype());
    EXPECT_EQ(begin % element, 0u) << name << " is not aligned";
    spans.emplace_back(begin, end);
  }
  std::sort(spans.begin(), spans.end());
  uint64_t expected_begin = 0;
  for (auto [begin, end] : spans) {
    EXPECT_EQ(begin, expected_begin);  // back to back, as the reference reader requires
    expected_begin = end;
  }
  EXPECT_EQ(8 + n + expected_begin, bytes.size());
  const uint64_t t = header["blocks.0.attn.weight"]["data_offsets"][0];
  EXPECT_EQ(bytes.substr(8 + n + t, 24), le_bytes<float>({1, 4, 2, 5, 3, 6}));

  Expected<SafetensorsFile> back = load_safetensors(path);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->metadata, (StringMap{{"step", "7"}, {"note", "héllo"}}));
  ASSERT_EQ(back->tensors.size(), tensors.size());
  for (const auto& [name, original] : tensors) {
    const Tensor& got = back->tensors.at(name);
    EXPECT_EQ(got.dtype(), original.dtype()) << name;
    EXPECT_EQ(got.shape(), original.shape()) << name;
    Tensor packed = *original.contiguous();
    EXPECT_EQ(
        std::memcmp(got.storage()->host_address(),
                    static_cast<char*>(packed.storage()->host_address()) + packed.offset_bytes(),
                    got.nbytes()),
        0)
        << name;
  }
  EXPECT_EQ(*back->tensors.at("i64").to_vector<int64_t>(),
            (std::vector<int64_t>{INT64_MIN, 0, INT64_MAX}));
}

TEST(Safetensors, ReadsAFileAssembledByHand) {
  TempDir dir;
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},)"
      R"("a":{"dtype":"F32","shape":[1,2],"data_offsets":[8,16]},)"
      R"("e":{"dtype":"F16","shape":[0,3],"data_offsets":[16,16]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i)
    bytes[i] = static_cast<char>(header.size() >> (8 * i));
  bytes += header + le_bytes<int32_t>({-1, 258}) + le_bytes<float>({0.5f, -8.0f});
  const std::string path = dir.file("hand.safetensors");
  ASSERT_TRUE(write_file_atomic(path, bytes).ok());
  Expected<SafetensorsFile> f = load_safetensors(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->metadata.at("format"), "pt");
  EXPECT_EQ(*f->tensors.at("b").to_vector<int32_t>(), (std::vector<int32_t>{-1, 258}));
  EXPECT_EQ(f->tensors.at("a").shape(), (Shape{1, 2}));
  EXPECT_EQ(*f->tensors.at("a").to_vector<float>(), (std::vector<float>{0.5f, -8.0f}));
  EXPECT_EQ(f->tensors.at("e").shape(), (Shape{0, 3}));
}

// Writes 8-byte length + header + data and returns the load error.
std::string load_error(const TempDir& dir, const std::string& header, const std::string& data,
                       int64_t claimed_length = -1) {
  std::string bytes(8, '\0');
  const uint64_t n = claimed_length >= 0 ? static_cast<uint64_t>(claimed_length) : header.size();
  for (int i = 0; i < 8; ++i)
    bytes[i] = static_cast<char>(n >> (8 * i));
  const std::string path = dir.file("bad.safetensors");
  EXPECT_TRUE(write_file_atomic(path, bytes + header + data).ok());
  Expected<SafetensorsFile> f = load_safetensors(path);
  EXPECT_FALSE(f.ok());
  return f.ok() ? "" : f.status().message();
}

TEST(Safetensors, CorruptFilesGiveErrorsWithPathAndOffset) {
  TempDir dir;
  const std::string p = dir.file("bad.safetensors");
  const std::string eight(8, 'x');
  {
    ASSERT_TRUE(write_file_atomic(p, "abc").ok());
    expect_contains(load_safetensors(p).status().message(),
                    {p + ": byte offset 0: expected an 8-byte header length", "has 3 bytes"});
  }
  expect_contains(load_error(dir, "{}", "", 1000),
                  {p + ": byte offset 0: the header length 1000 does not fit the file (10 bytes"});
  expect_contains(load_error(dir, R"({"a": {"dtype": "F32",, })", ""),
                  {p + ": byte offset 30: the header is not valid JSON"});
  // A number JSON can write but not hold (found by fuzz_safetensors: it threw past the parser).
  expect_contains(load_error(dir, R"({"w":{"dtype":"F32","shape":[4E294967296]}})", ""),
                  {p + ": byte offset 8: the header is not valid JSON", "number overflow"});
  expect_contains(load_error(dir, "[1, 2]", ""),
                  {p + ": byte offset 8: expected the header to be a JSON object"});
  expect_contains(
      load_error(dir, R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "1234"),
      {p + ": tensor 'w': data_offsets [0, 8] (file bytes 62..70) run past the end of the file at "
           "byte offset 66"});
  expect_contains(
      load_error(dir, R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
      {p + ": header (byte offset 8), tensor 'w': data_offsets [0, 8] span 8 bytes, but F32 [3] "
           "needs 12"});
  expect_contains(load_error(dir,
                             R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("v":{"dtype":"I32","shape":[1],"data_offsets":[2,6]}})",
                             eight),
                  {p + ": tensors 'w' (file bytes ", "and 'v' ", "overlap at byte offset"});
  expect_contains(
      load_error(dir, R"({"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", eight),
      {"tensor 'w': unknown dtype 'F33'"});
  expect_contains(
      load_error(dir, R"({"w":{"dtype":"U16","shape":[2],"data_offsets":[0,4]}})", eight),
      {p + ": tensor 'w' has dtype U16, which tessel does not support"});
  expect_contains(
      load_error(dir, R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", eight),
      {"tensor 'w': expected 'shape' to hold non-negative integers"});
  expect_contains(load_error(dir, R"({"w":{"dtype":"F32","shape":[1]}})", eight),
                  {"tensor 'w': expected a 'data_offsets' entry"});
  expect_contains(load_error(dir, R"({"__metadata__":{"step":3}})", ""),
                  {"'__metadata__' entry 'step' must be a string"});
  expect_contains(load_safetensors(dir.file("none")).status().message(),
                  {dir.file("none"), "No such file"});
}

TEST(Safetensors, ChecksumsAreWrittenCheckedAndHiddenFromTheCaller) {
  TempDir dir;
  const std::string path = dir.file("c.safetensors");
  Tensor w = *Tensor::from_vector<float>({1, 2, 3}, {3});
  ASSERT_TRUE(save_safetensors(path, {{"w", w}}, {{"step", "3"}}).ok());
  const std::string bytes = *read_file(path);
  // The stored value is XXH64 of the tensor's bytes, as any xxhash tool computes it.
  EXPECT_NE(bytes.find("\"tessel.xxh64.w\":\"" +
                       hash_hex(hash_bytes(w.storage()->host_address(), 12)) + "\""),
            std::string::npos);
  Expected<SafetensorsFile> f = load_safetensors(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_TRUE(f->checksummed);
  EXPECT_EQ(f->metadata, (StringMap{{"step", "3"}}));
  EXPECT_EQ(save_safetensors(path, {{"w", w}}, {{"tessel.xxh64.w", "0"}}).code(),
            Code::kInvalidArgument);
  // A file without checksums (another writer's) loads unchecked.
  const std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  std::string plain(8, '\0');
  plain[0] = char(header.size());
  ASSERT_TRUE(write_file_atomic(path, plain + header + le_bytes<float>({2.5f})).ok());
  f = load_safetensors(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_FALSE(f->checksummed);
}

TEST(Safetensors, GapsAndTrailingBytesAreRefused) {
  TempDir dir;
  const std::string p = dir.file("bad.safetensors");
  const std::string eight(8, 'x');
  expect_contains(
      load_error(dir, R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight),
      {p + ": byte offset 66: 4 bytes of trailing data after the last tensor"});
  expect_contains(
      load_error(dir, R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
      {p + ": tensor 'w': data_offsets begin at 4, expected 0"});
}

TEST(Safetensors, WriterRefusesWhatItCannotWrite) {
  TempDir dir;
  EXPECT_EQ(save_safetensors(dir.file("x"), {{"w", Tensor()}}).code(), Code::kInvalidArgument);
  EXPECT_EQ(
      save_safetensors(dir.file("x"), {{"__metadata__", *Tensor::zeros({1}, DType::kF32)}}).code(),
      Code::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(dir.file("x")));
}

}  // namespace
}  // namespace tessel
