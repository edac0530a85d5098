// Ops that can compute one result by several algorithms pick one per launch here. conv2d's
// forward runs as an implicit gemm, as im2col + gemm or over unfolded columns; which is fastest
// depends on the layer, and a rule of thumb in the op is right for most layers, not all
// (measured in stop 25: im2col ahead of the implicit gemm on 15 of ResNet-50's 69 bench conv
// rows, by up to 1.3x, behind on the rest). Each such decision is an AlgorithmPoint; a launch asks
// choose_algorithm(), which answers, in order:
//   1. the algorithm forced on this thread (ForceAlgorithm: the tuner and the tests),
//   2. the tuning database's choice for the launch's key (tune/choices.h: exact shape, else the
//      nearest tuned one; kernel = the point's name, params "ALGO=im2col"), when it applies,
//   3. the op's own rule.
// `tessel tune --model` / `--workload` record the points one step meets (record_tunable_launches)
// and time each applicable algorithm (cli/tune_algorithm.h).
//
//   TESSEL_ASSIGN_OR_RETURN(std::string algo,
//                           choose_algorithm(conv_forward_point(), device, dtype, sizes, rule));
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/tensor.h"
#include "support/status.h"
#include "tune/tune_db.h"

namespace tessel::ops {

struct AlgorithmPoint {
  std::string name;                     // "conv2d.forward"
  std::vector<std::string> algorithms;  // "implicit", "im2col", "unfolded"; the first is no default
  // The launch's sizes, in this order: the first shape_names.size() are the key's shape (nearest
  // shapes are looked up over them), the rest its fixed part ("KH=3 KW=3 ...").
  std::vector<std::string> shape_names;
  std::vector<std::string> fixed_names;
  // The database key's source hash (algorithm_source_hash), computed once when the point is made:
  // launches build their key from it without hashing anything.
  std::string source_hash;
  // Whether `algorithm` can compute a launch of these sizes on `device` (correctly; speed is the
  // rule's and the tuner's business).
  std::function<bool(const std::string& algorithm, Device* device,
                     const std::vector<int64_t>& sizes)>
      applies;
  // A closure that runs the pass once with `algorithm` forced ("": the op's own choice), on
  // seeded inputs of these sizes and dtype on `device`: what the tuner times.
  std::function<Expected<std::function<Status()>>(const std::string& algorithm, Device* device,
                                                  DType dtype, const std::vector<int64_t>& sizes)>
      make_runner;
};

// Every point the op library has (conv2d.forward, conv2d.input_grad, conv2d.weight_grad).
const std::vector<const AlgorithmPoint*>& algorithm_points();
// The point called `name`; not_found names the known ones.
Expected<const AlgorithmPoint*> find_algorithm_point(const std::string& name);

// The algorithm for one launch (see the top of this file). `rule` is what the op picks without
// a database; an error only when the database cannot be read.
Expected<std::string> choose_algorithm(const AlgorithmPoint& point, Device* device, DType dtype,
                                       const std::vector<int64_t>& sizes, const std::string& rule);

// A hash of the point's name and algorithms and of the kernels they launch (kernel_source_hash:
// their files and the code generator), so that choices measured under other kernels are not found.
std::string algorithm_source_hash(const std::string& point,
                                  const std::vector<std::string>& algorithms,
                                  const std::vector<std::string>& kernels);

// The database key of a launch at `point` (the shape and fixed part split as the point says).
tune::TuneKey algorithm_key(const AlgorithmPoint& point, Device* device, DType dtype,
                            const std::vector<int64_t>& sizes);
// "ALGO=im2col", the params text a choice is stored as, and back ("" when it names none).
std::string algorithm_params(const std::string& algorithm);
std::string algorithm_of_params(const std::string& params);

// While alive, launches at `point` on this thread take `algorithm` (where it applies).
class ForceAlgorithm {
 public:
  ForceAlgorithm(std::string point, std::string algorithm);
  ~ForceAlgorithm();
  ForceAlgorithm(const ForceAlgorithm&) = delete;
  ForceAlgorithm& operator=(const ForceAlgorithm&) = delete;

 private:
  std::string point_;
  std::string previous_;
};

// A launch seen while record_tunable_launches(true) was on (distinct keys, in launch order).
struct AlgorithmLaunch {
  const AlgorithmPoint* point = nullptr;
  Device* device = nullptr;
  DType dtype = DType::kF32;
  std::vector<int64_t> sizes;
  std::string rule;  // what the op's own rule picked
};
std::vector<AlgorithmLaunch> recorded_algorithm_launches();

// For ops/tuned_launch.cpp: forgets what was recorded (when recording starts).
void clear_recorded_algorithm_launches();

}  // namespace tessel::ops
