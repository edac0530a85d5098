// Tensors: view semantics (writes through views reach the base), strides after each view
// operation, contiguous() against element-by-element references written here, storage lifetime
// seen through allocator statistics, error messages, and the copy-through-host path for devices
// the host cannot address (a fake device below).
#include "runtime/tensor.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <numeric>
#include <vector>

#include "runtime/cpu/cpu_device.h"

namespace tessel {
namespace {

// Device memory the host must not touch directly: host_address() is null, so every tensor
// operation has to go through copies. Backed by malloc so the test can run anywhere.
class OpaqueDevice final : public Device {
 public:
  OpaqueDevice()
      : Device(DeviceKind::kOpenCL, 7, "opaque test device"),
        allocator_("opaque", RawAllocator{[](size_t bytes) -> Expected<DeviceBuffer> {
                                            return DeviceBuffer{std::malloc(bytes), bytes};
                                          },
                                          [](DeviceBuffer b) { std::free(b.handle); }}) {}
  CachingAllocator& allocator() override { return allocator_; }
  void* host_address(DeviceBuffer) const override { return nullptr; }
  Status synchronize() override { return ok_status(); }
  DeviceLimits limits() const override { return {}; }
  Expected<std::shared_ptr<Event>> record_event() override {
    return unimplemented("memory-only test device");
  }
  int copies = 0;

 protected:
  Status do_copy_from_host(DeviceBuffer dst, size_t off, const void* src, size_t n) override {
    ++copies;
    std::memcpy(static_cast<char*>(dst.handle) + off, src, n);
    return ok_status();
  }
  Status do_copy_to_host(void* dst, DeviceBuffer src, size_t off, size_t n) override {
    ++copies;
    std::memcpy(dst, static_cast<const char*>(src.handle) + off, n);
    return ok_status();
  }
  Status do_copy_on_device(DeviceBuffer dst, size_t d, DeviceBuffer src, size_t s,
                           size_t n) override {
    ++copies;
    std::memcpy(static_cast<char*>(dst.handle) + d, static_cast<const char*>(src.handle) + s, n);
    return ok_status();
  }
  // Tensor tests run no kernels.
  Expected<std::shared_ptr<KernelModule>> do_build(const KernelImage&) override {
    return unimplemented("memory-only test device");
  }
  Status do_launch(const KernelModule&, const LaunchGrid&,
                   const std::vector<KernelArgument>&) override {
    return unimplemented("memory-only test device");
  }

 private:
  CachingAllocator allocator_;
};

template <typename T>
std::vector<T> iota_values(int64_t n) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = static_cast<T>(i);
  return v;
}

// A [2, 3, 4] f32 tensor holding 0..23.
Tensor arange_234(Device* device = cpu_device()) {
  return *Tensor::from_vector(iota_values<float>(24), {2, 3, 4}, device);
}

TEST(Tensor, MadeContiguousOnTheCpu) {
  Tensor t = arange_234();
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.strides(), (Strides{12, 4, 1}));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(t.dtype(), DType::kF32);
  EXPECT_EQ(t.device(), cpu_device());
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.at<float>({1, 2, 3}), 23.0f);
  EXPECT_EQ(t.size(-1), 4);

  Tensor z = *Tensor::zeros({3, 5}, DType::kI32);
  EXPECT_EQ(*z.to_vector<int32_t>(), std::vector<int32_t>(15, 0));
  Tensor h = *Tensor::full({4}, 1.5, DType::kF16);
  const std::vector<Half> halves = *h.to_vector<Half>();
  for (Half v : halves)
    EXPECT_EQ(v.bits, 0x3e00);
  Tensor b = *Tensor::from_vector<bool>({true, false, true}, {3});
  EXPECT_EQ(*b.to_vector<bool>(), (std::vector<bool>{true, false, true}));
  Tensor scalar = *Tensor::full({}, 7, DType::kI64);
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.at<int64_t>({}), 7);
}

