// Tuned gemm kernels for the benchmark (see bench_gemm_tuned.h).
#include "cli/bench_gemm_tuned.h"

#include "ops/tuned_launch.h"
#include "runtime/device.h"
#include "tune/choices.h"
#include "tune/fingerprint.h"

namespace tessel::cli {

Expected<TunedGemms> tuned_cpu_gemms(
    const tile::Kernel& gemm, const std::vector<tile::GemmInput>& dtypes,
    const std::vector<std::tuple<int64_t, int64_t, int64_t>>& shapes,
    const std::map<tile::GemmInput, std::map<std::string, std::string>>& base) {
  TunedGemms out;
  tune::TuneChoices& choices = tune::TuneChoices::global();
  if (!choices.active()) return out;
  std::map<std::string, std::shared_ptr<ops::DeviceKernel>> compiled;  // by params
  for (tile::GemmInput dtype : dtypes)
    for (const auto& [m, n, k] : shapes) {
      tune::TuneKey key{"gemm",
                        ops::kernel_source_hash("gemm"),
                        tune::device_fingerprint(cpu_device()),
                        tile::gemm_input_name(dtype),
                        "",
                        {m, k, n}};
      TESSEL_ASSIGN_OR_RETURN(std::string chosen, choices.choose(key));
      if (chosen.empty()) continue;
      std::map<std::string, std::string> params = base.at(dtype);
      bool is_default = true;
      for (const auto& [name, value] : tune::parse_params(chosen)) {
        params[name] = value;
        is_default = is_default && !ops::differs_from_default(gemm, name, value);
      }
      const std::string id = tune::params_string(params);
      if (!compiled.count(id)) {
        TESSEL_ASSIGN_OR_RETURN(ops::DeviceKernel kernel,
                                ops::DeviceKernel::compile(gemm, cpu_device(), params));
        compiled[id] = std::make_shared<ops::DeviceKernel>(std::move(kernel));
      }
      out[{dtype, m, n, k}] = TunedGemm{compiled[id], chosen, is_default};
    }
  return out;
}

}  // namespace tessel::cli
