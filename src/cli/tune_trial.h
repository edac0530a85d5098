// One trial of `tessel tune`: a kernel specialisation built, checked and timed on a device, in a
// child process (`tessel tune --trial REQUEST`), so that a specialisation that crashes the
// compiler or the kernel, or hangs, costs one trial and not the tuner.
//
// The child makes the kernel's tensor arguments at the request's sizes (random inputs, alpha = 1,
// beta = 0), runs the kernel's default specialisation and the candidate on the same inputs, and
// compares every tensor (a different result is "wrong"); for gemm and batched_gemm it also checks
// sampled outputs against a double-precision dot product of the inputs. Then it times the
// candidate (the fastest of batches of back-to-back launches: tune_trial.cpp says why), or the
// candidate and the defaults in turns (versus_defaults), and prints one JSON line.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace tessel::cli {

struct TrialRequest {
  std::string kernel;
  std::string device;                         // "cpu", "opencl:0"
  std::map<std::string, std::string> params;  // every parameter passed (tuned and fixed)
  std::map<std::string, int64_t> sizes;       // the kernel's sizes by name
  double seconds = 0.15;                      // timing budget
  // Also time the kernel's defaults, taking turns with the candidate launch by launch (the
  // tuner's confirmation: a neighbour's load then hits both alike).
  bool versus_defaults = false;
  // The tuned parameters of "the defaults" where they are not the kernel's own: the op's rule
  // at the launch being tuned (TuneTarget::baseline).
  std::map<std::string, std::string> baseline = {};
};

struct TrialResult {
  std::string status;  // ok, compile_error, wrong, crash, timeout
  double seconds = 0;  // per launch
  std::string detail;
  // With versus_defaults: the defaults' time per launch (fastest batch), and the median over
  // rounds of (candidate time / defaults time) within a round.
  double default_seconds = 0;
  double ratio = 0;
};

// Parent side: runs the request in a child `tessel` and reads its answer.
TrialResult run_trial(const TrialRequest& request, int timeout_seconds = 120);

// Child side (`tessel tune --trial JSON`): prints the result line; returns the exit code.
int run_trial_child(const std::string& request_json);

}  // namespace tessel::cli
