// Compiled tile kernels per device (see kernel_cache.h).
#include "ops/kernel_cache.h"

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>

#include "ops/device_kernel.h"
#include "ops/launch_hook.h"
#include "ops/tuned_launch.h"
#include "support/hash.h"
#include "tile/parse/parser.h"

namespace tessel::ops {

struct EmbeddedKernelFile {
  const char* name;
  const char* text;
};
extern const EmbeddedKernelFile kEmbeddedKernelFiles[];
extern const size_t kEmbeddedKernelFileCount;

const std::map<std::string, std::string>& embedded_kernel_files() {
  static const std::map<std::string, std::string> files = [] {
    std::map<std::string, std::string> m;
    for (size_t i = 0; i < kEmbeddedKernelFileCount; ++i)
      m.emplace(kEmbeddedKernelFiles[i].name, kEmbeddedKernelFiles[i].text);
    return m;
  }();
  return files;
}

namespace {

// Every kernel of every embedded file, parsed once, by kernel name.
Expected<const tile::Kernel*> parsed_kernel(const std::string& name) {
  static const Expected<std::map<std::string, tile::Kernel>> all =
      []() -> Expected<std::map<std::string, tile::Kernel>> {
    std::map<std::string, tile::Kernel> m;
    // Named "kernels/<file>" as tessel_tilec names them, so that the ahead-of-time CPU
    // kernels, found by the hash of the rendered source, are found (tile/run/cpu_aot.h).
    for (const auto& [file, text] : embedded_kernel_files()) {
      TESSEL_ASSIGN_OR_RETURN(std::vector<tile::Kernel> kernels,
                              tile::parse_tile(text, "kernels/" + file));
      for (tile::Kernel& k : kernels) {
        std::string kernel_name = k.name;
        m.emplace(std::move(kernel_name), std::move(k));
      }
    }
    return m;
  }();
  if (!all.ok()) return all.status();
  auto it = all->find(name);
  if (it == all->end()) return not_found("no tile kernel named '{}' in kernels/*.tile", name);
  return &it->second;
}

}  // namespace

Expected<const tile::Kernel*> embedded_kernel(const std::string& name) {
  return parsed_kernel(name);
}

bool launches_on(DeviceKind) {
  return true;
}

namespace {

struct Cache {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const DeviceKernel>> kernels;
  KernelCacheStats stats;
};
Cache& cache() {
  static Cache c;
  return c;
}

// The device, the kernel, its parameters and the target options in force (set_target_options):
// a kernel compiled before the options changed is not reused after.
std::string cache_key(Device* device, const std::string& kernel, const KernelParams& params) {
  const TargetOptions o = target_options(device->kind());
  std::string key = fmt::format("{}|{}|{}|{}|{}", device->id(), kernel, o.threads_per_block,
                                o.fast_memory_bytes, o.cpu_isa);
  for (const auto& [name, value] : params)
    key += "|" + name + "=" + value;
  return key;
}

// `name` is an embedded kernel's name, or "generated:<hash>" for a kernel made at run time,
// which `parse` then supplies.
Expected<std::shared_ptr<const DeviceKernel>> find_or_compile(
    Device* device, const std::string& name, const KernelParams& params,
    const std::function<Expected<const tile::Kernel*>()>& parse = nullptr) {
  Cache& c = cache();
  std::string key = cache_key(device, name, params);
  // One lock around lookup and compile: a compile happens once per key per process, and two
  // threads asking for the same kernel must not both compile it.
  std::lock_guard<std::mutex> lock(c.mutex);
  auto it = c.kernels.find(key);
  if (it != c.kernels.end()) return it->second;
  TESSEL_ASSIGN_OR_RETURN(const tile::Kernel* kernel, parse ? parse() : parsed_kernel(name));
  auto start = std::chrono::steady_clock::now();
  Expected<DeviceKernel> compiled = DeviceKernel::compile(*kernel, device, params);
  if (!compiled.ok())
    return compiled.status().with_context("compiling kernel '{}' for {}", name, device->id());
  (compiled->ahead_of_time() ? c.stats.ahead_of_time : c.stats.compiled) += 1;
  c.stats.compile_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto shared = std::make_shared<const DeviceKernel>(std::move(*compiled));
  c.kernels.emplace(key, shared);
  return shared;
}

Expected<tile::ScalarType> tile_scalar_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return tile::ScalarType::kF32;
    case DType::kF64:
      return tile::ScalarType::kF64;
    case DType::kF16:
      return tile::ScalarType::kF16;
    case DType::kBF16:
      return tile::ScalarType::kBF16;
    case DType::kI8:
      return tile::ScalarType::kI8;
    case DType::kU8:
      return tile::ScalarType::kU8;
    case DType::kI16:
      return tile::ScalarType::kI16;
    case DType::kI32:
      return tile::ScalarType::kI32;
    case DType::kI64:
      return tile::ScalarType::kI64;
    case DType::kBool:
      return tile::ScalarType::kBool;
  }
  return invalid_argument("unknown dtype");
}

