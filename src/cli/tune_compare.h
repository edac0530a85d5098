// `tessel tune --compare-exhaustive`: how fast the tuner's search finds a kernel's best
// specialisation, against random search and the grid, on cases whose spaces are small enough to
// measure every point. Each point is measured once, as the tuner measures it (a child-process
// trial timed against the kernel's defaults: tune_session.h's paired_cost); the three searches are
// then replayed over those measurements, so they see the same numbers.
#pragma once

#include <string>

#include "support/status.h"
#include "tune/tune_db.h"

namespace tessel::cli {

// `device`: "cpu" runs the CPU cases, "opencl:0" / "cuda:0" the GPU ones. Prints a table (or one
// JSON object per case with `json`); returns the worst ratio (best in 32 trials / exhaustive).
// With `reuse`, a point the database already holds a trial of (from an earlier run, same kernel
// source and device) is not measured again: for replaying the searches cheaply.
Expected<double> compare_exhaustive(const std::string& device, bool json, tune::TuneDb* db,
                                    bool quick, bool reuse = false);

}  // namespace tessel::cli
