// Tensors: a typed, shaped, strided view of device memory.
//
// A Tensor is a cheap handle: a shared, reference-counted Storage (one device buffer) plus dtype,
// shape, strides (in elements) and a byte offset into the storage. Copying a Tensor copies the
// handle, not the data. View operations (slice, select, permute, transpose, reshape of viewable
// data, expand, squeeze, unsqueeze) make new handles on the same storage, so a write through a
// view is seen by every other view. The buffer goes back to its device's allocator when the last
// handle on it dies.
//
//   TESSEL_ASSIGN_OR_RETURN(Tensor x, Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
//   TESSEL_ASSIGN_OR_RETURN(Tensor xt, x.transpose(0, 1));   // [3, 2], strides [1, 3], no copy
//   xt.at<float>({2, 1}) = 60;                               // x is now {1, 2, 3, 4, 5, 60}
//   TESSEL_ASSIGN_OR_RETURN(Tensor packed, xt.contiguous()); // a copy, strides [2, 1]
//
// Shape mistakes come back as a Status naming the shapes. Element access (at, data) is for host
// code and tests, on host-addressable devices; using it elsewhere, with the wrong C++ type or an
// index out of range, is a bug (TESSEL_CHECK).
//
// Devices whose memory the host cannot address (OpenCL, CUDA): contiguous(), to(), fill(),
// to_vector() and the printer work by copying the bytes the view spans to the host, doing the work
// there and copying back. That is correct and slow; device kernels replace it as they arrive.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/device.h"
#include "runtime/shape.h"
#include "support/dtype.h"
#include "support/status.h"

namespace tessel {

// One buffer on one device, released back to the device's allocator when destroyed.
class Storage {
 public:
  static Expected<std::shared_ptr<Storage>> allocate(Device* device, size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  Device* device() const { return device_; }
  DeviceBuffer buffer() const { return buffer_; }
  // The bytes asked for (the buffer may be larger).
  size_t bytes() const { return bytes_; }
  // Start of the buffer on the host, or nullptr where the device memory is not host-addressable.
  void* host_address() const { return device_->host_address(buffer_); }

 private:
  Storage(Device* device, DeviceBuffer buffer, size_t bytes)
      : device_(device), buffer_(buffer), bytes_(bytes) {}
  Device* device_;
  DeviceBuffer buffer_;
  size_t bytes_;
};

class Tensor {
 public:
  // An undefined tensor (no storage); defined() is false.
  Tensor() = default;

  // ---- Making tensors (device defaults to the CPU) ----
  // Uninitialised memory.
  static Expected<Tensor> empty(const Shape& shape, DType dtype, Device* device = cpu_device());
  static Expected<Tensor> zeros(const Shape& shape, DType dtype, Device* device = cpu_device());
  static Expected<Tensor> full(const Shape& shape, double value, DType dtype,
                               Device* device = cpu_device());
  // `values` in row-major order; their count must equal the shape's element count.
  template <typename T>
  static Expected<Tensor> from_vector(const std::vector<T>& values, const Shape& shape,
                                      Device* device = cpu_device());

