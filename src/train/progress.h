// The trainer's progress line: step, loss, learning rate, throughput and ETA. On a terminal it
// redraws one line in place (carriage return + erase to end of line); into a file or a pipe it
// prints one plain line per update, so logs stay readable.
//
//   Progress progress(stdout, /*total_steps=*/1000, /*start_step=*/0);
//   progress.update(step, loss, lr, samples_per_s);
//   progress.message("eval: accuracy 91.2%");   // a line of its own, the bar redrawn after it
//   progress.finish();
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace tessel::train {

class Progress {
 public:
  // `interactive` defaults to whether `out` is a terminal; `unit` is what throughput counts.
  Progress(std::FILE* out, int64_t total_steps, int64_t start_step, int interactive = -1,
           std::string unit = "samples");
  void update(int64_t step, double loss, double lr, double per_second);
  void message(const std::string& line);
  // Ends the in-place line, if one is drawn.
  void finish();

  // "1:02:03", "4:05": h:mm:ss or m:ss.
  static std::string format_duration(double seconds);

 private:
  std::FILE* out_;
  int64_t total_, start_step_;
  bool interactive_;
  std::string unit_;
  bool line_open_ = false;
  std::string last_line_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace tessel::train
