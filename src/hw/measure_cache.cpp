// The on-disk cache of measured figures: one small JSON file per CPU model and worker count,
// written atomically (support/atomic_file.h) so processes starting together never read half a
// file.
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "hw/measure.h"
#include "support/atomic_file.h"
#include "support/hash.h"
#include "support/log.h"

namespace tessel {
namespace {

// Bumped when the file layout or the way a figure is measured changes, so old files are ignored.
constexpr int kFormatVersion = 1;

// What makes two machines the same for the measured figures.
nlohmann::json cache_key(const CpuInfo& cpu) {
  return {{"vendor", cpu.vendor},     {"model", cpu.model},
          {"family", cpu.family},     {"model_number", cpu.model_number},
          {"stepping", cpu.stepping}, {"workers", cpu.topology.usable_cores}};
}

// "AMD EPYC 9B45" -> "amd-epyc-9b45", for a readable file name.
std::string slug(const std::string& text) {
  std::string out;
  for (char ch : text) {
    bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
    if (ch >= 'A' && ch <= 'Z') {
      out += static_cast<char>(ch - 'A' + 'a');
    } else if (alnum) {
      out += ch;
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
    if (out.size() >= 40) break;
  }
  while (!out.empty() && out.back() == '-')
    out.pop_back();
  return out.empty() ? "cpu" : out;
}

nlohmann::json figures_to_json(const CpuInfo& cpu, const MeasuredFigures& m) {
  nlohmann::json j = {{"format_version", kFormatVersion},
                      {"key", cache_key(cpu)},
                      {"bandwidth_gbs", m.bandwidth_gbs},
                      {"peak_f32_gflops", m.peak_f32_gflops},
                      {"peak_bf16_gflops", nullptr},
                      {"f32_kernel", m.f32_kernel},
                      {"bf16_kernel", m.bf16_kernel},
                      {"threads", m.threads},
                      {"triad_bytes_per_array", m.triad_bytes_per_array},
                      {"measured_at", m.measured_at}};
  if (m.peak_bf16_gflops) j["peak_bf16_gflops"] = *m.peak_bf16_gflops;
  return j;
}

}  // namespace

Expected<std::filesystem::path> hardware_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::filesystem::path(xdg) / "tessel";
  const char* home = std::getenv("HOME");
  if (home && *home) return std::filesystem::path(home) / ".cache" / "tessel";
  return not_found("no cache directory: neither XDG_CACHE_HOME nor HOME is set");
}

std::filesystem::path measured_cache_path(const std::filesystem::path& dir, const CpuInfo& cpu) {
  std::string key = cache_key(cpu).dump();
  return dir / fmt::format("measured-{}-{}.json", slug(cpu.model), hash_hex(hash_text(key)));
}

Expected<std::optional<MeasuredFigures>> load_measured_figures(const std::filesystem::path& dir,
                                                               const CpuInfo& cpu) {
  std::filesystem::path path = measured_cache_path(dir, cpu);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::optional<MeasuredFigures>();
  TESSEL_ASSIGN_OR_RETURN(std::string text, read_file(path.string()));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  // A damaged or foreign file is not an error for the user: the figures are measured again.
  if (j.is_discarded() || !j.is_object()) {
    log_warn("hw: ignoring {}: not valid JSON", path.string());
    return std::optional<MeasuredFigures>();
  }
  if (j.value("format_version", 0) != kFormatVersion ||
      j.value("key", nlohmann::json()) != cache_key(cpu)) {
    log_info("hw: ignoring {}: written for another CPU or format", path.string());
    return std::optional<MeasuredFigures>();
  }
  try {
    MeasuredFigures m;
    m.bandwidth_gbs = j.at("bandwidth_gbs").get<double>();
    m.peak_f32_gflops = j.at("peak_f32_gflops").get<double>();
    if (!j.at("peak_bf16_gflops").is_null())
      m.peak_bf16_gflops = j.at("peak_bf16_gflops").get<double>();
    m.f32_kernel = j.at("f32_kernel").get<std::string>();
    m.bf16_kernel = j.at("bf16_kernel").get<std::string>();
    m.threads = j.at("threads").get<int>();
    m.triad_bytes_per_array = j.at("triad_bytes_per_array").get<std::int64_t>();
    m.measured_at = j.at("measured_at").get<std::string>();
    return std::optional<MeasuredFigures>(std::move(m));
  } catch (const nlohmann::json::exception& e) {
    log_warn("hw: ignoring {}: {}", path.string(), e.what());
    return std::optional<MeasuredFigures>();
  }
}

Status store_measured_figures(const std::filesystem::path& dir, const CpuInfo& cpu,
                              const MeasuredFigures& figures) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error("create cache directory {}: {}", dir.string(), ec.message());
  return write_file_atomic(measured_cache_path(dir, cpu).string(),
                           figures_to_json(cpu, figures).dump(2) + "\n");
}

MeasuredLookup measured_figures(const CpuInfo& cpu, bool remeasure,
                                std::optional<std::filesystem::path> cache_dir) {
  MeasuredLookup out;
  if (!cache_dir) {
    Expected<std::filesystem::path> dir = hardware_cache_dir();
    if (dir) {
      cache_dir = *dir;
    } else {
      out.store_status = dir.status();
    }
  }
  if (cache_dir) {
    out.cache_path = measured_cache_path(*cache_dir, cpu);
    if (!remeasure) {
      Expected<std::optional<MeasuredFigures>> cached = load_measured_figures(*cache_dir, cpu);
      if (!cached) {
        log_warn("hw: {}", cached.status().to_string());
      } else if (cached->has_value()) {
        out.figures = std::move(**cached);
        out.from_cache = true;
        return out;
      }
    }
  }
  out.figures = measure_figures(cpu);
  if (cache_dir) out.store_status = store_measured_figures(*cache_dir, cpu, out.figures);
  return out;
}

}  // namespace tessel