// A tensor as a kernel argument: its buffer where it lies, and its offset in elements (the
// kernel ABI's offset slot), the same on every device.
Expected<tile::TensorArg> tensor_arg(const View& v) {
  const Tensor& t = v.tensor;
  TESSEL_ASSIGN_OR_RETURN(tile::ScalarType type, tile_scalar_type(t.dtype()));
  tile::TensorArg arg{nullptr, type, v.shape, v.strides};
  if (shape_numel(v.shape) == 0) return arg;
  if (t.offset_bytes() % t.element_size() != 0) {
    return internal_error("a {} tensor at byte offset {}, not a whole number of elements",
                          dtype_name(t.dtype()), t.offset_bytes());
  }
  arg.data = t.storage()->buffer().handle;
  arg.offset = static_cast<int64_t>(t.offset_bytes() / t.element_size());
  return arg;
}

}  // namespace

Status prepare_kernel(Device* device, const std::string& kernel, KernelParams params) {
  return find_or_compile(device, kernel, params).status();
}

namespace {

thread_local LaunchHook* g_launch_hook = nullptr;

// The kernel's arguments as the ABI takes them.
Expected<std::vector<tile::LaunchArg>> launch_args_of(const std::vector<KernelArg>& args) {
  std::vector<tile::LaunchArg> launch_args;
  launch_args.reserve(args.size());
  for (const KernelArg& a : args) {
    if (const Tensor* t = std::get_if<Tensor>(&a)) {
      TESSEL_ASSIGN_OR_RETURN(tile::TensorArg arg, tensor_arg(View{*t, t->shape(), t->strides()}));
      launch_args.push_back(std::move(arg));
    } else if (const View* v = std::get_if<View>(&a)) {
      TESSEL_ASSIGN_OR_RETURN(tile::TensorArg arg, tensor_arg(*v));
      launch_args.push_back(std::move(arg));
    } else if (const double* d = std::get_if<double>(&a)) {
      launch_args.push_back(*d);
    } else {
      launch_args.push_back(std::get<int64_t>(a));
    }
  }
  return launch_args;
}

// The device every tensor argument is on (an error when they differ or there is none).
Expected<Device*> device_of(const std::string& kernel, const std::vector<KernelArg>& args) {
  Device* device = nullptr;
  for (const KernelArg& a : args) {
    const Tensor* t = std::get_if<Tensor>(&a);
    if (const View* v = std::get_if<View>(&a)) t = &v->tensor;
    if (!t) continue;
    if (!t->defined()) return internal_error("kernel '{}': an undefined tensor argument", kernel);
    if (device == nullptr) {
      device = t->device();
    } else if (t->device() != device) {
      return invalid_argument("kernel '{}': tensors on {} and {}; move them to one device first",
                              kernel, device->id(), t->device()->id());
    }
  }
  if (device == nullptr) return internal_error("kernel '{}' launched without tensors", kernel);
  return device;
}

// The dtype of the first tensor argument, which a kernel's `T` defaults to (device_of has
// checked there is one).
DType first_tensor_dtype(const std::vector<KernelArg>& args) {
  for (const KernelArg& a : args) {
    if (const Tensor* t = std::get_if<Tensor>(&a)) return t->dtype();
    if (const View* v = std::get_if<View>(&a)) return v->tensor.dtype();
  }
  return DType::kF32;
}

Status launch_kernel_now(const std::string& kernel, KernelParams params,
                         const std::vector<KernelArg>& args);

}  // namespace

