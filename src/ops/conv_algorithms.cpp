// conv2d's algorithm choice points and the runs the tuner times (see conv_algorithms.h).
#include "ops/conv_algorithms.h"

#include <optional>

#include "ops/op.h"
#include "ops/ops.h"
#include "support/random.h"

namespace tessel::ops {

namespace {

// The sizes of one launch, by name.
struct ConvSizes {
  int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, g;
};

Expected<ConvSizes> conv_sizes(const std::vector<int64_t>& s) {
  if (s.size() != 14)
    return invalid_argument(
        "conv2d algorithm sizes: need 14 (N C H W O KH KW SH SW PH PW DH DW G), got {}", s.size());
  for (int64_t v : s)
    if (v < 0) return invalid_argument("conv2d algorithm sizes: negative size {}", v);
  return ConvSizes{s[0], s[1], s[2], s[3],  s[4],  s[5],  s[6],
                   s[7], s[8], s[9], s[10], s[11], s[12], s[13]};
}

// Seeded values in [-1, 1) of `shape` on `device` in `dtype`.
Expected<Tensor> seeded(const Shape& shape, uint64_t seed, Device* device, DType dtype) {
  int64_t count = 1;
  for (int64_t d : shape)
    count *= d;
  Pcg32 rng(seed);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v)
    x = rng.next_float() * 2.0f - 1.0f;
  TESSEL_ASSIGN_OR_RETURN(Tensor host, Tensor::from_vector(v, shape));
  TESSEL_ASSIGN_OR_RETURN(Tensor on_device, host.to(device));
  return cast(on_device, dtype);
}

// One conv2d pass of these sizes with `algorithm` forced at `point` ("": the op's own choice):
// the forward, or one gradient through the op's backward rule.
Expected<std::function<Status()>> conv_runner(const std::string& point,
                                              const std::string& algorithm, Device* device,
                                              DType dtype, const std::vector<int64_t>& sizes) {
  TESSEL_ASSIGN_OR_RETURN(ConvSizes s, conv_sizes(sizes));
  if (s.g < 1 || s.c % s.g != 0 || s.o % s.g != 0)
    return invalid_argument("conv2d algorithm sizes: C {} and O {} must be multiples of G {}", s.c,
                            s.o, s.g);
  TESSEL_ASSIGN_OR_RETURN(Tensor x, seeded({s.n, s.c, s.h, s.w}, 1, device, dtype));
  TESSEL_ASSIGN_OR_RETURN(Tensor weight, seeded({s.o, s.c / s.g, s.kh, s.kw}, 2, device, dtype));
  TESSEL_ASSIGN_OR_RETURN(Tensor bias, seeded({s.o}, 3, device, DType::kF32));
  const Attrs attrs = conv_attrs({s.sh, s.sw}, {s.ph, s.pw}, {s.dh, s.dw}, s.g);
  TESSEL_ASSIGN_OR_RETURN(const OpDef* op, find_op("conv2d"));
  TESSEL_ASSIGN_OR_RETURN(TensorMeta out, infer(*op,
                                                {{x.shape(), x.dtype()},
                                                 {weight.shape(), weight.dtype()},
                                                 {bias.shape(), bias.dtype()}},
                                                attrs));
  if (point == conv_forward_point().name) {
    return std::function<Status()>([=]() -> Status {
      std::optional<ForceAlgorithm> force;
      if (!algorithm.empty()) force.emplace(point, algorithm);
      return op->forward({x, weight, bias}, attrs, out).status();
    });
  }
  TESSEL_ASSIGN_OR_RETURN(Tensor grad, seeded(out.shape, 4, device, DType::kF32));
  const bool input_grad = point == conv_input_grad_point().name;
  std::vector<TensorMeta> metas{
      {x.shape(), x.dtype()}, {weight.shape(), weight.dtype()}, {bias.shape(), bias.dtype()}};
  return std::function<Status()>([=]() -> Status {
    std::optional<ForceAlgorithm> force;
    if (!algorithm.empty()) force.emplace(point, algorithm);
    BackwardArgs args{
        {x, weight, bias}, Tensor(), metas, attrs, grad, {input_grad, !input_grad, false}, {}};
    return op->backward(args).status();
  });
}

// The implicit gemm runs on the CPU only; im2col + gemm everywhere.
bool implicit_or_im2col(const std::string& algorithm, Device* device) {
  if (algorithm == "im2col") return true;
  return algorithm == "implicit" && device->kind() == DeviceKind::kCpu;
}

AlgorithmPoint conv_point(std::string name, std::vector<std::string> algorithms) {
  AlgorithmPoint p;
  p.name = std::move(name);
  p.algorithms = std::move(algorithms);
  p.shape_names = {"N", "C", "H", "W", "O"};
  p.fixed_names = {"KH", "KW", "SH", "SW", "PH", "PW", "DH", "DW", "G"};
  // The algorithms are op code over conv.tile's kernels, winograd.tile's and gemm.tile's.
  p.source_hash =
      algorithm_source_hash(p.name, p.algorithms, {"conv_implicit", "winograd_input", "gemm"});
  p.applies = [](const std::string& algorithm, Device* device, const std::vector<int64_t>&) {
    return implicit_or_im2col(algorithm, device);
  };
  const std::string point_name = p.name;
  p.make_runner = [point_name](const std::string& algorithm, Device* device, DType dtype,
                               const std::vector<int64_t>& sizes) {
    return conv_runner(point_name, algorithm, device, dtype, sizes);
  };
  return p;
}

}  // namespace