TEST(Tensor, WritesThroughViewsReachTheBase) {
  Tensor base = arange_234();
  Tensor sliced = *base.slice(2, 1, 4, 2);  // columns 1 and 3
  sliced.at<float>({1, 2, 1}) = -1;         // base[1, 2, 3]
  EXPECT_EQ(base.at<float>({1, 2, 3}), -1.0f);

  Tensor permuted = *base.permute({2, 0, 1});  // [4, 2, 3]
  permuted.at<float>({0, 1, 1}) = -2;          // base[1, 1, 0]
  EXPECT_EQ(base.at<float>({1, 1, 0}), -2.0f);

  Tensor row = *base.select(0, 1);  // [3, 4]
  row.at<float>({0, 0}) = -3;       // base[1, 0, 0]
  EXPECT_EQ(base.at<float>({1, 0, 0}), -3.0f);

  Tensor flat = *base.reshape({24});
  flat.at<float>({5}) = -4;  // base[0, 1, 1]
  EXPECT_EQ(base.at<float>({0, 1, 1}), -4.0f);

  // An expanded view shares one element among many indices.
  Tensor column = *Tensor::from_vector<float>({1, 2, 3}, {3, 1});
  Tensor wide = *column.expand({3, 5});
  wide.at<float>({2, 4}) = 30;
  EXPECT_EQ(column.at<float>({2, 0}), 30.0f);
  EXPECT_EQ(wide.at<float>({2, 0}), 30.0f);

  ASSERT_TRUE(sliced.fill(9).ok());  // fill writes only the view's elements
  std::vector<float> after = *base.to_vector<float>();
  for (int64_t i = 0; i < 24; ++i) {
    const bool in_view = (i % 4) % 2 == 1;
    if (in_view)
      EXPECT_EQ(after[i], 9.0f) << i;
    else
      EXPECT_NE(after[i], 9.0f) << i;
  }
}

