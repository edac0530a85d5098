// What one parallel_for costs: tessel's thread pool against OpenMP (GCC's libgomp) with the same
// number of threads, on an empty body (pure dispatch overhead) and on a memory-bound scale of a
// float array. Prints a table, or JSON with --json.
//
//   tessel_thread_pool_bench [--json] [--threads N] [--calls N]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/thread_pool.h"

namespace {

using Clock = std::chrono::steady_clock;

// Median over rounds of the time per call, in nanoseconds.
double ns_per_call(int calls, const std::function<void()>& call) {
  for (int i = 0; i < calls / 10 + 1; ++i)
    call();  // warm up (threads awake, pages touched)
  std::vector<double> rounds;
  for (int r = 0; r < 7; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < calls; ++i)
      call();
    rounds.push_back(std::chrono::duration<double, std::nano>(Clock::now() - start).count() /
                     calls);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  int threads = tessel::default_thread_count();
  int calls = 2000;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--calls") == 0 && i + 1 < argc) {
      calls = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--json] [--threads N] [--calls N]\n", argv[0]);
      return 2;
    }
  }
  tessel::ThreadPool pool(threads);
  omp_set_num_threads(threads);

  constexpr int64_t kElements = 1 << 20;
  std::vector<float> x(kElements, 1.0f), y(kElements, 0.0f);
  volatile int64_t sink = 0;

  struct Case {
    std::string name;
    int64_t n;
    int64_t grain;
    bool scale;  // false: empty body
  };
  const Case cases[] = {
      {"empty, n = threads", threads, 1, false},
      {"empty, n = 4096, grain 64", 4096, 64, false},
      {"scale 1M floats, grain 16K", kElements, 1 << 14, true},
  };

  nlohmann::json results = nlohmann::json::array();
  if (!json) {
    std::printf("threads: %d (tessel pool vs OpenMP %d, libgomp)\n", threads, _OPENMP);
    std::printf("%-30s %14s %14s %8s\n", "case", "tessel ns/call", "openmp ns/call", "ratio");
  }
  for (const Case& c : cases) {
    const float* xs = x.data();
    float* ys = y.data();
    auto body = [&](int64_t begin, int64_t end) {
      if (c.scale) {
        for (int64_t i = begin; i < end; ++i)
          ys[i] = 2.0f * xs[i];
      } else {
        sink = sink + (end - begin);
      }
    };
    const int n_calls = c.scale ? calls / 10 + 1 : calls;
    const double tessel_ns = ns_per_call(n_calls, [&] { pool.parallel_for(c.n, c.grain, body); });
    const double omp_ns = ns_per_call(n_calls, [&] {
      const int64_t chunks = (c.n + c.grain - 1) / c.grain;
#pragma omp parallel for schedule(static)
      for (int64_t k = 0; k < chunks; ++k)
        body(k * c.grain, std::min(c.n, (k + 1) * c.grain));
    });
    if (json) {
      results.push_back({{"case", c.name},
                         {"threads", threads},
                         {"tessel_ns", tessel_ns},
                         {"openmp_ns", omp_ns},
                         {"ratio", tessel_ns / omp_ns}});
    } else {
      std::printf("%-30s %14.0f %14.0f %8.2f\n", c.name.c_str(), tessel_ns, omp_ns,
                  tessel_ns / omp_ns);
    }
  }
  if (json) std::printf("%s\n", results.dump(2).c_str());
  return 0;
}
