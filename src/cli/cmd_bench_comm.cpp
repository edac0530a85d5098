// `tessel bench comm`: all-reduce (or another collective) time, algbw and busbw of tessel's shm
// and mpi backends next to Open MPI's own MPI_Allreduce, from 8 B to 256 MiB on 2 and 4 ranks,
// in the style of nccl-tests.
//
// Each measurement is a job of the worker program tessel_comm_bench (dist/collectives_bench.cpp,
// built next to `tessel`): tessel-shm jobs start through dist::launch, tessel-mpi and openmpi jobs
// through mpirun. The jobs of the three implementations take turns, `--reps` times, and each
// figure is the median over those jobs, so a neighbour slowing the shared machine for a while hits
// every implementation alike. The table gives shm/openmpi ratios of busbw and of time.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "dist/launcher.h"

namespace tessel::cli {
namespace {

struct Options {
  bool json = false;
  std::vector<int> ranks = {2, 4};
  std::vector<std::string> impls = {"tessel-shm", "tessel-mpi", "openmpi"};
  std::string op = "all_reduce";
  std::string type = "f32";
  size_t min_bytes = 8;
  size_t max_bytes = 256u << 20;
  int reps = 3;
  std::string stat = "median";  // how the jobs of one implementation combine: median or min
};

std::string worker_path() {
  char self[4096] = {};
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string path = n > 0 ? std::string(self, static_cast<size_t>(n)) : "";
  size_t slash = path.rfind('/');
  return (slash == std::string::npos ? std::string(".") : path.substr(0, slash)) +
         "/tessel_comm_bench";
}

// Runs one job; returns the rows rank 0 printed.
Expected<std::vector<nlohmann::json>> run_job(const Options& o, const std::string& impl,
                                              int nranks) {
  dist::LaunchOptions launch;
  launch.nranks = nranks;
  launch.backend = impl == "tessel-shm" ? dist::Backend::kShm : dist::Backend::kMpi;
  launch.command = {worker_path(),
                    "--impl",
                    impl,
                    "--op",
                    o.op,
                    "--type",
                    o.type,
                    "--min-bytes",
                    std::to_string(o.min_bytes),
                    "--max-bytes",
                    std::to_string(o.max_bytes)};
  launch.capture = true;
  TESSEL_ASSIGN_OR_RETURN(dist::LaunchResult result, dist::launch(launch));
  if (!result.first_failure.empty()) {
    std::string output;
    for (auto& r : result.ranks)
      output += r.output;
    return internal_error("{} on {} ranks failed: {}\n{}", impl, nranks, result.first_failure,
                          output);
  }
  std::vector<nlohmann::json> rows;
  std::istringstream lines(result.ranks.front().output);
  std::string line;
  while (std::getline(lines, line)) {
    size_t brace = line.find('{');
    if (brace == std::string::npos) continue;
    auto row = nlohmann::json::parse(line.substr(brace), nullptr, false);
    if (!row.is_discarded()) rows.push_back(row);
  }
  return rows;
}

// The median of the jobs, or their best with --stat min (on a machine others are using, the
// fastest job is the one least disturbed).
double combine(std::vector<double> v, const std::string& stat) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0;
  return stat == "min" ? v.front() : v[v.size() / 2];
}

std::string size_text(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (bytes >= 1024 && u < 3)
    bytes /= 1024, ++u;
  return fmt::format("{:g} {}", bytes, units[u]);
}

int run(const Options& o) {
  if (::access(worker_path().c_str(), X_OK) != 0) {
    std::fprintf(stderr, "tessel bench comm: %s is missing (it is built with Open MPI found)\n",
                 worker_path().c_str());
    return 1;
  }
  for (int nranks : o.ranks) {
    // impl -> bytes -> time of each job
    std::map<std::string, std::map<size_t, std::vector<double>>> times;
    std::map<size_t, nlohmann::json> shape;  // count, type, ... of each size
    std::string library;
    for (int rep = 0; rep < o.reps; ++rep)
      for (const std::string& impl : o.impls) {
        auto rows = run_job(o, impl, nranks);
        if (!rows.ok()) {
          std::fprintf(stderr, "tessel bench comm: %s\n", rows.status().to_string().c_str());
          return 1;
        }
        for (auto& row : *rows) {
          size_t bytes = row["bytes"];
          times[impl][bytes].push_back(row["time_us"]);
          shape[bytes] = row;
          if (impl == "openmpi") library = row.value("library", "");
        }
      }
    const double factor = o.op == "all_reduce" ? 2.0 * (nranks - 1) / nranks
                          : o.op == "all_gather" || o.op == "reduce_scatter"
                              ? static_cast<double>(nranks - 1) / nranks
                              : 1.0;
    if (o.json) {
      for (const std::string& impl : o.impls)
        for (auto& [bytes, list] : times[impl]) {
          double t = combine(list, o.stat);
          double algbw = bytes / t / 1e3;
          nlohmann::json row = {{"impl", impl},
                                {"op", o.op},
                                {"ranks", nranks},
                                {"bytes", bytes},
                                {"count", shape[bytes]["count"]},
                                {"type", o.type},
                                {"redop", "sum"},
                                {"time_us", t},
                                {"algbw", algbw},
                                {"busbw", algbw * factor},
                                {"jobs", list.size()},
                                {"stat", o.stat}};
          if (impl == "openmpi") row["library"] = library;
          std::printf("%s\n", row.dump().c_str());
        }
      continue;
    }
    std::printf(
        "# tessel bench comm: %s, %s, sum, %d ranks on this machine; %s of %d jobs "
        "per implementation, taking turns%s%s\n",
        o.op.c_str(), o.type.c_str(), nranks, o.stat.c_str(), o.reps,
        library.empty() ? "" : "; openmpi = ", library.c_str());
    std::printf("# busbw = algbw * %s; GB/s = 1e9 bytes/s\n",
                o.op == "all_reduce" ? "2(n-1)/n" : (factor == 1.0 ? "1" : "(n-1)/n"));
    std::string head = fmt::format("{:>10} {:>10} {:>5} {:>5}", "size", "count", "type", "redop");
    std::string head2 = fmt::format("{:>10} {:>10} {:>5} {:>5}", "", "", "", "");
    for (const std::string& impl : o.impls) {
      head += fmt::format(" |{:^28}", impl);
      head2 += fmt::format(" |{:>10} {:>8} {:>8}", "time(us)", "algbw", "busbw");
    }
    const bool ratios = times.count("tessel-shm") && times.count("openmpi");
    if (ratios) {
      head += fmt::format(" |{:^18}", "shm/openmpi");
      head2 += fmt::format(" |{:>8} {:>9}", "busbw", "time");
    }
    std::printf("%s\n%s\n", head.c_str(), head2.c_str());
    for (auto& [bytes, row] : shape) {
      std::string line =
          fmt::format("{:>10} {:>10} {:>5} {:>5}", size_text(static_cast<double>(bytes)),
                      row["count"].get<size_t>(), o.type, "sum");
      for (const std::string& impl : o.impls) {
        auto it = times[impl].find(bytes);
        if (it == times[impl].end()) {
          line += fmt::format(" |{:>28}", "-");
          continue;
        }
        double t = combine(it->second, o.stat);
        double algbw = bytes / t / 1e3;
        line += fmt::format(" |{:>10.2f} {:>8.2f} {:>8.2f}", t, algbw, algbw * factor);
      }
      if (ratios && times["tessel-shm"].count(bytes) && times["openmpi"].count(bytes)) {
        double shm = combine(times["tessel-shm"][bytes], o.stat);
        double mpi = combine(times["openmpi"][bytes], o.stat);
        line += fmt::format(" |{:>7.2f}x {:>8.2f}x", mpi / shm, shm / mpi);
      }
      std::printf("%s\n", line.c_str());
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

void add_bench_comm_command(CLI::App& bench) {
  auto options = std::make_shared<Options>();
  CLI::App* cmd = bench.add_subcommand(
      "comm", "collective time and bandwidth: tessel shm and mpi backends vs Open MPI");
  cmd->add_flag("--json", options->json, "one JSON object per line instead of the table");
  cmd->add_option("--ranks", options->ranks, "rank counts (default: 2 4)")->delimiter(',');
  cmd->add_option("--impl", options->impls,
                  "implementations: tessel-shm, tessel-mpi, openmpi (default: all)")
      ->delimiter(',')
      ->check(CLI::IsMember({"tessel-shm", "tessel-mpi", "openmpi"}));
  cmd->add_option("--op", options->op,
                  "all_reduce (default), all_gather, reduce_scatter, broadcast")
      ->check(CLI::IsMember({"all_reduce", "all_gather", "reduce_scatter", "broadcast"}));
  cmd->add_option("--type", options->type, "element type: f32 (default), f64, f16, bf16")
      ->check(CLI::IsMember({"f32", "f64", "f16", "bf16"}));
  cmd->add_option("--min-bytes", options->min_bytes, "smallest size (default 8)");
  cmd->add_option("--max-bytes", options->max_bytes, "largest size (default 268435456)");
  cmd->add_option("--reps", options->reps, "jobs per implementation (default 3)")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--stat", options->stat,
                  "combine the jobs by their median (default) or min (the least disturbed)")
      ->check(CLI::IsMember({"median", "min"}));
  cmd->callback([options] { exit_code = run(*options); });
}

}  // namespace tessel::cli
