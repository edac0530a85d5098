// Loading libnccl and the CUDA driver, and translating types and results (nccl_library.h).
#include "dist/nccl/nccl_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

namespace tessel::dist::nccl {

namespace {

template <typename Fn>
bool bind(void* handle, const char* name, Fn& fn, std::string& missing) {
  fn = reinterpret_cast<Fn>(::dlsym(handle, name));
  if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
  return fn != nullptr;
}

}  // namespace

Expected<std::unique_ptr<Library>> open_library(const std::string& path) {
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    return unavailable(
        "the nccl backend needs NCCL, which is not available here ({}); install "
        "libnccl2 or set TESSEL_NCCL_LIBRARY",
        ::dlerror());
  auto owned = std::make_unique<Library>();
  Library& library = *owned;
  std::string missing;
  bind(handle, "ncclGetVersion", library.GetVersion, missing);
  bind(handle, "ncclGetErrorString", library.GetErrorString, missing);
  bind(handle, "ncclGetUniqueId", library.GetUniqueId, missing);
  bind(handle, "ncclCommInitRank", library.CommInitRank, missing);
  bind(handle, "ncclCommDestroy", library.CommDestroy, missing);
  bind(handle, "ncclCommAbort", library.CommAbort, missing);
  bind(handle, "ncclCommGetAsyncError", library.CommGetAsyncError, missing);
  bind(handle, "ncclAllReduce", library.AllReduce, missing);
  bind(handle, "ncclBroadcast", library.Broadcast, missing);
  bind(handle, "ncclReduce", library.Reduce, missing);
  bind(handle, "ncclAllGather", library.AllGather, missing);
  bind(handle, "ncclReduceScatter", library.ReduceScatter, missing);
  bind(handle, "ncclSend", library.Send, missing);
  bind(handle, "ncclRecv", library.Recv, missing);
  bind(handle, "ncclGroupStart", library.GroupStart, missing);
  bind(handle, "ncclGroupEnd", library.GroupEnd, missing);
  if (!missing.empty())
    return unavailable("{} lacks {} (tessel needs NCCL 2.7 or newer)", path, missing);
  if (library.GetVersion(&library.version) != 0)
    return unavailable("{}: ncclGetVersion failed", path);
  return owned;
}

Expected<const Library*> load_library() {
  static std::mutex mu;
  // Libraries found, by path, kept for the life of the process (communicators point into them).
  static auto* loaded = new std::map<std::string, std::unique_ptr<Library>>();
  const char* env = std::getenv("TESSEL_NCCL_LIBRARY");
  const std::string path = env && *env ? env : "libnccl.so.2";
  std::lock_guard lock(mu);
  auto it = loaded->find(path);
  if (it != loaded->end()) return it->second.get();
  TESSEL_ASSIGN_OR_RETURN(auto library, open_library(path));
  return (*loaded)[path] = std::move(library), (*loaded)[path].get();
}

Expected<ncclDataType_t> to_nccl(DataType type, int version) {
  if (type == DataType::kBfloat16 && version < 21000)
    return unimplemented("bf16 needs NCCL 2.10 or newer; this is version code {}", version);
  // tessel's enum mirrors ncclDataType_t: ncclInt8 = 0 ... ncclFloat64 = 8, ncclBfloat16 = 9.
  return static_cast<ncclDataType_t>(type);
}

Expected<ncclRedOp_t> to_nccl(RedOp op, int version) {
  if (op == RedOp::kAvg && version < 21000)
    return unimplemented("avg needs NCCL 2.10 or newer; this is version code {}", version);
  // ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4.
  return static_cast<ncclRedOp_t>(op);
}

Status from_nccl(const Library& library, ncclResult_t result, const char* what) {
  if (result == 0) return ok_status();
  std::string text = fmt::format("{}: {} ({})", what, library.GetErrorString(result), result);
  switch (result) {
    case 4:
      return invalid_argument("{}", text);  // ncclInvalidArgument
    case 5:
      return failed_precondition("{}", text);  // ncclInvalidUsage
    case 6:
      return aborted("{}", text);  // ncclRemoteError
    case 3:
      return internal_error("{}", text);  // ncclInternalError
    default:
      return io_error("{}", text);  // CUDA and system errors
  }
}

Status synchronize_cuda_stream(void* stream) {
  using SyncFn = int (*)(void*);
  static std::once_flag once;
  static SyncFn sync = nullptr;
  static std::string load_error;
  std::call_once(once, [] {
    const char* env = std::getenv("TESSEL_CUDA_LIBRARY");
    std::string path = env && *env ? env : "libcuda.so.1";
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) sync = reinterpret_cast<SyncFn>(::dlsym(handle, "cuStreamSynchronize"));
    if (!sync) load_error = handle ? path + " lacks cuStreamSynchronize" : ::dlerror();
  });
  if (!sync) return unavailable("cannot wait for a CUDA stream: {}", load_error);
  int rc = sync(stream);
  if (rc != 0) return io_error("cuStreamSynchronize failed with CUDA error {}", rc);
  return ok_status();
}

}  // namespace tessel::dist::nccl
