// libFuzzer target: bytes as a safetensors file through the validating reader (io/safetensors.h).
// Any input must load or be refused with an error; never a crash, a huge allocation or a read
// outside the file.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "io/safetensors.h"

using namespace tessel;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/tessel_fuzz_safetensors." + std::to_string(::getpid());
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  Expected<SafetensorsFile> loaded = load_safetensors(path);
  if (loaded.ok())
    for (const auto& [name, t] : loaded->tensors)
      if (t.nbytes() > size) std::abort();  // every byte came from the file
  return 0;
}
