// oneDNN's convolution primitives behind dlopen for `tessel bench conv`. The types come from
// oneDNN's C header (Debian libdnnl-dev, which scripts/setup.sh installs); every function is
// looked up with dlsym, so nothing links against the library. Without the header the peer is
// simply absent. Written against the oneDNN 2.x C API (op descriptors, then primitive
// descriptors); the 3.x API creates primitive descriptors directly and is not handled.
#include "cli/bench_conv_peer.h"

#include <dlfcn.h>

#include <cstring>
#include <vector>

#if __has_include(<oneapi/dnnl/dnnl.h>)
#include <oneapi/dnnl/dnnl.h>
#define TESSEL_HAVE_DNNL_HEADER 1
#endif

namespace tessel::cli {

const char* conv_pass_name(ConvPass pass) {
  switch (pass) {
    case ConvPass::kForward:
      return "fwd";
    case ConvPass::kBackwardData:
      return "bwd_data";
    case ConvPass::kBackwardWeights:
      return "bwd_weight";
  }
  return "?";
}

#if defined(TESSEL_HAVE_DNNL_HEADER) && DNNL_VERSION_MAJOR == 2
namespace {

// The oneDNN functions used, resolved from the library's handle.
struct Dnnl {
#define TESSEL_DNNL_FN(name) decltype(&::name) name = nullptr;
  TESSEL_DNNL_FN(dnnl_engine_create)
  TESSEL_DNNL_FN(dnnl_engine_destroy)
  TESSEL_DNNL_FN(dnnl_stream_create)
  TESSEL_DNNL_FN(dnnl_stream_destroy)
  TESSEL_DNNL_FN(dnnl_stream_wait)
  TESSEL_DNNL_FN(dnnl_memory_desc_init_by_tag)
  TESSEL_DNNL_FN(dnnl_memory_desc_get_size)
  TESSEL_DNNL_FN(dnnl_memory_create)
  TESSEL_DNNL_FN(dnnl_memory_destroy)
  TESSEL_DNNL_FN(dnnl_memory_get_data_handle)
  TESSEL_DNNL_FN(dnnl_convolution_forward_desc_init)
  TESSEL_DNNL_FN(dnnl_convolution_backward_data_desc_init)
  TESSEL_DNNL_FN(dnnl_convolution_backward_weights_desc_init)
  TESSEL_DNNL_FN(dnnl_primitive_desc_create)
  TESSEL_DNNL_FN(dnnl_primitive_desc_destroy)
  TESSEL_DNNL_FN(dnnl_primitive_desc_query_md)
  TESSEL_DNNL_FN(dnnl_primitive_create)
  TESSEL_DNNL_FN(dnnl_primitive_destroy)
  TESSEL_DNNL_FN(dnnl_primitive_execute)
  TESSEL_DNNL_FN(dnnl_version)
#undef TESSEL_DNNL_FN