TEST(Tensor, StridesAfterEachView) {
  Tensor t = arange_234();  // strides [12, 4, 1]
  Tensor p = *t.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Strides{1, 12, 4}));
  EXPECT_FALSE(p.is_contiguous());

  Tensor s = *t.slice(2, 1, 4, 2);
  EXPECT_EQ(s.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(s.strides(), (Strides{12, 4, 2}));
  EXPECT_EQ(s.offset_bytes(), 4u);

  Tensor s2 = *t.slice(1, -2, 3);  // rows 1..2
  EXPECT_EQ(s2.shape(), (Shape{2, 2, 4}));
  EXPECT_EQ(s2.strides(), (Strides{12, 4, 1}));
  EXPECT_EQ(s2.offset_bytes(), 16u);
  EXPECT_EQ(t.slice(1, 0, 3, 2)->shape(), (Shape{2, 2, 4}));  // ceil(3 / 2) rows
  EXPECT_EQ(t.slice(1, 2, 2)->shape(), (Shape{2, 0, 4}));

  Tensor tr = *t.transpose(0, -1);
  EXPECT_EQ(tr.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(tr.strides(), (Strides{1, 4, 12}));

  Tensor sel = *t.select(1, -1);
  EXPECT_EQ(sel.shape(), (Shape{2, 4}));
  EXPECT_EQ(sel.strides(), (Strides{12, 1}));
  EXPECT_EQ(sel.offset_bytes(), 32u);

  Tensor u = *t.unsqueeze(1);
  EXPECT_EQ(u.shape(), (Shape{2, 1, 3, 4}));
  EXPECT_EQ(u.strides(), (Strides{12, 12, 4, 1}));
  EXPECT_TRUE(u.is_contiguous());
  Tensor u_end = *t.unsqueeze(-1);
  EXPECT_EQ(u_end.shape(), (Shape{2, 3, 4, 1}));
  EXPECT_EQ(u_end.strides(), (Strides{12, 4, 1, 1}));
  EXPECT_EQ(u.squeeze(1)->shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(u.squeeze().strides(), (Strides{12, 4, 1}));

  Tensor col = *Tensor::zeros({3, 1}, DType::kF32);
  Tensor e = *col.expand({2, 3, 4});
  EXPECT_EQ(e.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(e.strides(), (Strides{0, 1, 0}));
  EXPECT_EQ(col.expand({-1, 6})->strides(), (Strides{1, 0}));

  // Reshape stays a view where runs of dims are contiguous, even after slicing an outer dim.
  Tensor r = *s2.reshape({2, 8});
  EXPECT_EQ(r.strides(), (Strides{12, 1}));
  EXPECT_EQ(r.storage(), t.storage());
  Tensor r2 = *t.reshape({-1, 6});
  EXPECT_EQ(r2.shape(), (Shape{4, 6}));
  EXPECT_EQ(r2.strides(), (Strides{6, 1}));
  Tensor split = *p.reshape({2, 2, 2, 3});  // splitting the permuted stride-1 dim is a view
  EXPECT_EQ(split.strides(), (Strides{2, 1, 12, 4}));
}

// Reference: element (i, j, k) of base [A, B, C] permuted by (2, 0, 1) sits at p[k, i, j].
template <typename T>
void expect_contiguous_permute_matches(DType dtype, int64_t A, int64_t B, int64_t C) {
  std::vector<T> values(static_cast<size_t>(A * B * C));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<T>(i * 7 + 3);
  Tensor base = *Tensor::from_vector(values, {A, B, C});
  ASSERT_EQ(base.dtype(), dtype);
  Tensor packed = *base.permute({2, 0, 1})->contiguous();
  ASSERT_TRUE(packed.is_contiguous());
  ASSERT_NE(packed.storage(), base.storage());
  const T* out = packed.data<T>();
  for (int64_t k = 0; k < C; ++k)
    for (int64_t i = 0; i < A; ++i)
      for (int64_t j = 0; j < B; ++j)
        ASSERT_EQ(out[(k * A + i) * B + j], values[static_cast<size_t>((i * B + j) * C + k)])
            << dtype_name(dtype) << " at " << k << "," << i << "," << j;
}

TEST(Tensor, ContiguousOfPermutedMatchesReference) {
  expect_contiguous_permute_matches<uint8_t>(DType::kU8, 3, 5, 7);
  expect_contiguous_permute_matches<int32_t>(DType::kI32, 4, 1, 9);
  expect_contiguous_permute_matches<int64_t>(DType::kI64, 2, 3, 4);
  expect_contiguous_permute_matches<double>(DType::kF64, 5, 6, 2);
  expect_contiguous_permute_matches<float>(DType::kF32, 70, 80, 90);  // large: parallel rows
}

TEST(Tensor, ContiguousOfSlicedAndExpandedMatchesReference) {
  constexpr int64_t R = 9, C = 10;
  Tensor base = *Tensor::from_vector(iota_values<int32_t>(R * C), {R, C});
  Tensor view = *base.slice(0, 1, 8, 3)->slice(1, 2, 10, 4);  // rows 1,4,7; cols 2,6
  std::vector<int32_t> got = *view.contiguous()->to_vector<int32_t>();
  std::vector<int32_t> expected;
  for (int64_t r = 1; r < 8; r += 3)
    for (int64_t c = 2; c < 10; c += 4)
      expected.push_back(static_cast<int32_t>(r * C + c));
  EXPECT_EQ(got, expected);

  Tensor f16 = *Tensor::from_vector<Half>({Half(1.0f), Half(-2.0f)}, {2, 1});
  std::vector<Half> wide = *f16.expand({2, 3})->contiguous()->to_vector<Half>();
  std::vector<float> as_float(wide.begin(), wide.end());
  EXPECT_EQ(as_float, (std::vector<float>{1, 1, 1, -2, -2, -2}));

  // contiguous() of a contiguous tensor is the tensor itself; clone() always copies.
  EXPECT_EQ(base.contiguous()->storage(), base.storage());
  EXPECT_NE(base.clone()->storage(), base.storage());
}

TEST(Tensor, CopyFromBetweenLayoutsAndOverlappingViews) {
  Tensor a = *Tensor::from_vector(iota_values<float>(6), {2, 3});
  Tensor b = *Tensor::zeros({3, 2}, DType::kF32);
  ASSERT_TRUE(b.transpose(0, 1)->copy_from(a).ok());  // b = a^T
  EXPECT_EQ(*b.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));

  // Source and destination overlap in one storage: the result is as if the source were read
  // first.
  Tensor m = *Tensor::from_vector(iota_values<float>(9), {3, 3});
  ASSERT_TRUE(m.copy_from(*m.transpose(0, 1)).ok());
  EXPECT_EQ(*m.to_vector<float>(), (std::vector<float>{0, 3, 6, 1, 4, 7, 2, 5, 8}));

  Status wrong = b.copy_from(a);
  EXPECT_EQ(wrong.code(), Code::kInvalidArgument);
  EXPECT_EQ(wrong.message(),
            "copy_from: f32 tensor of shape [2, 3] into f32 tensor of shape [3, 2]");
}

TEST(Tensor, StorageIsFreedWhenTheLastViewDies) {
  CpuDevice device;
  const AllocatorStats before = device.allocator().stats();
  EXPECT_EQ(before.current_bytes, 0u);
  {
    Tensor t = *Tensor::zeros({10, 100}, DType::kF32, &device);  // 4000 bytes -> 4096 block
    EXPECT_EQ(device.allocator().stats().current_bytes, 4096u);
    EXPECT_EQ(device.allocator().stats().requested_bytes, 4000u);
    Tensor v = *t.slice(0, 2, 5)->transpose(0, 1);
    t = Tensor();
    EXPECT_EQ(device.allocator().stats().current_bytes, 4096u);  // the view keeps it alive
    Tensor copy = *v.contiguous();                               // 3 * 100 * 4 = 1200 -> 1280
    EXPECT_EQ(device.allocator().stats().current_bytes, 4096u + 1280u);
    v = Tensor();
    EXPECT_EQ(device.allocator().stats().current_bytes, 1280u);
  }
  AllocatorStats s = device.allocator().stats();
  EXPECT_EQ(s.current_bytes, 0u);
  EXPECT_EQ(s.peak_bytes, 4096u + 1280u);
  EXPECT_EQ(s.cached_bytes, 4096u + 1280u);
  EXPECT_EQ(s.allocations, 2);
  EXPECT_EQ(s.releases, 2);

  // A training step's second iteration allocates nothing new from the device.
  for (int step = 0; step < 3; ++step) {
    Tensor x = *Tensor::empty({10, 100}, DType::kF32, &device);
    Tensor y = *Tensor::empty({3, 100}, DType::kF32, &device);
  }
  s = device.allocator().stats();
  EXPECT_EQ(s.raw_allocations, 2);
  EXPECT_EQ(s.cache_hits, 6);
  EXPECT_EQ(s.peak_bytes, 4096u + 1280u);
}

TEST(Tensor, ShapeErrorsNameTheShapes) {
  Tensor t = arange_234();
  auto message = [](const auto& e) { return e.status().message(); };
  EXPECT_EQ(message(t.reshape({5, 5})), "reshape [2, 3, 4] (24 elements) to [5, 5] (25 elements)");
  EXPECT_EQ(message(t.reshape({-1, 5})),
            "reshape [2, 3, 4] (24 elements) to [-1, 5]: no size for -1 fits");
  EXPECT_EQ(message(t.permute({1, 0, 2})->reshape({24})),
            "reshape [3, 2, 4] (strides [4, 12, 1]) to [24] cannot be a view of this layout: "
            "call contiguous() first");
  EXPECT_EQ(message(t.permute({0, 1})), "permute [0, 1] of shape [2, 3, 4]: needs 3 dims");
  EXPECT_EQ(message(t.permute({0, 1, 1})),
            "permute [0, 1, 1] of shape [2, 3, 4]: dim 1 appears twice");
  EXPECT_EQ(message(t.slice(1, 0, 4)),
            "slice [0:4] along dim 1 of shape [2, 3, 4]: the dim has 3 elements");
  EXPECT_EQ(message(t.slice(3, 0, 1)), "slice: dim 3 is out of range for shape [2, 3, 4] (rank 3)");
  EXPECT_EQ(message(t.expand({2, 6, 4})),
            "expand [2, 3, 4] to [2, 6, 4]: dim 1 has size 3; only size 1 can expand");
  EXPECT_EQ(message(t.squeeze(0)), "squeeze dim 0 of shape [2, 3, 4]: its size is 2, not 1");
  EXPECT_EQ(message(t.unsqueeze(4)),
            "unsqueeze dim 4 of shape [2, 3, 4]: expected a dim in [-4, 3]");
  EXPECT_EQ(message(Tensor::empty({2, -1}, DType::kF32)), "shape [2, -1] has a negative size");
  EXPECT_EQ(message(Tensor::from_vector<float>({1, 2, 3}, {2, 2})),
            "from_vector: 3 values for shape [2, 2] (4 elements)");
  EXPECT_EQ(message(t.to_vector<double>()), "to_vector<f64>() of a f32 tensor");
  EXPECT_EQ(t.slice(0, 0, 1, 0).status().code(), Code::kInvalidArgument);
}

TEST(Tensor, OpaqueDeviceGoesThroughTheHost) {
  OpaqueDevice remote;
  Tensor host = arange_234();
  Tensor t = *host.to(&remote);
  EXPECT_EQ(t.device(), &remote);
  EXPECT_GT(remote.copies, 0);
  EXPECT_EQ(*t.to_vector<float>(), *host.to_vector<float>());

  // A permuted and sliced view on the device, made contiguous there.
  Tensor view = *t.permute({2, 0, 1})->slice(0, 1, 4, 2);  // [2, 2, 3]: k = 1, 3
  Tensor packed = *view.contiguous();
  EXPECT_EQ(packed.device(), &remote);
  std::vector<float> expected;
  for (int64_t k = 1; k < 4; k += 2)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        expected.push_back(static_cast<float>((i * 3 + j) * 4 + k));
  EXPECT_EQ(*packed.to_vector<float>(), expected);
  EXPECT_EQ(*view.to_vector<float>(), expected);

  // Filling a strided view on the device touches only its elements.
  ASSERT_TRUE(view.fill(-1).ok());
  std::vector<float> all = *t.to_vector<float>();
  for (int64_t i = 0; i < 24; ++i)
    EXPECT_EQ(all[i] == -1.0f, i % 4 == 1 || i % 4 == 3) << i;

  // Writing into a strided view on the device from a host tensor.
  Tensor ones = *Tensor::full({2, 2, 3}, 5, DType::kF32);
  ASSERT_TRUE(view.copy_from(ones).ok());
  all = *t.to_vector<float>();
  for (int64_t i = 0; i < 24; ++i)
    EXPECT_EQ(all[i] == 5.0f, i % 4 == 1 || i % 4 == 3) << i;

  Tensor back = *t.to(cpu_device());
  EXPECT_EQ(back.device(), cpu_device());
  EXPECT_EQ(*back.to_vector<float>(), all);
  EXPECT_EQ(host.to(cpu_device())->storage(), host.storage());  // same device: no copy
}

TEST(Tensor, PrinterShowsDtypeShapeDeviceAndValues) {
  Tensor t = *Tensor::from_vector(iota_values<int32_t>(6), {2, 3});
  EXPECT_EQ(t.to_string(), "tensor i32 [2, 3] on cpu\n[[0, 1, 2],\n [3, 4, 5]]");
  Tensor f = *Tensor::from_vector<float>({0.5f, -1.25f, 3, 4, 5, 6, 7, 8}, {8});
  EXPECT_EQ(f.to_string(4), "tensor f32 [8] on cpu\n[0.5, -1.25, ..., 7, 8]");
  EXPECT_EQ(Tensor().to_string(), "tensor (undefined)");
}

}  // namespace
}  // namespace tessel
