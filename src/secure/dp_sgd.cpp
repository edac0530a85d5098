// Per-example clipping and noise for DP-SGD (see dp_sgd.h).
#include "secure/dp_sgd.h"

#include <sodium.h>

#include <cmath>
#include <cstring>

#include "autograd/functional.h"
#include "nn/conv_layers.h"
#include "nn/layers.h"
#include "secure/secret_key.h"

namespace tessel::secure {

using nn::Variable;

struct DpSgd::Layer {
  std::string name;
  nn::Module* module = nullptr;
  bool conv = false;
  nn::Parameter* weight = nullptr;
  nn::Parameter* bias = nullptr;
  nn::Conv2dOptions conv_options;
  Tensor input;   // saved by the tap; undefined: the layer did not run this step
  Variable leaf;  // its gradient is the output's
};

namespace {

// One example's unfolded input: U[k][pixel] for k = (ci kh + a) kw + b (Conv2d's weight layout).
void im2col(const float* x, int64_t cin, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t ho,
            int64_t wo, const nn::Conv2dOptions& o, std::vector<float>& u) {
  const int64_t pixels = ho * wo;
  u.assign(size_t(cin * kh * kw * pixels), 0.0f);
  for (int64_t ci = 0; ci < cin; ++ci)
    for (int64_t a = 0; a < kh; ++a)
      for (int64_t b = 0; b < kw; ++b) {
        float* row = u.data() + ((ci * kh + a) * kw + b) * pixels;
        for (int64_t oh = 0; oh < ho; ++oh) {
          const int64_t r = oh * o.stride - o.padding + a * o.dilation;
          if (r < 0 || r >= h) continue;
          for (int64_t ow = 0; ow < wo; ++ow) {
            const int64_t c = ow * o.stride - o.padding + b * o.dilation;
            if (c >= 0 && c < w) row[oh * wo + ow] = x[(ci * h + r) * w + c];
          }
        }
      }
}

// A layer's saved input and output gradient for one step, on the host.
struct LayerData {
  std::vector<float> x, g;  // g already multiplied by the batch size
  Shape x_shape, g_shape, w_shape;
};

}  // namespace

DpSgd::DpSgd(nn::Module& model, const DpSgdOptions& options) : model_(model), options_(options) {}

DpSgd::~DpSgd() {
  for (auto& layer : layers_)
    layer->module->set_forward_tap(nullptr);
}

Expected<std::unique_ptr<DpSgd>> DpSgd::attach(nn::Module& model, nn::FlatParameters& params,
                                               const DpSgdOptions& options) {
  TESSEL_TRY(init_sodium());
  if (!(options.max_grad_norm > 0) || !(options.noise_multiplier >= 0))
    return invalid_argument("DP-SGD: max_grad_norm must be > 0 and noise_multiplier >= 0");
  std::unique_ptr<DpSgd> dp(new DpSgd(model, options));
  if (options.seed) {
    dp->seed_ = *options.seed;
  } else {
    randombytes_buf(dp->seed_.data(), dp->seed_.size());
  }
  std::vector<const nn::Parameter*> covered;
  for (auto& [name, module] : model.named_modules()) {
    auto layer = std::make_unique<Layer>();
    layer->name = name;
    layer->module = module;
    if (auto* linear = dynamic_cast<nn::Linear*>(module)) {
      layer->weight = &linear->weight();
      layer->bias = linear->bias();
    } else if (auto* conv = dynamic_cast<nn::Conv2d*>(module)) {
      if (conv->options().groups != 1)
        return unimplemented("DP-SGD: Conv2d '{}' has groups = {} (only 1 is supported)", name,
                             conv->options().groups);
      layer->conv = true;
      layer->weight = &conv->weight();
      layer->bias = conv->bias();
      layer->conv_options = conv->options();
    } else {
      continue;
    }
    covered.push_back(layer->weight);
    if (layer->bias) covered.push_back(layer->bias);
    Layer* raw = layer.get();
    DpSgd* self = dp.get();
    module->set_forward_tap([self, raw](nn::Module&, const Variable& input, Variable output) {
      return self->tap(*raw, input, std::move(output));
    });
    dp->layers_.push_back(std::move(layer));
  }
  for (const auto& entry : params.entries())
    if (std::find(covered.begin(), covered.end(), entry.parameter) == covered.end())
      return unimplemented(
          "DP-SGD: parameter '{}' is not in a Linear or Conv2d, whose per-example gradients are "
          "computed here (BatchNorm, LayerNorm and embeddings are not supported)",
          entry.name);
  return dp;
}

Expected<Variable> DpSgd::tap(Layer& layer, const Variable& input, Variable output) {
  if (!autograd::grad_enabled() || !layer.module->is_training()) return output;
  if (layer.input.defined())
    return failed_precondition("DP-SGD: layer '{}' ran twice in one step (not supported)",
                               layer.name);
  if (output.data().dtype() != DType::kF32)
    return unimplemented("DP-SGD: layer '{}' computes in {} (use precision = \"fp32\")", layer.name,
                         dtype_name(output.data().dtype()));
  layer.input = input.data();
  TESSEL_ASSIGN_OR_RETURN(Tensor zero,
                          Tensor::zeros(output.shape(), DType::kF32, output.data().device()));
  layer.leaf = Variable(zero, /*requires_grad=*/true);
  return autograd::add(output, layer.leaf);
}

Status DpSgd::privatise(int64_t batch) {
  const double clip = options_.max_grad_norm;
  std::vector<LayerData> data(layers_.size());
  norms_.assign(size_t(batch), 0.0);
  std::vector<double>& norm2 = norms_;
  // Pass 1: each example's squared norm, layer by layer.
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = *layers_[l];
    LayerData& d = data[l];
    if (!layer.input.defined()) continue;  // not used this step: zero gradients
    d.x_shape = layer.input.shape();
    d.w_shape = layer.weight->shape;
    if (d.x_shape.empty() || d.x_shape[0] != batch)
      return invalid_argument("DP-SGD: layer '{}' saw {} examples, the batch has {}", layer.name,
                              d.x_shape.empty() ? 0 : d.x_shape[0], batch);
    TESSEL_ASSIGN_OR_RETURN(d.x, layer.input.to_vector<float>());
    if (layer.leaf.grad().defined()) {
      d.g_shape = layer.leaf.grad().shape();
      TESSEL_ASSIGN_OR_RETURN(d.g, layer.leaf.grad().to_vector<float>());
    } else {
      d.g_shape = layer.leaf.shape();
      d.g.assign(size_t(layer.leaf.data().numel()), 0.0f);
    }
    for (float& v : d.g)
      v *= float(batch);  // the mean loss's gradient -> example i's own
  }
  // Visits example i's per-example gradients of layer l: weight (w) and bias (b), in the
  // parameters' layouts.
  std::vector<float> u, w, b;
  const auto per_example = [&](size_t l, int64_t i) {
    const Layer& layer = *layers_[l];
    const LayerData& d = data[l];
    w.assign(size_t(shape_numel(d.w_shape)), 0.0f);
    const int64_t out = d.w_shape[0];
    b.assign(size_t(out), 0.0f);
    if (!layer.conv) {
      const int64_t in = d.w_shape[1];
      const int64_t rows = int64_t(d.x.size()) / in / batch;  // T
      for (int64_t t = 0; t < rows; ++t) {
        const float* x = d.x.data() + (i * rows + t) * in;
        const float* g = d.g.data() + (i * rows + t) * out;
        for (int64_t o = 0; o < out; ++o) {
          b[size_t(o)] += g[o];
          float* wr = w.data() + o * in;
          for (int64_t k = 0; k < in; ++k)
            wr[k] += g[o] * x[k];
        }
      }
      return;
    }
    const int64_t cin = d.x_shape[1], h = d.x_shape[2], wd = d.x_shape[3];
    const int64_t ho = d.g_shape[2], wo = d.g_shape[3], kh = d.w_shape[2], kw = d.w_shape[3];
    const int64_t pixels = ho * wo, k_all = cin * kh * kw;
    im2col(d.x.data() + i * cin * h * wd, cin, h, wd, kh, kw, ho, wo, layer.conv_options, u);
    const float* g = d.g.data() + i * out * pixels;
    for (int64_t o = 0; o < out; ++o) {
      const float* go = g + o * pixels;
      for (int64_t p = 0; p < pixels; ++p)
        b[size_t(o)] += go[p];
      float* wr = w.data() + o * k_all;
      for (int64_t k = 0; k < k_all; ++k) {
        const float* uk = u.data() + k * pixels;
        float acc = 0.0f;
        for (int64_t p = 0; p < pixels; ++p)
          acc += go[p] * uk[p];
        wr[k] = acc;
      }
    }
  };
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerData& d = data[l];
    if (d.x.empty()) continue;
    const bool has_bias = layers_[l]->bias != nullptr;
    if (!layers_[l]->conv) {
      // Ghost norms: never form the per-example weight gradient.
      const int64_t in = d.w_shape[1], out = d.w_shape[0];
      const int64_t rows = int64_t(d.x.size()) / in / batch;
      for (int64_t i = 0; i < batch; ++i) {
        const float* x = d.x.data() + i * rows * in;
        const float* g = d.g.data() + i * rows * out;
        const auto dot = [](const float* a, const float* c, int64_t n) {
          double s = 0;
          for (int64_t k = 0; k < n; ++k)
            s += double(a[k]) * double(c[k]);
          return s;
        };
        double weight2 = 0, bias2 = 0;
        std::vector<double> bias_sum(size_t(out), 0.0);
        for (int64_t t = 0; t < rows; ++t) {
          for (int64_t s = 0; s < rows; ++s)
            weight2 += dot(x + t * in, x + s * in, in) * dot(g + t * out, g + s * out, out);
          for (int64_t o = 0; o < out; ++o)
            bias_sum[size_t(o)] += g[t * out + o];
        }
        for (double v : bias_sum)
          bias2 += v * v;
        norm2[size_t(i)] += weight2 + (has_bias ? bias2 : 0.0);
      }
      continue;
    }
    for (int64_t i = 0; i < batch; ++i) {
      per_example(l, i);
      double s = 0;
      for (float v : w)
        s += double(v) * double(v);
      if (has_bias)
        for (float v : b)
          s += double(v) * double(v);
      norm2[size_t(i)] += s;
    }
  }
  std::vector<double> factor(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) {
    norm2[size_t(i)] = std::sqrt(norm2[size_t(i)]);
    factor[size_t(i)] = std::min(1.0, clip / (norm2[size_t(i)] + 1e-6));
  }

  // Noise for this step: a ChaCha20 stream keyed by BLAKE2b(seed, step).
  unsigned char step_seed[randombytes_SEEDBYTES];
  uint8_t counter[8];
  for (int k = 0; k < 8; ++k)
    counter[k] = uint8_t(uint64_t(steps_) >> (8 * k));
  crypto_generichash(step_seed, sizeof step_seed, counter, sizeof counter, seed_.data(),
                     seed_.size());
  int64_t noise_count = 0;
  for (const auto& layer : layers_)
    noise_count +=
        shape_numel(layer->weight->shape) + (layer->bias ? shape_numel(layer->bias->shape) : 0);
  std::vector<uint64_t> stream(size_t(2 * noise_count));
  randombytes_buf_deterministic(stream.data(), stream.size() * sizeof(uint64_t), step_seed);
  size_t next = 0;
  const auto normal = [&]() {  // Box-Muller on two fresh uniforms, one of the pair kept
    const double u1 = (double(stream[next] >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = double(stream[next + 1] >> 11) * 0x1.0p-53;
    next += 2;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  };
  const double sigma = options_.noise_multiplier * clip;

  // Pass 2: the clipped sums, noised and averaged, into the parameters' gradients.
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = *layers_[l];
    const LayerData& d = data[l];
    const Shape& ws = layer.weight->shape;
    std::vector<double> wsum(size_t(shape_numel(ws)), 0.0);
    std::vector<double> bsum(size_t(ws[0]), 0.0);
    if (!d.x.empty()) {
      if (!layer.conv) {  // sum_i c_i g_i x_i^T as one pass of scaled outer products
        const int64_t in = ws[1], out = ws[0];
        const int64_t rows = int64_t(d.x.size()) / in / batch;
        for (int64_t i = 0; i < batch; ++i)
          for (int64_t t = 0; t < rows; ++t) {
            const float* x = d.x.data() + (i * rows + t) * in;
            const float* g = d.g.data() + (i * rows + t) * out;
            for (int64_t o = 0; o < out; ++o) {
              const double a = factor[size_t(i)] * double(g[o]);
              bsum[size_t(o)] += a;
              double* wr = wsum.data() + o * in;
              for (int64_t k = 0; k < in; ++k)
                wr[k] += a * double(x[k]);
            }
          }
      } else {
        for (int64_t i = 0; i < batch; ++i) {
          per_example(l, i);
          for (size_t k = 0; k < w.size(); ++k)
            wsum[k] += factor[size_t(i)] * double(w[k]);
          for (size_t k = 0; k < b.size(); ++k)
            bsum[k] += factor[size_t(i)] * double(b[k]);
        }
      }
    }
    const auto write = [&](nn::Parameter& p, std::vector<double>& sum) -> Status {
      std::vector<float> out(sum.size());
      for (size_t k = 0; k < sum.size(); ++k)
        out[k] = float((sum[k] + (sigma > 0 ? sigma * normal() : 0.0)) / double(batch));
      TESSEL_ASSIGN_OR_RETURN(Tensor host, Tensor::from_vector<float>(out, p.shape));
      Tensor target = p.grad;
      return target.copy_from(host);
    };
    TESSEL_TRY(write(*layer.weight, wsum));
    if (layer.bias) TESSEL_TRY(write(*layer.bias, bsum));
    layer.input = Tensor();
    layer.leaf = Variable();
  }
  sodium_memzero(step_seed, sizeof step_seed);
  ++steps_;
  return ok_status();
}

}  // namespace tessel::secure
