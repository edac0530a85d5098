// CLBlast's SGEMM on tessel's OpenCL device (see bench_gemm_clblast.h).
#include "cli/bench_gemm_clblast.h"

#include <map>

// First: it sets the OpenCL version tessel is written against (1.2) before any CL header.
#include "runtime/opencl/opencl_device.h"

#include <clblast.h>

namespace tessel::cli {
namespace {

const OpenClDevice* as_opencl(const Device* device) {
  return dynamic_cast<const OpenClDevice*>(device);
}

// The parameters CLBlast uses for `kernel` on `device`, "NAME=value ..." sorted by name.
std::string parameters(cl_device_id device, const char* kernel) {
  std::unordered_map<std::string, size_t> values;
  if (clblast::RetrieveParameters(device, kernel, clblast::Precision::kSingle, values) !=
      clblast::StatusCode::kSuccess)
    return "?";
  std::map<std::string, size_t> sorted(values.begin(), values.end());
  std::string text;
  for (const auto& [name, value] : sorted)
    text += fmt::format("{}{}={}", text.empty() ? "" : " ", name, value);
  return text;
}

}  // namespace

Expected<ClBlastGemm> ClBlastGemm::create(Device* device) {
  if (!as_opencl(device))
    return invalid_argument("CLBlast runs on an OpenCL device; {} is not one", device->name());
  ClBlastGemm g;
  g.device_ = device;
  return g;
}

std::string ClBlastGemm::describe() const {
  cl_device_id id = as_opencl(device_)->context()->device().device;
  return fmt::format("CLBlast {}.{}.{} SGEMM on {} (f32 only; Xgemm {}; routine choice {})",
                     CLBLAST_VERSION_MAJOR, CLBLAST_VERSION_MINOR, CLBLAST_VERSION_PATCH,
                     device_->name(), parameters(id, "Xgemm"), parameters(id, "GemmRoutine"));
}

Status ClBlastGemm::sgemm(int64_t m, int64_t n, int64_t k, DeviceBuffer a, DeviceBuffer b,
                          DeviceBuffer c) const {
  cl_command_queue queue = as_opencl(device_)->context()->queue();
  const clblast::StatusCode status = clblast::Gemm<float>(
      clblast::Layout::kRowMajor, clblast::Transpose::kNo, clblast::Transpose::kNo, size_t(m),
      size_t(n), size_t(k), 1.0f, opencl_mem(a), 0, size_t(k), opencl_mem(b), 0, size_t(n), 0.0f,
      opencl_mem(c), 0, size_t(n), &queue);
  if (status != clblast::StatusCode::kSuccess)
    return internal_error("CLBlast Gemm {}x{}x{} returned status {}", m, n, k, int(status));
  return ok_status();
}

}  // namespace tessel::cli