  // The name of the first function that is missing, or null.
  const char* load(void* handle) {
#define TESSEL_DNNL_LOAD(name)                                   \
  name = reinterpret_cast<decltype(name)>(dlsym(handle, #name)); \
  if (!name) return #name;
    TESSEL_DNNL_LOAD(dnnl_engine_create)
    TESSEL_DNNL_LOAD(dnnl_engine_destroy)
    TESSEL_DNNL_LOAD(dnnl_stream_create)
    TESSEL_DNNL_LOAD(dnnl_stream_destroy)
    TESSEL_DNNL_LOAD(dnnl_stream_wait)
    TESSEL_DNNL_LOAD(dnnl_memory_desc_init_by_tag)
    TESSEL_DNNL_LOAD(dnnl_memory_desc_get_size)
    TESSEL_DNNL_LOAD(dnnl_memory_create)
    TESSEL_DNNL_LOAD(dnnl_memory_destroy)
    TESSEL_DNNL_LOAD(dnnl_memory_get_data_handle)
    TESSEL_DNNL_LOAD(dnnl_convolution_forward_desc_init)
    TESSEL_DNNL_LOAD(dnnl_convolution_backward_data_desc_init)
    TESSEL_DNNL_LOAD(dnnl_convolution_backward_weights_desc_init)
    TESSEL_DNNL_LOAD(dnnl_primitive_desc_create)
    TESSEL_DNNL_LOAD(dnnl_primitive_desc_destroy)
    TESSEL_DNNL_LOAD(dnnl_primitive_desc_query_md)
    TESSEL_DNNL_LOAD(dnnl_primitive_create)
    TESSEL_DNNL_LOAD(dnnl_primitive_destroy)
    TESSEL_DNNL_LOAD(dnnl_primitive_execute)
    TESSEL_DNNL_LOAD(dnnl_version)
#undef TESSEL_DNNL_LOAD
    return nullptr;
  }
};

Status check(dnnl_status_t status, const char* what) {
  if (status == dnnl_success) return ok_status();
  return internal_error("oneDNN: {} returned status {}", what, int(status));
}

class OneDnnConvPrimitive : public ConvPrimitive {
 public:
  OneDnnConvPrimitive(const Dnnl& f, dnnl_stream_t stream) : f_(f), stream_(stream) {}
  ~OneDnnConvPrimitive() override {
    if (primitive_) f_.dnnl_primitive_destroy(primitive_);
    for (dnnl_memory_t m : memories_)
      f_.dnnl_memory_destroy(m);
  }

  // Memory for argument `arg` in the layout the primitive chose (`query`), filled with a small
  // constant (the values do not matter for the timing; denormals or NaNs would).
  Status add_memory(dnnl_engine_t engine, const_dnnl_primitive_desc_t pd, dnnl_query_t query,
                    int arg) {
    const dnnl_memory_desc_t* md = f_.dnnl_primitive_desc_query_md(pd, query, 0);
    if (!md) return internal_error("oneDNN: no memory descriptor for argument {}", arg);
    dnnl_memory_t memory = nullptr;
    TESSEL_TRY(check(f_.dnnl_memory_create(&memory, md, engine, DNNL_MEMORY_ALLOCATE),
                     "dnnl_memory_create"));
    memories_.push_back(memory);
    void* data = nullptr;
    TESSEL_TRY(check(f_.dnnl_memory_get_data_handle(memory, &data), "get_data_handle"));
    const size_t floats = f_.dnnl_memory_desc_get_size(md) / sizeof(float);
    std::vector<float> fill(floats, 0.01f);
    std::memcpy(data, fill.data(), floats * sizeof(float));
    args_.push_back({arg, memory});
    return ok_status();
  }

  Status finish(const_dnnl_primitive_desc_t pd) {
    return check(f_.dnnl_primitive_create(&primitive_, pd), "dnnl_primitive_create");
  }

  Status run() override {
    TESSEL_TRY(
        check(f_.dnnl_primitive_execute(primitive_, stream_, int(args_.size()), args_.data()),
              "dnnl_primitive_execute"));
    return check(f_.dnnl_stream_wait(stream_), "dnnl_stream_wait");
  }

 private:
  const Dnnl& f_;
  dnnl_stream_t stream_;
  dnnl_primitive_t primitive_ = nullptr;
  std::vector<dnnl_memory_t> memories_;
  std::vector<dnnl_exec_arg_t> args_;
};

class OneDnnConv : public ConvPeer {
 public:
  OneDnnConv(void* handle, const Dnnl& f) : handle_(handle), f_(f) {}
  ~OneDnnConv() override {
    if (stream_) f_.dnnl_stream_destroy(stream_);
    if (engine_) f_.dnnl_engine_destroy(engine_);
    dlclose(handle_);
  }

  Status start() {
    TESSEL_TRY(check(f_.dnnl_engine_create(&engine_, dnnl_cpu, 0), "dnnl_engine_create"));
    return check(f_.dnnl_stream_create(&stream_, engine_, dnnl_stream_default_flags),
                 "dnnl_stream_create");
  }

  std::string describe() const override {
    const dnnl_version_t* v = f_.dnnl_version();
    return fmt::format("oneDNN {}.{}.{}", v->major, v->minor, v->patch);
  }
  double settle_seconds() const override { return 0.02; }

  Expected<std::unique_ptr<ConvPrimitive>> prepare(const ConvLayerShape& s,
                                                   ConvPass pass) override {
    const dnnl_dims_t x_dims = {s.n, s.c, s.h, s.w}, w_dims = {s.o, s.c, s.k, s.k},
                      y_dims = {s.n, s.o, s.out_h(), s.out_w()}, strides = {s.stride, s.stride},
                      pad_l = {s.pad, s.pad};
    const int64_t pad_r_h = (s.out_h() - 1) * s.stride + s.k - s.h - s.pad;
    const int64_t pad_r_w = (s.out_w() - 1) * s.stride + s.k - s.w - s.pad;
    const dnnl_dims_t pad_r = {pad_r_h, pad_r_w};
    dnnl_memory_desc_t x_md, w_md, y_md;
    TESSEL_TRY(
        check(f_.dnnl_memory_desc_init_by_tag(&x_md, 4, x_dims, dnnl_f32, dnnl_format_tag_any),
              "memory_desc_init_by_tag"));
    TESSEL_TRY(
        check(f_.dnnl_memory_desc_init_by_tag(&w_md, 4, w_dims, dnnl_f32, dnnl_format_tag_any),
              "memory_desc_init_by_tag"));
    TESSEL_TRY(
        check(f_.dnnl_memory_desc_init_by_tag(&y_md, 4, y_dims, dnnl_f32, dnnl_format_tag_any),
              "memory_desc_init_by_tag"));
    // The forward primitive descriptor is also the hint the backward ones need.
    dnnl_convolution_desc_t fwd_desc;
    TESSEL_TRY(check(f_.dnnl_convolution_forward_desc_init(&fwd_desc, dnnl_forward_training,
                                                           dnnl_convolution_direct, &x_md, &w_md,
                                                           nullptr, &y_md, strides, pad_l, pad_r),
                     "convolution_forward_desc_init"));
    dnnl_primitive_desc_t fwd_pd = nullptr;
    TESSEL_TRY(check(f_.dnnl_primitive_desc_create(&fwd_pd, &fwd_desc, nullptr, engine_, nullptr),
                     "primitive_desc_create (forward)"));
    dnnl_primitive_desc_t pd = fwd_pd;
    dnnl_convolution_desc_t bwd_desc;
    Status made = ok_status();
    if (pass == ConvPass::kBackwardData) {
      made =
          check(f_.dnnl_convolution_backward_data_desc_init(
                    &bwd_desc, dnnl_convolution_direct, &x_md, &w_md, &y_md, strides, pad_l, pad_r),
                "convolution_backward_data_desc_init");
    } else if (pass == ConvPass::kBackwardWeights) {
      made = check(f_.dnnl_convolution_backward_weights_desc_init(
                       &bwd_desc, dnnl_convolution_direct, &x_md, &w_md, nullptr, &y_md, strides,
                       pad_l, pad_r),
                   "convolution_backward_weights_desc_init");
    }
    if (made.ok() && pass != ConvPass::kForward) {
      pd = nullptr;
      made = check(f_.dnnl_primitive_desc_create(&pd, &bwd_desc, nullptr, engine_, fwd_pd),
                   "primitive_desc_create (backward)");
    }
    auto prim = std::make_unique<OneDnnConvPrimitive>(f_, stream_);
    if (made.ok()) {
      switch (pass) {
        case ConvPass::kForward:
          made = prim->add_memory(engine_, pd, dnnl_query_src_md, DNNL_ARG_SRC);
          if (made.ok())
            made = prim->add_memory(engine_, pd, dnnl_query_weights_md, DNNL_ARG_WEIGHTS);
          if (made.ok()) made = prim->add_memory(engine_, pd, dnnl_query_dst_md, DNNL_ARG_DST);
          break;
        case ConvPass::kBackwardData:
          made = prim->add_memory(engine_, pd, dnnl_query_diff_dst_md, DNNL_ARG_DIFF_DST);
          if (made.ok())
            made = prim->add_memory(engine_, pd, dnnl_query_weights_md, DNNL_ARG_WEIGHTS);
          if (made.ok())
            made = prim->add_memory(engine_, pd, dnnl_query_diff_src_md, DNNL_ARG_DIFF_SRC);
          break;
        case ConvPass::kBackwardWeights:
          made = prim->add_memory(engine_, pd, dnnl_query_src_md, DNNL_ARG_SRC);
          if (made.ok())
            made = prim->add_memory(engine_, pd, dnnl_query_diff_dst_md, DNNL_ARG_DIFF_DST);
          if (made.ok())
            made = prim->add_memory(engine_, pd, dnnl_query_diff_weights_md, DNNL_ARG_DIFF_WEIGHTS);
          break;
      }
    }
    if (made.ok()) made = prim->finish(pd);
    if (pd && pd != fwd_pd) f_.dnnl_primitive_desc_destroy(pd);
    f_.dnnl_primitive_desc_destroy(fwd_pd);
    TESSEL_TRY(made);
    return std::unique_ptr<ConvPrimitive>(std::move(prim));
  }

 private:
  void* handle_;
  Dnnl f_;
  dnnl_engine_t engine_ = nullptr;
  dnnl_stream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<ConvPeer> load_onednn_conv(int threads, std::string* why) {
  // oneDNN runs on OpenMP: the thread count is read when libgomp starts, and set again below in
  // case the runtime was already up.
  setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
  // RTLD_NODELETE: libgomp's worker threads spin for a while after a parallel region and outlive
  // any dlclose; unloading oneDNN (and with it libgomp) under a spinning worker crashed `bench
  // conv` at exit with 2 or more threads, losing its last, buffered lines.
  void* handle = nullptr;
  for (const char* name : {"libdnnl.so.2", "libdnnl.so"})
    if ((handle = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE))) break;
  if (!handle) {
    const char* e = dlerror();
    *why = std::string("oneDNN not loaded: ") + (e ? e : "unknown dlopen error");
    return nullptr;
  }
  Dnnl f;
  if (const char* missing = f.load(handle)) {
    *why = std::string("oneDNN: no ") + missing + " in the library";
    dlclose(handle);
    return nullptr;
  }
  // dlsym on the library's handle also searches its dependencies (libgomp).
  if (auto set_threads = reinterpret_cast<void (*)(int)>(dlsym(handle, "omp_set_num_threads")))
    set_threads(threads);
  auto peer = std::make_unique<OneDnnConv>(handle, f);
  if (Status s = peer->start(); !s.ok()) {
    *why = s.message();
    return nullptr;
  }
  return peer;
}

#else

std::unique_ptr<ConvPeer> load_onednn_conv(int, std::string* why) {
  *why = "oneDNN 2.x's C header (libdnnl-dev) was not there when tessel was built";
  return nullptr;
}

#endif

}  // namespace tessel::cli
