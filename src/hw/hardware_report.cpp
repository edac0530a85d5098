// Collecting the hardware report and rendering it as JSON and as text.
#include "hw/hardware_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tessel {
namespace {

// "48 KiB", "1 MiB", "23.5 GiB".
std::string bytes_text(std::uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (v == static_cast<double>(static_cast<std::uint64_t>(v)))
    return fmt::format("{:.0f} {}", v, units[u]);
  return fmt::format("{:.1f} {}", v, units[u]);
}

std::string first_line(const std::string& s) {
  return s.substr(0, s.find('\n'));
}

// "OpenCL 3.0" from "OpenCL 3.0 PoCL HSTR: ...".
std::string first_two_words(const std::string& s) {
  std::size_t space = s.find(' ');
  return space == std::string::npos ? s : s.substr(0, s.find(' ', space + 1));
}

std::string plural(int n, const char* word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}

nlohmann::ordered_json opencl_json(const OpenClDeviceInfo& d) {
  return {{"platform", d.platform_name},
          {"platform_version", d.platform_version},
          {"platform_index", d.platform_index},
          {"device_index", d.device_index},
          {"name", d.name},
          {"vendor", d.vendor},
          {"type", d.type},
          {"version", d.version},
          {"driver_version", d.driver_version},
          {"opencl_c_version", d.opencl_c_version},
          {"compute_units", d.compute_units},
          {"max_clock_mhz", d.max_clock_mhz},
          {"global_mem_bytes", d.global_mem_bytes},
          {"max_alloc_bytes", d.max_alloc_bytes},
          {"local_mem_bytes", d.local_mem_bytes},
          {"local_mem_dedicated", d.local_mem_dedicated},
          {"max_work_group_size", d.max_work_group_size},
          {"max_work_item_sizes", d.max_work_item_sizes},
          {"preferred_vector_width_float", d.preferred_vector_width_float},
          {"fp16", d.fp16},
          {"fp64", d.fp64}};
}

nlohmann::ordered_json cuda_json(const CudaDeviceInfo& d) {
  return {{"ordinal", d.ordinal},
          {"name", d.name},
          {"compute_capability", fmt::format("{}.{}", d.compute_major, d.compute_minor)},
          {"total_mem_bytes", d.total_mem_bytes},
          {"multiprocessors", d.multiprocessors},
          {"max_threads_per_block", d.max_threads_per_block},
          {"warp_size", d.warp_size},
          {"shared_mem_per_block_bytes", d.shared_mem_per_block_bytes},
          {"shared_mem_per_block_optin_bytes", d.shared_mem_per_block_optin_bytes},
          {"l2_bytes", d.l2_bytes},
          {"clock_mhz", d.clock_mhz},
          {"memory_clock_mhz", d.memory_clock_mhz},
          {"memory_bus_bits", d.memory_bus_bits}};
}

}  // namespace

HardwareReport collect_hardware_report(const HardwareReportOptions& options) {
  HardwareReport r;
  r.cpu = host_cpu_info();
  r.measured = measured_figures(r.cpu, options.remeasure);
  r.opencl = list_opencl_devices();
  r.cuda = list_cuda_devices();
  r.nvrtc = nvrtc_info();
  return r;
}

nlohmann::ordered_json hardware_report_json(const HardwareReport& r) {
  const CpuInfo& c = r.cpu;
  const CpuTopology& t = c.topology;
  nlohmann::ordered_json j;
  j["cpu"] = {{"vendor", c.vendor},
              {"model", c.model},
              {"architecture", c.architecture},
              {"family", c.family},
              {"model_number", c.model_number},
              {"stepping", c.stepping},
              {"packages", t.packages},
              {"cores", t.cores},
              {"threads", t.threads},
              {"usable_cores", t.usable_cores},
              {"usable_threads", t.usable_threads},
              {"topology_source", t.source}};
  j["isa"] = c.features.names();
  j["caches"] = {{"l1d", c.caches.l1d_bytes},
                 {"l2", c.caches.l2_bytes},
                 {"l3", c.caches.l3_bytes},
                 {"line", c.caches.line_bytes},
                 {"l2_shared_by_threads", c.caches.l2_shared_by},
                 {"l3_shared_by_threads", c.caches.l3_shared_by},
                 {"source", c.caches.source}};
  j["memory_bytes"] = c.memory_bytes;

  const MeasuredFigures& m = r.measured.figures;
  j["measured"] = {{"bandwidth_gbs", m.bandwidth_gbs},
                   {"peak_f32_gflops", m.peak_f32_gflops},
                   {"peak_bf16_gflops", nullptr},
                   {"f32_kernel", m.f32_kernel},
                   {"bf16_kernel", m.bf16_kernel},
                   {"threads", m.threads},
                   {"triad_bytes_per_array", m.triad_bytes_per_array},
                   {"measured_at", m.measured_at},
                   {"from_cache", r.measured.from_cache},
                   {"cache_path", r.measured.cache_path.string()}};
  if (m.peak_bf16_gflops) j["measured"]["peak_bf16_gflops"] = *m.peak_bf16_gflops;
  if (!r.measured.store_status.ok())
    j["measured"]["cache_error"] = r.measured.store_status.to_string();

  j["opencl"] = nlohmann::ordered_json::array();
  if (r.opencl)
    for (const OpenClDeviceInfo& d : *r.opencl)
      j["opencl"].push_back(opencl_json(d));
  j["opencl_status"] = r.opencl ? "ok" : r.opencl.status().to_string();

  j["cuda"] = nlohmann::ordered_json::array();
  if (r.cuda)
    for (const CudaDeviceInfo& d : *r.cuda)
      j["cuda"].push_back(cuda_json(d));
  j["cuda_status"] = r.cuda ? "ok" : r.cuda.status().to_string();

  if (r.nvrtc) {
    j["nvrtc"] = {{"available", true},
                  {"library", r.nvrtc->library},
                  {"version", fmt::format("{}.{}", r.nvrtc->version_major, r.nvrtc->version_minor)},
                  {"architectures", r.nvrtc->architectures}};
  } else {
    j["nvrtc"] = {{"available", false}, {"status", r.nvrtc.status().to_string()}};
  }
  return j;
}

