// libFuzzer target: bytes as an idx file (plain or gzip) and as a text dataset (data/idx.h,
// data/text_dataset.h). Any input must load or be refused with an error naming the file; never
// a crash or an allocation the file cannot back.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "data/idx.h"
#include "data/text_dataset.h"

using namespace tessel;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/tessel_fuzz_data." + std::to_string(::getpid());
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  (void)read_idx(path);  // libFuzzer's malloc limit catches a header that sizes a huge buffer
  const double fraction = size > 0 ? (data[0] % 100 + 1) / 100.0 : 0.5;
  Expected<CharDataset> text = CharDataset::from_file(path, fraction);
  if (text.ok()) {
    std::string sample(reinterpret_cast<const char*>(data), size < 64 ? size : 64);
    Expected<std::vector<int64_t>> ids = text->encode(sample);
    if (ids.ok()) {
      Expected<std::string> back = text->decode(*ids);
      if (!back.ok() || *back != sample) std::abort();
    }
    (void)text->split("train");
    (void)text->split("val");
  }
  return 0;
}
