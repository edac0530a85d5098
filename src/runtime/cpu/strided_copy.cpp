// Strided host copy: merge dimensions, then copy rows (memcpy or a typed element loop) in
// parallel over the outer index.
#include "runtime/cpu/strided_copy.h"

#include <cstdint>
#include <cstring>

#include "support/status.h"
#include "support/thread_pool.h"

namespace tessel {
namespace {

// Elements per parallel_for grain: below this a thread hand-off costs more than it saves.
constexpr int64_t kParallelGrainElements = 1 << 15;

struct Layout {
  Shape shape;
  Strides dst;
  Strides src;
};

// Drops size-1 dimensions and merges neighbours that are contiguous in both layouts, so that a
// contiguous-to-contiguous copy becomes one row.
Layout simplify(const Shape& shape, const Strides& dst, const Strides& src) {
  Layout out;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (!out.shape.empty() && out.dst.back() == dst[i] * shape[i] &&
        out.src.back() == src[i] * shape[i]) {
      out.shape.back() *= shape[i];
      out.dst.back() = dst[i];
      out.src.back() = src[i];
      continue;
    }
    out.shape.push_back(shape[i]);
    out.dst.push_back(dst[i]);
    out.src.push_back(src[i]);
  }
  if (out.shape.empty()) {  // a single element
    out.shape = {1};
    out.dst = {1};
    out.src = {1};
  }
  return out;
}

template <typename T>
void copy_row(char* dst, int64_t dst_stride, const char* src, int64_t src_stride, int64_t n) {
  T* d = reinterpret_cast<T*>(dst);
  const T* s = reinterpret_cast<const T*>(src);
  for (int64_t i = 0; i < n; ++i)
    d[i * dst_stride] = s[i * src_stride];
}

void copy_row_any(size_t element_size, char* dst, int64_t dst_stride, const char* src,
                  int64_t src_stride, int64_t n) {
  if (dst_stride == 1 && src_stride == 1) {
    std::memcpy(dst, src, static_cast<size_t>(n) * element_size);
    return;
  }
  switch (element_size) {
    case 1:
      return copy_row<uint8_t>(dst, dst_stride, src, src_stride, n);
    case 2:
      return copy_row<uint16_t>(dst, dst_stride, src, src_stride, n);
    case 4:
      return copy_row<uint32_t>(dst, dst_stride, src, src_stride, n);
    case 8:
      return copy_row<uint64_t>(dst, dst_stride, src, src_stride, n);
  }
  const auto bytes = static_cast<int64_t>(element_size);
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * dst_stride * bytes, src + i * src_stride * bytes, element_size);
  }
}

}  // namespace

void copy_strided(const Shape& shape, size_t element_size, void* dst, const Strides& dst_strides,
                  const void* src, const Strides& src_strides) {
  TESSEL_CHECK(dst_strides.size() == shape.size() && src_strides.size() == shape.size());
  if (shape_numel(shape) == 0) return;
  const Layout l = simplify(shape, dst_strides, src_strides);
  const size_t rank = l.shape.size();
  const int64_t row = l.shape.back();
  const int64_t rows = shape_numel(l.shape) / row;
  const auto bytes = static_cast<int64_t>(element_size);
  char* const dst_base = static_cast<char*>(dst);
  const char* const src_base = static_cast<const char*>(src);

  const int64_t grain = std::max<int64_t>(1, kParallelGrainElements / row);
  parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      // The outer index of row r, from the innermost outer dimension out.
      int64_t rest = r, dst_offset = 0, src_offset = 0;
      for (size_t d = rank - 1; d-- > 0;) {
        const int64_t i = rest % l.shape[d];
        rest /= l.shape[d];
        dst_offset += i * l.dst[d];
        src_offset += i * l.src[d];
      }
      copy_row_any(element_size, dst_base + dst_offset * bytes, l.dst.back(),
                   src_base + src_offset * bytes, l.src.back(), row);
    }
  });
}

}  // namespace tessel
