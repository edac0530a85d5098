// Progress line (see progress.h).
#include "train/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>

namespace tessel::train {

Progress::Progress(std::FILE* out, int64_t total_steps, int64_t start_step, int interactive,
                   std::string unit)
    : out_(out),
      total_(total_steps),
      start_step_(start_step),
      interactive_(interactive < 0 ? isatty(fileno(out)) != 0 : interactive != 0),
      unit_(std::move(unit)) {}

std::string Progress::format_duration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

void Progress::update(int64_t step, double loss, double lr, double per_second) {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int64_t done = step - start_step_;
  // The average over this run so far: steady after a few updates, and includes evaluations.
  const double eta = done > 0 ? elapsed / double(done) * double(total_ - step) : 0.0;
  const int width = static_cast<int>(fmt::format("{}", total_).size());
  std::string line = fmt::format("step {:>{}}/{} {:5.1f}%  loss {:.4f}  lr {:.2e}  {:.0f} {}/s"
                                 "  elapsed {}  eta {}",
                                 step, width, total_, 100.0 * double(step) / double(total_), loss,
                                 lr, per_second, unit_, format_duration(elapsed),
                                 format_duration(eta));
  if (interactive_) {
    fmt::print(out_, "\r{}\x1b[K", line);
    line_open_ = true;
  } else {
    fmt::print(out_, "{}\n", line);
  }
  last_line_ = line;
  std::fflush(out_);
}

void Progress::message(const std::string& line) {
  if (interactive_ && line_open_) {
    fmt::print(out_, "\r{}\x1b[K\n{}", line, last_line_);
  } else {
    fmt::print(out_, "{}\n", line);
  }
  std::fflush(out_);
}

void Progress::finish() {
  if (interactive_ && line_open_) fmt::print(out_, "\n");
  line_open_ = false;
  std::fflush(out_);
}

}  // namespace tessel::train
