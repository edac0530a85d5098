// Tensors to and from safetensors files (https://github.com/huggingface/safetensors), the format
// PyTorch users load with `safetensors.torch.load_file`:
//
//   bytes 0..7        N, the header length, unsigned little-endian
//   bytes 8..8+N      a JSON object: "name": {"dtype": "F32", "shape": [2, 3],
//                     "data_offsets": [begin, end]}, plus an optional "__metadata__" object of
//                     string -> string; padded with spaces so the data starts 8-byte aligned
//   bytes 8+N..       the data buffer; offsets are relative to its start, row-major,
//                     little-endian
//
//   TESSEL_TRY(save_safetensors("model.safetensors", {{"fc.weight", w}, {"fc.bias", b}},
//                               {{"step", "100"}}));
//   TESSEL_ASSIGN_OR_RETURN(SafetensorsFile f, load_safetensors("model.safetensors"));
//   f.tensors.at("fc.weight")   // on the CPU
//
// Names are the caller's (use PyTorch's, "blocks.0.attn.weight"). The writer lays tensors out
// back to back (as the reference implementation demands) ordered by element size, largest first,
// then by name, so every tensor is aligned to its element size; it writes through
// support/atomic_file.h, so a reader sees the old file or the whole new one. The reader checks
// everything (header length against the file size, the JSON, dtypes, shapes, offsets in range,
// sizes that match dtype x shape, tensors back to back with nothing after them); each error names
// the path and a byte offset.
//
// Integrity: the writer adds to "__metadata__" an XXH64 of each tensor's bytes
// ("tessel.xxh64.<name>") and of the header text ("tessel.header_xxh64"); the reader checks
// them when present, so any changed byte of a tessel-written file is an error naming the tensor
// (or the header). Files from other writers have none and load as before.
#pragma once

#include <map>
#include <string>

#include "runtime/tensor.h"
#include "support/status.h"

namespace tessel::secure {
class SecretKey;
}

namespace tessel {

using NamedTensors = std::map<std::string, Tensor>;
using StringMap = std::map<std::string, std::string>;

struct SafetensorsFile {
  NamedTensors tensors;
  StringMap metadata;        // "__metadata__", less the checksums
  bool checksummed = false;  // the file carried tessel's checksums (and they matched)
};

// Tensors may live on any device and have any strides; they are written contiguous.
// With a key, the whole file (header and tensor names included) is written and read as an
// encrypted, authenticated stream (secure/encrypted_file.h); nothing is held twice.
Status save_safetensors(const std::string& path, const NamedTensors& tensors,
                        const StringMap& metadata = {}, const secure::SecretKey* key = nullptr);
Expected<SafetensorsFile> load_safetensors(const std::string& path,
                                           const secure::SecretKey* key = nullptr);

// "F32" <-> DType::kF32, and so on (F64 F32 F16 BF16 I64 I32 I8 U8 BOOL).
const char* safetensors_dtype_name(DType dtype);

}  // namespace tessel