  // ---- What it is ----
  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  // Size of dimension `dim` (negative counts from the end); a bad dim is a bug.
  int64_t size(int64_t dim) const;
  int64_t numel() const { return shape_numel(shape_); }
  size_t element_size() const { return dtype_size(dtype_); }
  // Bytes of the elements themselves (numel * element size), not of the storage.
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  size_t offset_bytes() const { return offset_bytes_; }
  Device* device() const { return storage_ ? storage_->device() : nullptr; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  // Row-major with no gaps (the strides of size-1 dimensions do not matter).
  bool is_contiguous() const;

  // ---- Views (no copy) ----
  // Elements start, start + step, ... below end along dim. start and end may be negative (from
  // the end); step >= 1.
  Expected<Tensor> slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  // The sub-tensor at `index` along dim, without that dimension.
  Expected<Tensor> select(int64_t dim, int64_t index) const;
  // Dimension i of the result is dimension order[i] of this tensor.
  Expected<Tensor> permute(const std::vector<int64_t>& order) const;
  Expected<Tensor> transpose(int64_t dim0, int64_t dim1) const;
  // Same elements in a new shape (one size may be -1: inferred). A view whenever the strides
  // allow it (always for contiguous data); otherwise an error that says to call contiguous().
  Expected<Tensor> reshape(const Shape& shape) const;
  // Broadcast to `shape`: size-1 dimensions (and new leading ones) repeat with stride 0; -1 keeps
  // a size. Writing through an expanded view writes the one shared element.
  Expected<Tensor> expand(const Shape& shape) const;
  // Removes dimension dim, which must have size 1; squeeze() removes every size-1 dimension.
  Expected<Tensor> squeeze(int64_t dim) const;
  Tensor squeeze() const;
  // Inserts a size-1 dimension at dim (in [-rank-1, rank]).
  Expected<Tensor> unsqueeze(int64_t dim) const;

  // ---- Copies ----
  // This tensor if already contiguous, else a contiguous copy on the same device.
  Expected<Tensor> contiguous() const;
  // Always a new contiguous copy on the same device.
  Expected<Tensor> clone() const;
  // This tensor if already on `device`, else a contiguous copy there.
  Expected<Tensor> to(Device* device) const;
  // Copies the elements of `src` (same shape and dtype, any device and strides) into this
  // tensor's elements.
  Status copy_from(const Tensor& src);
  // Sets every element (of this view) to value, converted as store_scalar() does.
  Status fill(double value);

  // ---- Host access (host-addressable devices; misuse is a bug) ----
  // Pointer to the first element.
  template <typename T>
  T* data() const;
  template <typename T>
  T& at(std::initializer_list<int64_t> index) const;
  // All elements in row-major order, from any device and any strides. T must match dtype().
  template <typename T>
  Expected<std::vector<T>> to_vector() const;
  // A short description with the values, at most `max_per_dim` per dimension (then "...").
  std::string to_string(int64_t max_per_dim = 6) const;

 private:
  Tensor(std::shared_ptr<Storage> storage, DType dtype, Shape shape, Strides strides,
         size_t offset_bytes)
      : storage_(std::move(storage)),
        dtype_(dtype),
        shape_(std::move(shape)),
        strides_(std::move(strides)),
        offset_bytes_(offset_bytes) {}
  Tensor view(Shape shape, Strides strides, size_t offset_bytes) const {
    return Tensor(storage_, dtype_, std::move(shape), std::move(strides), offset_bytes);
  }
  // Host pointer to the first element, or nullptr when the device is not host-addressable.
  void* host_data() const;
  // The elements' bytes in row-major order, on the host.
  Expected<std::vector<unsigned char>> to_host_bytes() const;
  std::string describe() const;

  std::shared_ptr<Storage> storage_;
  DType dtype_ = DType::kF32;
  Shape shape_;
  Strides strides_;
  size_t offset_bytes_ = 0;
};

// ---- Template definitions ----

template <typename T>
Expected<Tensor> Tensor::from_vector(const std::vector<T>& values, const Shape& shape,
                                     Device* device) {
  TESSEL_TRY(check_shape(shape, sizeof(T)));
  if (static_cast<int64_t>(values.size()) != shape_numel(shape)) {
    return invalid_argument("from_vector: {} values for shape {} ({} elements)", values.size(),
                            shape_string(shape), shape_numel(shape));
  }
  TESSEL_ASSIGN_OR_RETURN(Tensor t, empty(shape, dtype_of<T>, device));
  if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> packs bits: widen to bytes
    std::vector<uint8_t> bytes(values.begin(), values.end());
    TESSEL_TRY(device->copy_from_host(t.storage_->buffer(), 0, bytes.data(), t.nbytes()));
  } else {
    TESSEL_TRY(device->copy_from_host(t.storage_->buffer(), 0, values.data(), t.nbytes()));
  }
  return t;
}

template <typename T>
T* Tensor::data() const {
  TESSEL_CHECK(defined() && dtype_of<T> == dtype_, "data<{}>() of a {} tensor",
               dtype_name(dtype_of<T>), defined() ? dtype_name(dtype_) : "undefined");
  void* p = host_data();
  TESSEL_CHECK(p != nullptr, "data() of a tensor on {}, which the host cannot address",
               device()->id());
  return static_cast<T*>(p);
}

template <typename T>
T& Tensor::at(std::initializer_list<int64_t> index) const {
  TESSEL_CHECK(static_cast<int64_t>(index.size()) == rank(), "at() with {} indices on shape {}",
               index.size(), shape_string(shape_));
  int64_t offset = 0, d = 0;
  for (int64_t i : index) {
    TESSEL_CHECK(i >= 0 && i < shape_[d], "index {} out of range for dim {} of shape {}", i, d,
                 shape_string(shape_));
    offset += i * strides_[d++];
  }
  return data<T>()[offset];
}

template <typename T>
Expected<std::vector<T>> Tensor::to_vector() const {
  if (!defined()) return failed_precondition("to_vector() of an undefined tensor");
  if (dtype_of<T> != dtype_) {
    return invalid_argument("to_vector<{}>() of a {} tensor", dtype_name(dtype_of<T>),
                            dtype_name(dtype_));
  }
  TESSEL_ASSIGN_OR_RETURN(std::vector<unsigned char> bytes, to_host_bytes());
  if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> packs bits
    return std::vector<bool>(bytes.begin(), bytes.end());
  } else {
    std::vector<T> values(static_cast<size_t>(numel()));
    if (!bytes.empty()) std::memcpy(values.data(), bytes.data(), bytes.size());
    return values;
  }
}

}  // namespace tessel