bool conv_can_unfold(int64_t groups, int64_t kw, int64_t dw) {
  return groups == 1 && kw > 1 && dw == 1;
}

bool conv_winograd_fits(const std::vector<int64_t>& s) {
  // N C H W O | KH KW SH SW PH PW DH DW G
  return s.size() == 14 && s[5] == 3 && s[6] == 3 && s[7] == 1 && s[8] == 1 && s[11] == 1 &&
         s[12] == 1 && s[13] == 1;
}

const AlgorithmPoint& conv_forward_point() {
  static const AlgorithmPoint p = [] {
    AlgorithmPoint q = conv_point("conv2d.forward", {"implicit", "im2col", "unfolded", "winograd"});
    q.applies = [](const std::string& algorithm, Device* device,
                   const std::vector<int64_t>& sizes) {
      if (algorithm == "winograd") return conv_winograd_fits(sizes);
      if (algorithm != "unfolded") return implicit_or_im2col(algorithm, device);
      return device->kind() == DeviceKind::kCpu && sizes.size() == 14 &&
             conv_can_unfold(sizes[13], sizes[6], sizes[12]);
    };
    return q;
  }();
  return p;
}

const AlgorithmPoint& conv_input_grad_point() {
  static const AlgorithmPoint p = [] {
    AlgorithmPoint q = conv_point("conv2d.input_grad", {"implicit", "im2col", "winograd"});
    q.applies = [](const std::string& algorithm, Device* device,
                   const std::vector<int64_t>& sizes) {
      if (algorithm == "winograd") return conv_winograd_fits(sizes);
      return implicit_or_im2col(algorithm, device);
    };
    return q;
  }();
  return p;
}

const AlgorithmPoint& conv_weight_grad_point() {
  static const AlgorithmPoint p = [] {
    AlgorithmPoint q = conv_point("conv2d.weight_grad", {"implicit", "im2col", "unfolded"});
    q.applies = [](const std::string& algorithm, Device* device,
                   const std::vector<int64_t>& sizes) {
      if (algorithm != "unfolded") return implicit_or_im2col(algorithm, device);
      return device->kind() == DeviceKind::kCpu && sizes.size() == 14 &&
             conv_can_unfold(sizes[13], sizes[6], sizes[12]);
    };
    return q;
  }();
  return p;
}

std::vector<const AlgorithmPoint*> conv_algorithm_points() {
  return {&conv_forward_point(), &conv_input_grad_point(), &conv_weight_grad_point()};
}

}  // namespace tessel::ops
