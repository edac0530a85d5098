// `tessel compile FILE.tile`: runs the tile compiler and prints the IR or the generated source.
//
//   tessel compile kernels/gemm.tile --target opencl --emit source -D BM=64 -D T=bf16
//   tessel compile kernels/gemm.tile --dump-ir      # the IR after every pass, then the result
//   tessel compile kernels/gemm.tile --emit binary  # cpu: builds the shared object, prints its
//   path;
//                                                   # cuda: prints the PTX from NVRTC
//   tessel compile kernels/gemm.tile --config run.toml  # target and options from its [target]
//   tessel compile kernels/gpu.txt --target cuda --arch sm_90 --emit resources
//       # registers, spills and shared memory of every listed specialisation, from ptxas
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "hw/cuda_ptxas.h"
#include "ops/target_config.h"
#include "tile/codegen/abi.h"
#include "tile/codegen/cuda/cuda_build.h"
#include "tile/codegen/render.h"
#include "tile/ir/printer.h"
#include "tile/parse/parser.h"
#include "tile/parse/specialisations.h"
#include "tile/pipeline.h"
#include "tile/run/cpu_jit.h"

namespace tessel::cli {

namespace {

struct CompileArgs {
  std::string file;
  std::string kernel;
  std::string target = "cpu";
  std::string config;  // a TOML file whose [target] table chooses the target instead of --target
  std::string emit = "source";
  std::string arch = "sm_80";  // cuda: the GPU architecture PTX is made for (and ptxas assembles)
  bool dump_ir = false;
  std::vector<std::string> defines;
};

int fail(const Status& s) {
  std::fprintf(stderr, "tessel compile: %s\n", s.message().c_str());
  return 1;
}

// --emit resources: one row per kernel specialisation, from ptxas -v for `a.arch`. `file` is a
// .tile file (one kernel, with -D parameters) or a list of specialisations (kernels/gpu.txt)
// whose kernels are the .tile files beside it.
int run_resources(const CompileArgs& a, const std::map<std::string, std::string>& params) {
  if (a.target != "cuda") return fail(invalid_argument("--emit resources needs --target cuda"));
  Expected<std::string> virtual_arch = tile::virtual_arch_of(a.arch);
  if (!virtual_arch) return fail(virtual_arch.status());
  Expected<std::string> ptxas = find_ptxas();
  if (!ptxas) return fail(ptxas.status());
  std::vector<tile::Specialisation> list;
  std::map<std::string, tile::Kernel> kernels;
  const bool is_list = a.file.size() > 4 && a.file.substr(a.file.size() - 4) == ".txt";
  if (is_list) {
    auto read = tile::read_specialisations(a.file);
    if (!read) return fail(read.status());
    list = std::move(*read);
    std::string dir =
        a.file.find('/') == std::string::npos ? "." : a.file.substr(0, a.file.rfind('/'));
    auto parsed = tile::parse_kernel_folder(dir);
    if (!parsed) return fail(parsed.status());
    kernels = std::move(*parsed);
  } else {
    auto parsed = tile::parse_tile_file(a.file);
    if (!parsed) return fail(parsed.status());
    for (tile::Kernel& k : *parsed)
      if (a.kernel.empty() || k.name == a.kernel) {
        list.push_back({k.name, params, 0});
        std::string name = k.name;
        kernels.emplace(std::move(name), std::move(k));
      }
  }
  std::printf("%-48s %-6s %5s %8s %8s %8s %8s\n", "kernel", "arch", "regs", "spill_st", "spill_ld",
              "stack", "smem");
  for (const tile::Specialisation& s : list) {
    auto kernel = kernels.find(s.kernel);
    if (kernel == kernels.end())
      return fail(not_found("{}:{}: no kernel '{}'", a.file, s.line, s.kernel));
    std::string what = tile::specialisation_string(s.kernel, s.params);
    auto built = tile::build_cuda(kernel->second, s.params, tile::Target::cuda(), *virtual_arch);
    if (!built) return fail(built.status());
    auto resources = assemble_ptx(*ptxas, built->ptx, a.arch, what);
    if (!resources) return fail(resources.status());
    for (const KernelResources& r : *resources)
      std::printf(
          "%-48s %-6s %5d %8lld %8lld %8lld %8lld\n", what.c_str(), r.arch.c_str(), r.registers,
          static_cast<long long>(r.spill_store_bytes), static_cast<long long>(r.spill_load_bytes),
          static_cast<long long>(r.stack_frame_bytes), static_cast<long long>(r.shared_bytes));
  }
  return 0;
}

int run_compile(const CompileArgs& a) {
  std::map<std::string, std::string> params;
  for (const std::string& d : a.defines) {
    size_t eq = d.find('=');
    if (eq == std::string::npos || eq == 0)
      return fail(invalid_argument("-D {}: expected NAME=VALUE", d));
    params[d.substr(0, eq)] = d.substr(eq + 1);
  }
  if (a.emit == "resources") return run_resources(a, params);
  auto kernels = tile::parse_tile_file(a.file);
  if (!kernels) return fail(kernels.status());
  const tile::Kernel* kernel = nullptr;
  for (const tile::Kernel& k : *kernels)
    if (a.kernel.empty() ? kernels->size() == 1 : k.name == a.kernel) kernel = &k;
  if (!kernel) {
    std::string names;
    for (const tile::Kernel& k : *kernels)
      names += (names.empty() ? "" : ", ") + k.name;
    return fail(
        a.kernel.empty()
            ? invalid_argument("{} defines kernels {}; pick one with --kernel", a.file, names)
            : not_found("{} has no kernel '{}' (it has {})", a.file, a.kernel, names));
  }
  tile::CompileOptions o;
  std::string target_name = a.target;
  tile::CpuJitOptions jit;
  if (!a.config.empty()) {
    auto config = Config::load(a.config);
    if (!config) return fail(config.status());
    auto choice = ops::target_from_config(*config);
    if (!choice) return fail(choice.status());
    o.target = choice->target;
    target_name = choice->target.name();
    if (!choice->options.cpu_isa.empty()) jit.isa = *tile::cpu_isa_named(choice->options.cpu_isa);
  } else {
    auto target = tile::target_from_name(a.target);
    if (!target) return fail(target.status());
    o.target = *target;
  }
  o.params = params;
  if (a.dump_ir)
    o.dump = [](const std::string& pass, const tile::Kernel& ir) {
      std::printf("# ---- IR after %s\n%s\n", pass.c_str(), tile::to_string(ir).c_str());
    };
  auto ir = tile::compile_ir(*kernel, o);
  if (!ir) return fail(ir.status());
  if (a.emit == "ir") {
    if (!a.dump_ir) std::printf("%s", tile::to_string(*ir).c_str());
    return 0;
  }
  std::string source = tile::render(*ir, o.target);
  if (a.emit == "binary") {
    if (target_name == "cpu") {
      auto module = tile::jit_compile_cpu(source, tile::entry_name(*ir), jit);
      if (!module) return fail(module.status());
      std::printf("%s\n", module->library_path.c_str());
      return 0;
    }
    if (target_name == "cuda") {
      Expected<std::string> virtual_arch = tile::virtual_arch_of(a.arch);
      if (!virtual_arch) return fail(virtual_arch.status());
      auto built = tile::build_cuda(*kernel, params, o.target, *virtual_arch);
      if (!built) return fail(built.status());
      std::printf("%s", built->ptx.c_str());
      return 0;
    }
    return fail(unimplemented(
        "--emit binary for opencl: the driver builds OpenCL C at first use; use --emit source"));
  }
  if (a.dump_ir) std::printf("# ---- %s source\n", target_name.c_str());
  std::printf("%s", source.c_str());
  return 0;
}

}  // namespace

void add_compile_command(CLI::App& app) {
  auto args = std::make_shared<CompileArgs>();
  CLI::App* cmd =
      app.add_subcommand("compile", "compile a .tile kernel and print its IR or generated source");
  cmd->add_option("file", args->file,
                  "the .tile file (or, with --emit resources, a list such as kernels/gpu.txt)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--kernel", args->kernel, "which kernel, when the file has several");
  CLI::Option* target = cmd->add_option("--target", args->target, "cpu, opencl or cuda")
                            ->check(CLI::IsMember({"cpu", "opencl", "cuda"}));
  cmd->add_option("--config", args->config,
                  "a TOML file whose [target] table picks the device and its options")
      ->check(CLI::ExistingFile)
      ->excludes(target);
  cmd->add_option("--emit", args->emit,
                  "ir (the lowered IR), source (the generated code), binary (cpu: shared object, "
                  "cuda: PTX) or resources (cuda: registers, spills, shared memory from ptxas)")
      ->check(CLI::IsMember({"ir", "source", "binary", "resources"}));
  cmd->add_option("--arch", args->arch,
                  "cuda: the GPU architecture, sm_80 (default), sm_90, ... (PTX for compute_NN)");
  cmd->add_flag("--dump-ir", args->dump_ir, "print the IR after every pass");
  cmd->add_option("-D", args->defines, "set a compile-time parameter: -D BM=64, -D T=bf16");
  cmd->callback([args] { exit_code = run_compile(*args); });
}

}  // namespace tessel::cli
