// Tensor: creation, views (pure stride arithmetic), copies between any two layouts and devices,
// and the printer.
//
// Copies that involve a device the host cannot address go through host memory: the bytes a view
// spans are read into a host buffer, worked on with copy_strided, and written back if needed.
#include "runtime/tensor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "runtime/cpu/strided_copy.h"

namespace tessel {
namespace {

// The bytes [begin, begin + bytes.size()) of a storage, copied to the host.
struct HostSpan {
  size_t begin = 0;
  std::vector<unsigned char> bytes;
};

// The byte range of the storage that a view's elements occupy (strides are never negative).
std::pair<size_t, size_t> span_of(const Shape& shape, const Strides& strides, size_t offset,
                                  size_t element_size) {
  int64_t last = 0;
  for (size_t i = 0; i < shape.size(); ++i)
    last += (shape[i] - 1) * strides[i];
  return {offset, offset + static_cast<size_t>(last) * element_size + element_size};
}

Expected<HostSpan> read_span(const Storage& storage, size_t begin, size_t end) {
  HostSpan span;
  span.begin = begin;
  span.bytes.resize(end - begin);
  TESSEL_TRY(storage.device()->copy_to_host(span.bytes.data(), storage.buffer(), begin,
                                            span.bytes.size()));
  return span;
}

// Strides for viewing data laid out as (shape, strides) in new_shape, or nothing when the data
// would have to move. Dimensions are matched in runs that are contiguous among themselves; this
// is the algorithm PyTorch's view() uses.
std::optional<Strides> view_strides(const Shape& shape, const Strides& strides,
                                    const Shape& new_shape) {
  Strides out(new_shape.size());
  if (shape_numel(shape) == 0 || shape.empty()) return contiguous_strides(new_shape);
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    // At the outer end of a run of dimensions that are contiguous with each other:
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

}  // namespace

// ---- Storage ----

Expected<std::shared_ptr<Storage>> Storage::allocate(Device* device, size_t bytes) {
  TESSEL_CHECK(device != nullptr, "Storage::allocate on a null device");
  TESSEL_ASSIGN_OR_RETURN(DeviceBuffer buffer, device->allocator().allocate(bytes));
  return std::shared_ptr<Storage>(new Storage(device, buffer, bytes));
}

Storage::~Storage() {
  device_->allocator().release(buffer_);
}

// ---- Making tensors ----

Expected<Tensor> Tensor::empty(const Shape& shape, DType dtype, Device* device) {
  TESSEL_TRY(check_shape(shape, dtype_size(dtype)));
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  TESSEL_ASSIGN_OR_RETURN(std::shared_ptr<Storage> storage, Storage::allocate(device, bytes));
  return Tensor(std::move(storage), dtype, shape, contiguous_strides(shape), 0);
}

Expected<Tensor> Tensor::zeros(const Shape& shape, DType dtype, Device* device) {
  return full(shape, 0.0, dtype, device);
}

Expected<Tensor> Tensor::full(const Shape& shape, double value, DType dtype, Device* device) {
  TESSEL_ASSIGN_OR_RETURN(Tensor t, empty(shape, dtype, device));
  TESSEL_TRY(t.fill(value));
  return t;
}

// ---- What it is ----

int64_t Tensor::size(int64_t dim) const {
  Expected<int64_t> d = normalize_dim(dim, shape_);
  TESSEL_CHECK(d.ok(), "size(): {}", d.status().message());
  return shape_[*d];
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 0) return true;
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::host_data() const {
  void* base = storage_ ? storage_->host_address() : nullptr;
  return base ? static_cast<char*>(base) + offset_bytes_ : nullptr;
}

std::string Tensor::describe() const {
  return fmt::format("{} tensor of shape {}", dtype_name(dtype_), shape_string(shape_));
}

// ---- Views ----

Expected<Tensor> Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  Expected<int64_t> d = normalize_dim(dim, shape_);
  if (!d) return d.status().with_context("slice");
  const int64_t size = shape_[*d];
  if (step < 1)
    return invalid_argument("slice of shape {}: step {} is not >= 1", shape_string(shape_), step);
  const int64_t s = start < 0 ? start + size : start;
  const int64_t e = end < 0 ? end + size : end;
  if (s < 0 || e > size || s > e) {
    return out_of_range("slice [{}:{}] along dim {} of shape {}: the dim has {} elements", start,
                        end, *d, shape_string(shape_), size);
  }
  Shape shape = shape_;
  Strides strides = strides_;
  shape[*d] = (e - s + step - 1) / step;
  strides[*d] = strides_[*d] * step;
  return view(shape, strides,
              offset_bytes_ + static_cast<size_t>(s * strides_[*d]) * element_size());
}

Expected<Tensor> Tensor::select(int64_t dim, int64_t index) const {
  Expected<int64_t> d = normalize_dim(dim, shape_);
  if (!d) return d.status().with_context("select");
  const int64_t size = shape_[*d];
  const int64_t i = index < 0 ? index + size : index;
  if (i < 0 || i >= size) {
    return out_of_range("select index {} along dim {} of shape {}: the dim has {} elements", index,
                        *d, shape_string(shape_), size);
  }
  Shape shape = shape_;
  Strides strides = strides_;
  shape.erase(shape.begin() + *d);
  strides.erase(strides.begin() + *d);
  return view(shape, strides,
              offset_bytes_ + static_cast<size_t>(i * strides_[*d]) * element_size());
}

Expected<Tensor> Tensor::permute(const std::vector<int64_t>& order) const {
  if (order.size() != shape_.size()) {
    return invalid_argument("permute {} of shape {}: needs {} dims", shape_string(order),
                            shape_string(shape_), shape_.size());
  }
  Shape shape(order.size());
  Strides strides(order.size());
  std::vector<bool> used(order.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    Expected<int64_t> d = normalize_dim(order[i], shape_);
    if (!d) return d.status().with_context("permute {}", shape_string(order));
    if (used[*d]) {
      return invalid_argument("permute {} of shape {}: dim {} appears twice", shape_string(order),
                              shape_string(shape_), *d);
    }
    used[*d] = true;
    shape[i] = shape_[*d];
    strides[i] = strides_[*d];
  }
  return view(shape, strides, offset_bytes_);
}

Expected<Tensor> Tensor::transpose(int64_t dim0, int64_t dim1) const {
  Expected<int64_t> a = normalize_dim(dim0, shape_);
  if (!a) return a.status().with_context("transpose");
  Expected<int64_t> b = normalize_dim(dim1, shape_);
  if (!b) return b.status().with_context("transpose");
  Shape shape = shape_;
  Strides strides = strides_;
  std::swap(shape[*a], shape[*b]);
  std::swap(strides[*a], strides[*b]);
  return view(shape, strides, offset_bytes_);
}

Expected<Tensor> Tensor::reshape(const Shape& requested) const {
  Shape shape = requested;
  const int64_t n = numel();
  int64_t known = 1, inferred = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (inferred >= 0) {
        return invalid_argument("reshape {} to {}: more than one -1", shape_string(shape_),
                                shape_string(requested));
      }
      inferred = static_cast<int64_t>(i);
    } else if (shape[i] < 0) {
      return invalid_argument("reshape {} to {}: negative size", shape_string(shape_),
                              shape_string(requested));
    } else {
      known *= shape[i];
    }
  }
  if (inferred >= 0) {
    if (known == 0 || n % known != 0) {
      return invalid_argument("reshape {} ({} elements) to {}: no size for -1 fits",
                              shape_string(shape_), n, shape_string(requested));
    }
    shape[inferred] = n / known;
  }
  TESSEL_TRY(check_shape(shape, element_size()));
  if (shape_numel(shape) != n) {
    return invalid_argument("reshape {} ({} elements) to {} ({} elements)", shape_string(shape_), n,
                            shape_string(shape), shape_numel(shape));
  }
  std::optional<Strides> strides = view_strides(shape_, strides_, shape);
  if (!strides) {
    return invalid_argument(
        "reshape {} (strides {}) to {} cannot be a view of this layout: call contiguous() first",
        shape_string(shape_), shape_string(strides_), shape_string(shape));
  }
  return view(shape, *strides, offset_bytes_);
}

