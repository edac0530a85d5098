// `tessel train FILE.toml [--resume CHECKPOINT] [--steps N] [--fuse] [--dump-graph]`: trains the
// model a config describes (train/train_config.h), printing progress and a final evaluation.
// --fuse is [train] fuse = true; --dump-graph (which implies it) prints the first step's graph
// before and after fusion.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/plan_section.h"
#include "train/federated.h"
#include "train/trainer.h"

namespace tessel::cli {
namespace {

struct TrainArgs {
  std::string config;
  std::string resume;
  int64_t steps = 0;
  bool fuse = false;
  bool dump_graph = false;
};

// [federated]: this process is the aggregator (rank 0) or a data owner (train/federated.h).
int run_federated(const train::TrainConfig& config, const TrainArgs& args) {
  if (!args.resume.empty()) {
    fmt::print(stderr, "error: a federated run does not resume from checkpoints (yet)\n");
    return 2;
  }
  dist::ProcessGroupOptions options;
  Expected<dist::Backend> backend = dist::parse_backend(config.federated.backend);
  if (!backend.ok()) {
    fmt::print(stderr, "error: {}\n", backend.status().message());
    return 2;
  }
  options.backend = *backend;
  Expected<std::unique_ptr<dist::ProcessGroup>> group = dist::ProcessGroup::from_env(options);
  if (!group.ok()) {
    fmt::print(stderr, "error: {}: [federated]: {}\n", args.config, group.status().message());
    return 1;
  }
  train::TrainerOptions trainer_options;  // owner 1 shows its progress; the others are quiet
  if ((*group)->rank() != 1) trainer_options.progress = nullptr;
  Expected<train::FederatedSummary> s = train::run_federated(config, **group, trainer_options);
  if (!s.ok()) {
    fmt::print(stderr, "error: rank {}: {}\n", (*group)->rank(), s.status().message());
    return 1;
  }
  if (s->aggregator) {
    fmt::print(
        "aggregator: {} rounds of {} owners, {} ciphertexts each, {:.2f} s adding, "
        "{:.1f} s in all\n",
        s->rounds, (*group)->size() - 1, s->ciphertexts_per_round, s->crypto_seconds, s->seconds);
  } else if ((*group)->rank() == 1) {
    fmt::print(
        "owner 1: {} rounds, test accuracy {:.2f}% ({}/{}), test loss {:.4f}; {:.1f} s "
        "encrypting and decrypting, {:.1f} s exchanging, {:.1f} s in all\n",
        s->rounds, 100.0 * s->final_eval.accuracy, s->final_eval.correct, s->final_eval.total,
        s->final_eval.loss, s->crypto_seconds, s->exchange_seconds, s->seconds);
  }
  return 0;
}

int run_train(const TrainArgs& args) {
  Expected<train::TrainConfig> config = train::load_train_config(args.config);
  if (!config.ok()) {
    fmt::print(stderr, "error: {}\n", config.status().message());
    return 2;
  }
  if (args.steps > 0) {  // the command line wins over [train] steps / epochs
    config->steps = args.steps;
    config->epochs = 0;
  }
  if (args.fuse || args.dump_graph) {
    config->fuse = true;
    if (Status fuse_ok = train::check_fuse(*config); !fuse_ok.ok()) {
      fmt::print(stderr, "error: {}\n", fuse_ok.message());
      return 2;
    }
  }
  if (config->federated.enabled) return run_federated(*config, args);
  // Before anything is built: a run that will not fit fails now, with the plan's breakdown.
  if (int code = check_memory_limit(*config); code != 0) return code;
  train::TrainerOptions options;
  if (args.dump_graph) options.dump_graph = stdout;
  Expected<std::unique_ptr<train::Trainer>> trainer =
      train::Trainer::create(std::move(*config), options);
  if (!trainer.ok()) {
    fmt::print(stderr, "error: {}\n", trainer.status().message());
    return 1;
  }
  train::Trainer& t = **trainer;
  if (!args.resume.empty()) {
    Status s = t.resume(args.resume);
    if (!s.ok()) {
      fmt::print(stderr, "error: resuming from {}: {}\n", args.resume, s.message());
      return 1;
    }
    fmt::print("resumed from {} at step {}\n", args.resume, t.step());
  }
  // In a data-parallel job rank 0 speaks for all (errors still come from every rank).
  const bool quiet = t.process_group() && t.process_group()->rank() != 0;
  if (!quiet)
    fmt::print("{}: {} parameters on {}, {} steps{}\n", args.config, t.model().num_parameters(),
               t.device()->name(), t.total_steps(),
               t.process_group() ? fmt::format(", {} ranks ({})", t.process_group()->size(),
                                               t.process_group()->backend())
                                 : "");
  Expected<train::RunSummary> summary = t.run();
  if (!summary.ok()) {
    fmt::print(stderr, "\nerror: {}\n", summary.status().message());
    return 1;
  }
  const train::Evaluation& e = summary->final_eval;
  if (quiet) return 0;
  if (e.classification) {
    fmt::print("done: step {}, test accuracy {:.2f}% ({}/{}), test loss {:.4f}, {:.1f} s\n",
               summary->last_step, 100.0 * e.accuracy, e.correct, e.total, e.loss,
               summary->seconds);
  } else {
    fmt::print("done: step {}, validation loss {:.4f}, perplexity {:.2f}, {:.1f} s\n",
               summary->last_step, e.loss, e.perplexity(), summary->seconds);
  }
  return 0;
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand("train", "train the model a TOML config describes");
  cmd->add_option("config", args->config, "the run's TOML file (examples/fashion_cnn.toml)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--resume", args->resume, "continue from this checkpoint")
      ->check(CLI::ExistingFile);
  cmd->add_option("--steps", args->steps, "train this many steps in all (overrides [train])")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--fuse", args->fuse,
                "capture the first step as a graph and replay later steps with fused element-wise "
                "kernels ([train] fuse = true)");
  cmd->add_flag("--dump-graph", args->dump_graph,
                "print the first step's graph before and after fusion (implies --fuse)");
  cmd->callback([args] { exit_code = run_train(*args); });
}

}  // namespace tessel::cli
