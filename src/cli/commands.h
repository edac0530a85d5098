// Each subcommand of `tessel` lives in its own cmd_*.cpp and adds itself to the app here.
// A subcommand's callback returns the process exit code through `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

namespace tessel::cli {

// Set by the subcommand that ran; main() returns it.
inline int exit_code = 0;

void add_info_command(CLI::App& app);  // cmd_info.cpp
// `tessel launch` (cmd_launch.cpp).
void add_launch_command(CLI::App& app);
void add_compile_command(CLI::App& app);     // cmd_compile.cpp
void add_train_command(CLI::App& app);       // cmd_train.cpp
void add_checkpoint_command(CLI::App& app);  // cmd_checkpoint.cpp
void add_anonymise_command(CLI::App& app);   // cmd_anonymise.cpp
void add_tune_command(CLI::App& app);        // cmd_tune.cpp
void add_plan_command(CLI::App& app);        // cmd_plan.cpp

// `tessel bench` (cmd_bench.cpp) returns the parent that each benchmark adds itself to.
CLI::App& add_bench_command(CLI::App& app);
void add_bench_gemm_command(CLI::App& bench);        // cmd_bench_gemm.cpp
void add_bench_comm_command(CLI::App& bench);        // cmd_bench_comm.cpp
void add_bench_ddp_command(CLI::App& bench);         // cmd_bench_ddp.cpp
void add_bench_hetero_command(CLI::App& bench);      // cmd_bench_hetero.cpp
void add_bench_train_command(CLI::App& bench);       // cmd_bench_train.cpp
void add_bench_precision_command(CLI::App& bench);   // cmd_bench_precision.cpp
void add_bench_cuda_gemm_command(CLI::App& bench);   // cmd_bench_cuda_gemm.cpp
void add_bench_secure_agg_command(CLI::App& bench);  // cmd_bench_secure_agg.cpp
void add_bench_sparse_command(CLI::App& bench);      // cmd_bench_sparse.cpp
void add_bench_conv_command(CLI::App& bench);        // cmd_bench_conv.cpp
void add_bench_plan_command(CLI::App& bench);        // cmd_bench_plan.cpp
void add_bench_memory_command(CLI::App& bench);      // cmd_bench_memory.cpp

}  // namespace tessel::cli