Expected<Tensor> Tensor::expand(const Shape& shape) const {
  if (shape.size() < shape_.size()) {
    return invalid_argument("expand {} to {}: the target has fewer dims", shape_string(shape_),
                            shape_string(shape));
  }
  const size_t lead = shape.size() - shape_.size();
  Shape out_shape(shape.size());
  Strides out_strides(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      if (shape[i] < 0) {
        return invalid_argument("expand {} to {}: new dim {} needs a size >= 0",
                                shape_string(shape_), shape_string(shape), i);
      }
      out_shape[i] = shape[i];
      out_strides[i] = 0;
      continue;
    }
    const int64_t old = shape_[i - lead];
    const int64_t want = shape[i] == -1 ? old : shape[i];
    if (want == old) {
      out_shape[i] = old;
      out_strides[i] = strides_[i - lead];
    } else if (old == 1 && want >= 0) {
      out_shape[i] = want;
      out_strides[i] = 0;
    } else {
      return invalid_argument("expand {} to {}: dim {} has size {}; only size 1 can expand",
                              shape_string(shape_), shape_string(shape), i - lead, old);
    }
  }
  return view(out_shape, out_strides, offset_bytes_);
}

Expected<Tensor> Tensor::squeeze(int64_t dim) const {
  Expected<int64_t> d = normalize_dim(dim, shape_);
  if (!d) return d.status().with_context("squeeze");
  if (shape_[*d] != 1) {
    return invalid_argument("squeeze dim {} of shape {}: its size is {}, not 1", *d,
                            shape_string(shape_), shape_[*d]);
  }
  Shape shape = shape_;
  Strides strides = strides_;
  shape.erase(shape.begin() + *d);
  strides.erase(strides.begin() + *d);
  return view(shape, strides, offset_bytes_);
}

