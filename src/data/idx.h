// Reading idx files, the format of MNIST and Fashion-MNIST (http://yann.lecun.com/exdb/mnist/),
// plain or gzip-compressed (detected from the content, not the name).
//
//   TESSEL_ASSIGN_OR_RETURN(Tensor images, read_idx("train-images-idx3-ubyte.gz"));
//   // u8 [60000, 28, 28] on the CPU
//
// Layout: bytes 0-1 are zero; byte 2 is the element type (0x08 u8, 0x09 i8, 0x0B i16, 0x0C i32,
// 0x0D f32, 0x0E f64); byte 3 is the rank; then one big-endian u32 per dimension; then the
// elements, big-endian, row-major. The tensor comes back in host byte order; i16, which tessel has
// no dtype for, is widened to i32.
//
// Every malformed file (bad magic, unknown type, truncated data, trailing bytes, a corrupt gzip
// stream) is an error naming the path, the byte offset (of the decompressed data when the file
// is gzip) and what was expected there.
#pragma once

#include <string>

#include "runtime/tensor.h"
#include "support/status.h"

namespace tessel {

Expected<Tensor> read_idx(const std::string& path);

}  // namespace tessel