std::string hardware_report_text(const HardwareReport& r) {
  const CpuInfo& c = r.cpu;
  const CpuTopology& t = c.topology;
  std::string out;
  // A label column, then the text; a text of several lines (a Status listing the libraries it
  // tried) continues indented under the first.
  auto line = [&out](const char* label, const std::string& text) {
    std::string indented;
    for (char ch : text)
      indented += ch == '\n' ? std::string("\n         ") : std::string(1, ch);
    out += fmt::format("{:<9}{}\n", label, indented);
  };

  std::string id =
      c.architecture == "x86_64"
          ? fmt::format("family {} model {} stepping {}", c.family, c.model_number, c.stepping)
          : fmt::format("implementer 0x{:02x} part 0x{:03x}", c.family, c.model_number);
  line("CPU", fmt::format("{} ({}, {}, {})", c.model, c.vendor, c.architecture, id));
  std::string usable = t.usable_threads == t.threads
                           ? "all usable"
                           : fmt::format("{} / {} usable here", plural(t.usable_cores, "core"),
                                         plural(t.usable_threads, "thread"));
  line("", fmt::format("{}, {}, {} ({})", plural(t.packages, "socket"), plural(t.cores, "core"),
                       plural(t.threads, "thread"), usable));
  std::vector<std::string> isa = c.features.names();
  line("ISA",
       isa.empty() ? "(none of the tracked extensions)" : fmt::format("{}", fmt::join(isa, " ")));
  std::string l3 = c.caches.l3_bytes > 0
                       ? fmt::format(", L3 {} (shared by {})", bytes_text(c.caches.l3_bytes),
                                     plural(c.caches.l3_shared_by, "thread"))
                       : "";
  line("Caches", fmt::format("L1d {}, L2 {}{}, line {} B", bytes_text(c.caches.l1d_bytes),
                             bytes_text(c.caches.l2_bytes), l3, c.caches.line_bytes));
  line("Memory", bytes_text(static_cast<std::uint64_t>(c.memory_bytes)));

  const MeasuredFigures& m = r.measured.figures;
  std::string bf16 = m.peak_bf16_gflops
                         ? fmt::format(", bf16 dot {:.0f} GFLOP/s", *m.peak_bf16_gflops)
                         : ", bf16 dot: no kernel for this CPU";
  line("Measured", fmt::format("triad {:.1f} GB/s, f32 fma {:.0f} GFLOP/s{} ({})", m.bandwidth_gbs,
                               m.peak_f32_gflops, bf16, plural(m.threads, "worker")));
  std::string when = r.measured.from_cache
                         ? fmt::format("cached {} ({}; --measure to redo)", m.measured_at,
                                       r.measured.cache_path.string())
                         : fmt::format("measured now, {}", m.measured_at);
  line("", fmt::format("kernels {}{}{}; {}", m.f32_kernel, m.bf16_kernel.empty() ? "" : ", ",
                       m.bf16_kernel, when));
  if (!r.measured.store_status.ok())
    line("", "not cached: " + first_line(r.measured.store_status.to_string()));

  if (!r.opencl) {
    line("OpenCL", r.opencl.status().message());
  } else if (r.opencl->empty()) {
    line("OpenCL", "ICD loader present, no platform or device");
  } else {
    const char* label = "OpenCL";
    for (const OpenClDeviceInfo& d : *r.opencl) {
      line(label, fmt::format("[{}.{}] {} ({}, {})", d.platform_index, d.device_index, d.name,
                              d.type, d.platform_name));
      line("", fmt::format("{}, {} compute units, global {}, local {}{}, work-group <= {}",
                           first_two_words(d.version), d.compute_units,
                           bytes_text(d.global_mem_bytes), bytes_text(d.local_mem_bytes),
                           d.local_mem_dedicated ? "" : " (emulated)", d.max_work_group_size));
      label = "";
    }
  }

  if (!r.cuda) {
    line("CUDA", r.cuda.status().message());
  } else {
    const char* label = "CUDA";
    for (const CudaDeviceInfo& d : *r.cuda) {
      line(label,
           fmt::format("[{}] {} (sm_{}{}), {} SMs, {}, shared/block {} (opt-in {})", d.ordinal,
                       d.name, d.compute_major, d.compute_minor, d.multiprocessors,
                       bytes_text(d.total_mem_bytes), bytes_text(d.shared_mem_per_block_bytes),
                       bytes_text(d.shared_mem_per_block_optin_bytes)));
      label = "";
    }
  }
  if (r.nvrtc) {
    const std::vector<int>& a = r.nvrtc->architectures;
    std::string targets =
        a.empty() ? "" : fmt::format(", targets sm_{}..sm_{}", a.front(), a.back());
    line("NVRTC", fmt::format("{}.{} ({}){}", r.nvrtc->version_major, r.nvrtc->version_minor,
                              r.nvrtc->library, targets));
  } else {
    line("NVRTC", r.nvrtc.status().message());
  }
  return out;
}

}  // namespace tessel