Tensor Tensor::squeeze() const {
  Shape shape;
  Strides strides;
  for (size_t i = 0; i < shape_.size(); ++i) {
    if (shape_[i] == 1) continue;
    shape.push_back(shape_[i]);
    strides.push_back(strides_[i]);
  }
  return view(shape, strides, offset_bytes_);
}

Expected<Tensor> Tensor::unsqueeze(int64_t dim) const {
  const int64_t r = rank();
  if (dim < -r - 1 || dim > r) {
    return out_of_range("unsqueeze dim {} of shape {}: expected a dim in [{}, {}]", dim,
                        shape_string(shape_), -r - 1, r);
  }
  const int64_t d = dim < 0 ? dim + r + 1 : dim;
  Shape shape = shape_;
  Strides strides = strides_;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, d < r ? strides_[d] * shape_[d] : 1);
  return view(shape, strides, offset_bytes_);
}

// ---- Copies ----

Expected<Tensor> Tensor::contiguous() const {
  if (!defined()) return failed_precondition("contiguous() of an undefined tensor");
  if (is_contiguous()) return *this;
  return clone();
}

Expected<Tensor> Tensor::clone() const {
  if (!defined()) return failed_precondition("clone() of an undefined tensor");
  TESSEL_ASSIGN_OR_RETURN(Tensor out, empty(shape_, dtype_, device()));
  TESSEL_TRY(out.copy_from(*this));
  return out;
}

Expected<Tensor> Tensor::to(Device* target) const {
  if (!defined()) return failed_precondition("to() of an undefined tensor");
  if (target == device()) return *this;
  TESSEL_ASSIGN_OR_RETURN(Tensor out, empty(shape_, dtype_, target));
  TESSEL_TRY(out.copy_from(*this));
  return out;
}

Expected<std::vector<unsigned char>> Tensor::to_host_bytes() const {
  std::vector<unsigned char> out(nbytes());
  if (out.empty()) return out;
  if (const void* src = host_data()) {
    copy_strided(shape_, element_size(), out.data(), contiguous_strides(shape_), src, strides_);
  } else if (is_contiguous()) {
    TESSEL_TRY(device()->copy_to_host(out.data(), storage_->buffer(), offset_bytes_, out.size()));
  } else {
    auto [begin, end] = span_of(shape_, strides_, offset_bytes_, element_size());
    TESSEL_ASSIGN_OR_RETURN(HostSpan span, read_span(*storage_, begin, end));
    copy_strided(shape_, element_size(), out.data(), contiguous_strides(shape_), span.bytes.data(),
                 strides_);
  }
  return out;
}

