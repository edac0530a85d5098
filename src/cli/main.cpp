// Entry point of the `tessel` command: parses the command line and runs one subcommand.
#include <cstdio>
#include <new>
#include <system_error>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"tessel: train neural networks on any hardware"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tessel 0.1.0");

  // Subcommands (one cmd_*.cpp each) are added here.
  tessel::cli::add_info_command(app);
  tessel::cli::add_launch_command(app);
  tessel::cli::add_compile_command(app);
  tessel::cli::add_train_command(app);
  tessel::cli::add_checkpoint_command(app);
  tessel::cli::add_anonymise_command(app);
  tessel::cli::add_tune_command(app);
  tessel::cli::add_plan_command(app);
  CLI::App& bench = tessel::cli::add_bench_command(app);
  tessel::cli::add_bench_gemm_command(bench);
  tessel::cli::add_bench_conv_command(bench);
  tessel::cli::add_bench_comm_command(bench);
  tessel::cli::add_bench_ddp_command(bench);
  tessel::cli::add_bench_hetero_command(bench);
  tessel::cli::add_bench_train_command(bench);
  tessel::cli::add_bench_precision_command(bench);
  tessel::cli::add_bench_cuda_gemm_command(bench);
  tessel::cli::add_bench_secure_agg_command(bench);
  tessel::cli::add_bench_sparse_command(bench);
  tessel::cli::add_bench_plan_command(bench);
  tessel::cli::add_bench_memory_command(bench);

  // A failed allocation that no command turned into an error (a std::vector, a thread's stack)
  // ends the command with a message and exit code 1 instead of std::terminate's abort.
  try {
    CLI11_PARSE(app, argc, argv);
  } catch (const std::bad_alloc&) {
    std::fputs("error: out of host memory (a memory limit, or the machine is full)\n", stderr);
    return 1;
  } catch (const std::system_error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return tessel::cli::exit_code;
}