LaunchHook* launch_hook() {
  return g_launch_hook;
}

LaunchHookScope::LaunchHookScope(LaunchHook* hook) : previous_(g_launch_hook) {
  g_launch_hook = hook;
}
LaunchHookScope::~LaunchHookScope() {
  g_launch_hook = previous_;
}

Status launch_kernel(const std::string& kernel, KernelParams params,
                     const std::vector<KernelArg>& args) {
  if (LaunchHook* hook = g_launch_hook) {
    LaunchHookScope off(nullptr);  // what the hook launches goes straight to the device
    return hook->kernel(kernel, params, args,
                        [&] { return launch_kernel_now(kernel, params, args); });
  }
  return launch_kernel_now(kernel, std::move(params), args);
}

namespace {

// The kernel of a generated source, compiled for `device` (parsed once per source text and
// compiled once per device, both cached).
Expected<std::shared_ptr<const DeviceKernel>> compiled_source(Device* device,
                                                              const std::string& source) {
  // The map's nodes never move, so the pointers stay valid.
  static std::mutex parsed_mutex;
  static std::map<std::string, tile::Kernel> parsed;
  const std::string name = "generated:" + hash_hex(hash_text(source));
  auto parse = [&]() -> Expected<const tile::Kernel*> {
    std::lock_guard<std::mutex> lock(parsed_mutex);
    auto it = parsed.find(source);
    if (it != parsed.end()) return &it->second;
    TESSEL_ASSIGN_OR_RETURN(std::vector<tile::Kernel> kernels,
                            tile::parse_tile(source, "generated/" + name.substr(10) + ".tile"));
    if (kernels.size() != 1)
      return internal_error("a generated source holds {} kernels, not one", kernels.size());
    return &parsed.emplace(source, std::move(kernels[0])).first->second;
  };
  return find_or_compile(device, name, {}, parse);
}

}  // namespace

Status prepare_source(Device* device, const std::string& source) {
  return compiled_source(device, source).status();
}

Status launch_source(const std::string& source, const std::vector<KernelArg>& args) {
  TESSEL_ASSIGN_OR_RETURN(Device * device, device_of("a generated kernel", args));
  TESSEL_ASSIGN_OR_RETURN(std::shared_ptr<const DeviceKernel> compiled,
                          compiled_source(device, source));
  TESSEL_ASSIGN_OR_RETURN(std::vector<tile::LaunchArg> launch_args, launch_args_of(args));
  {
    std::lock_guard<std::mutex> lock(cache().mutex);
    cache().stats.launches += 1;
  }
  return compiled->launch(launch_args);
}

namespace {

Status launch_kernel_now(const std::string& kernel, KernelParams params,
                         const std::vector<KernelArg>& args) {
  TESSEL_ASSIGN_OR_RETURN(Device * device, device_of(kernel, args));
  if (!params.count("T")) params["T"] = dtype_name(first_tensor_dtype(args));
  if (tuning_in_use()) {
    TESSEL_ASSIGN_OR_RETURN(const tile::Kernel* parsed, parsed_kernel(kernel));
    TESSEL_TRY(apply_tuned_params(device, *parsed, args, params));
  }
  TESSEL_ASSIGN_OR_RETURN(std::shared_ptr<const DeviceKernel> compiled,
                          find_or_compile(device, kernel, params));
  TESSEL_ASSIGN_OR_RETURN(std::vector<tile::LaunchArg> launch_args, launch_args_of(args));
  {
    std::lock_guard<std::mutex> lock(cache().mutex);
    cache().stats.launches += 1;
  }
  return compiled->launch(launch_args);  // its errors name the kernel and the device
}

}  // namespace

KernelCacheStats kernel_cache_stats() {
  std::lock_guard<std::mutex> lock(cache().mutex);
  return cache().stats;
}

}  // namespace tessel::ops