Status Tensor::copy_from(const Tensor& src) {
  if (!defined() || !src.defined())
    return failed_precondition("copy_from with an undefined tensor");
  if (src.shape_ != shape_ || src.dtype_ != dtype_) {
    return invalid_argument("copy_from: {} into {}", src.describe(), describe());
  }
  if (numel() == 0) return ok_status();
  if (src.storage_ == storage_) {  // the two views may overlap: copy the source out first
    TESSEL_ASSIGN_OR_RETURN(Tensor copy, src.clone());
    return copy_from(copy);
  }

  void* dst = host_data();
  const void* src_host = src.host_data();
  if (dst != nullptr && src_host != nullptr) {
    copy_strided(shape_, element_size(), dst, strides_, src_host, src.strides_);
    return ok_status();
  }
  // Everything below moves through the host: first the source, row-major.
  TESSEL_ASSIGN_OR_RETURN(std::vector<unsigned char> values, src.to_host_bytes());
  const Strides packed = contiguous_strides(shape_);
  if (dst != nullptr) {
    copy_strided(shape_, element_size(), dst, strides_, values.data(), packed);
    return ok_status();
  }
  if (is_contiguous()) {
    return device()->copy_from_host(storage_->buffer(), offset_bytes_, values.data(),
                                    values.size());
  }
  // A strided view on a device the host cannot address: read the span, write into it, write it
  // back (the bytes between our elements go back unchanged).
  auto [begin, end] = span_of(shape_, strides_, offset_bytes_, element_size());
  TESSEL_ASSIGN_OR_RETURN(HostSpan span, read_span(*storage_, begin, end));
  copy_strided(shape_, element_size(), span.bytes.data(), strides_, values.data(), packed);
  return device()->copy_from_host(storage_->buffer(), begin, span.bytes.data(), span.bytes.size());
}

namespace {

// `bytes` bytes at dst set to repetitions of the `size`-byte element: memset when its bytes are
// equal (zero), else the first copies doubled with memcpy.
void fill_bytes(void* dst, size_t bytes, const unsigned char* element, size_t size) {
  auto* out = static_cast<unsigned char*>(dst);
  if (std::all_of(element, element + size, [&](unsigned char b) { return b == element[0]; })) {
    std::memset(out, element[0], bytes);
    return;
  }
  size_t done = std::min(size, bytes);
  std::memcpy(out, element, done);
  while (done < bytes) {
    const size_t n = std::min(done, bytes - done);
    std::memcpy(out + done, out, n);
    done += n;
  }
}

}  // namespace

Status Tensor::fill(double value) {
  if (!defined()) return failed_precondition("fill() of an undefined tensor");
  if (numel() == 0) return ok_status();
  unsigned char element[8];
  store_scalar(dtype_, value, element);
  const Strides repeat(shape_.size(), 0);  // every destination element reads the one element
  if (void* dst = host_data()) {
    if (is_contiguous()) {  // zeroing gradients every step: memset, not an element-wise copy
      fill_bytes(dst, nbytes(), element, element_size());
      return ok_status();
    }
    copy_strided(shape_, element_size(), dst, strides_, element, repeat);
    return ok_status();
  }
  auto [begin, end] = span_of(shape_, strides_, offset_bytes_, element_size());
  HostSpan span;
  if (is_contiguous()) {  // every byte of the span is ours: no need to read it first
    span.begin = begin;
    span.bytes.resize(end - begin);
  } else {
    TESSEL_ASSIGN_OR_RETURN(span, read_span(*storage_, begin, end));
  }
  copy_strided(shape_, element_size(), span.bytes.data(), strides_, element, repeat);
  return device()->copy_from_host(storage_->buffer(), begin, span.bytes.data(), span.bytes.size());
}

// ---- Printer ----

std::string Tensor::to_string(int64_t max_per_dim) const {
  if (!defined()) return "tensor (undefined)";
  std::string out =
      fmt::format("tensor {} {} on {}", dtype_name(dtype_), shape_string(shape_), device()->id());
  Expected<std::vector<unsigned char>> bytes = to_host_bytes();
  if (!bytes) return out + " (values unreadable: " + bytes.status().message() + ")";
  const Strides packed = contiguous_strides(shape_);
  const int64_t head = std::max<int64_t>(1, max_per_dim / 2);

  auto element = [&](int64_t index) {
    const double v = load_scalar(dtype_, bytes->data() + index * element_size());
    return is_floating_point(dtype_) ? fmt::format("{:g}", v)
                                     : fmt::format("{}", static_cast<int64_t>(v));
  };
  // Prints dimension d starting at flat element index `base`, indented by `depth` columns.
  auto print = [&](auto&& self, size_t d, int64_t base) -> std::string {
    if (d == shape_.size()) return element(base);
    std::string s = "[";
    const int64_t n = shape_[d];
    for (int64_t i = 0; i < n; ++i) {
      if (n > max_per_dim && i == head) {
        s += d + 1 == shape_.size() ? "..., " : "...,\n" + std::string(d + 1, ' ');
        i = n - head;
      }
      s += self(self, d + 1, base + i * packed[d]);
      if (i + 1 < n) s += d + 1 == shape_.size() ? ", " : ",\n" + std::string(d + 1, ' ');
    }
    return s + "]";
  };
  return out + "\n" + print(print, 0, 0);
}

}  // namespace tessel
