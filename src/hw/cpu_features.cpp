// Names of the tracked CPU features and the feature set's helpers. Detection itself is per
// architecture, in cpu_arch_*.cpp.
#include "hw/cpu_features.h"

namespace tessel {
namespace {

constexpr const char* kFeatureNames[] = {
#define TESSEL_CPU_FEATURE_NAME(e, name) name,
    TESSEL_CPU_FEATURES(TESSEL_CPU_FEATURE_NAME)
#undef TESSEL_CPU_FEATURE_NAME
};
static_assert(std::size(kFeatureNames) == kCpuFeatureCount, "one name per CpuFeature");

}  // namespace

const char* cpu_feature_name(CpuFeature feature) {
  return kFeatureNames[static_cast<std::size_t>(feature)];
}

std::optional<CpuFeature> cpu_feature_from_name(std::string_view name) {
  for (std::size_t i = 0; i < kCpuFeatureCount; ++i)
    if (name == kFeatureNames[i]) return static_cast<CpuFeature>(i);
  return std::nullopt;
}

const std::vector<CpuFeature>& all_cpu_features() {
  static const std::vector<CpuFeature> all = [] {
    std::vector<CpuFeature> v;
    for (std::size_t i = 0; i < kCpuFeatureCount; ++i)
      v.push_back(static_cast<CpuFeature>(i));
    return v;
  }();
  return all;
}

std::vector<std::string> CpuFeatureSet::names() const {
  std::vector<std::string> out;
  for (CpuFeature f : all_cpu_features())
    if (has(f)) out.emplace_back(cpu_feature_name(f));
  return out;
}

}  // namespace tessel
