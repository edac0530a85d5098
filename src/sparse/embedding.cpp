// Row-sparse embedding gradients and lazy optimizers (see embedding.h). Kernels: gather_rows,
// sgd_segments and adamw_segments (kernels/sparse.tile), embedding_grad (kernels/embedding.tile).
#include "sparse/embedding.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "autograd/functional.h"
#include "nn/init.h"
#include "ops/kernel_cache.h"
#include "ops/kernel_util.h"

namespace tessel::sparse {

IdGroups group_ids(const std::vector<int64_t>& ids, int64_t v) {
  // Positions sorted by id: one stable counting pass per byte of v - 1, low byte first.
  const size_t n = ids.size();
  std::vector<uint32_t> order(n), next(n);
  for (size_t i = 0; i < n; ++i)
    order[i] = static_cast<uint32_t>(i);
  for (int shift = 0;
       shift < 64 && (static_cast<uint64_t>(std::max<int64_t>(v - 1, 0)) >> shift) != 0;
       shift += 8) {
    std::array<size_t, 257> start{};
    for (size_t i = 0; i < n; ++i)
      ++start[((static_cast<uint64_t>(ids[i]) >> shift) & 255) + 1];
    for (size_t d = 1; d < start.size(); ++d)
      start[d] += start[d - 1];
    for (uint32_t p : order)
      next[start[(static_cast<uint64_t>(ids[p]) >> shift) & 255]++] = p;
    order.swap(next);
  }
  IdGroups g;
  g.positions.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t p = order[i];
    if (g.unique.empty() || g.unique.back() != ids[p]) {
      g.unique.push_back(ids[p]);
      g.starts.push_back(static_cast<int64_t>(i));
    }
    g.positions[i] = p;
  }
  g.starts.push_back(static_cast<int64_t>(n));
  return g;
}

namespace {

// The kernels take the row width as a compile-time size (kernels/sparse.tile).
ops::KernelParams row_params(const SparseEmbedding& emb) {
  return {{"W", std::to_string(emb.embedding_dim())}};
}

}  // namespace

Expected<SparseEmbedding> SparseEmbedding::create(int64_t num_embeddings, int64_t embedding_dim,
                                                  Device* device, Pcg32& rng) {
  TESSEL_ASSIGN_OR_RETURN(Tensor w, Tensor::empty({num_embeddings, embedding_dim}, DType::kF32));
  TESSEL_TRY(nn::normal(w, rng, 0.0, 1.0));
  TESSEL_ASSIGN_OR_RETURN(Tensor on_device, w.to(device));
  return over(on_device);
}

Expected<SparseEmbedding> SparseEmbedding::over(Tensor weight) {
  if (weight.rank() != 2 || weight.dtype() != DType::kF32 || !weight.is_contiguous())
    return invalid_argument("SparseEmbedding: needs a contiguous f32 table [V, C], got {} {}",
                            dtype_name(weight.dtype()), shape_string(weight.shape()));
  SparseEmbedding e;
  e.weight_ = std::move(weight);
  return e;
}

Expected<Variable> SparseEmbedding::forward(const Tensor& ids) {
  if (ids.dtype() != DType::kI64)
    return invalid_argument("SparseEmbedding: ids must be i64, got {}", dtype_name(ids.dtype()));
  TESSEL_ASSIGN_OR_RETURN(std::vector<int64_t> host, ids.to_vector<int64_t>());
  const int64_t v = num_embeddings();
  for (size_t i = 0; i < host.size(); ++i)
    if (host[i] < 0 || host[i] >= v)
      return out_of_range("SparseEmbedding: id {} at position {} is outside the table of {} rows",
                          host[i], i, v);
  const IdGroups groups = group_ids(host, v);
  Device* device = weight_.device();
  const int64_t u = static_cast<int64_t>(groups.unique.size()), r = ids.numel(),
                c = embedding_dim();
  TESSEL_ASSIGN_OR_RETURN(indices_, Tensor::from_vector(groups.unique, {u}, device));
  TESSEL_ASSIGN_OR_RETURN(starts_, Tensor::from_vector(groups.starts, {u + 1}, device));
  TESSEL_ASSIGN_OR_RETURN(positions_, Tensor::from_vector(groups.positions, {r}, device));
  Shape shape = ids.shape();
  shape.push_back(c);
  TESSEL_ASSIGN_OR_RETURN(Tensor y, Tensor::empty(shape, DType::kF32, device));
  if (r > 0) {
    TESSEL_ASSIGN_OR_RETURN(Tensor flat_ids, ops::contiguous_on_device(ids));
    TESSEL_TRY(
        ops::launch_kernel("gather_rows", row_params(*this),
                           {weight_, ops::View{flat_ids, {r}, {1}}, ops::View{y, {r, c}, {c, 1}}}));
  }
  output_ = Variable(y, /*requires_grad=*/true);
  return output_;
}

Expected<Tensor> SparseEmbedding::grad_values() const {
  if (!output_.defined() || !output_.grad().defined()) return Tensor();
  const Tensor& g = output_.grad();
  const int64_t r = positions_.numel();
  if (g.is_contiguous()) return g.reshape({r, embedding_dim()});
  TESSEL_ASSIGN_OR_RETURN(Tensor dense, ops::contiguous_on_device(g));
  return dense.reshape({r, embedding_dim()});
}

Expected<Tensor> SparseEmbedding::grad_rows() const {
  TESSEL_ASSIGN_OR_RETURN(Tensor d, grad_values());
  if (!d.defined()) return Tensor();
  // kernels/embedding.tile's embedding_grad into zeros [U, C], row u for id u.
  const int64_t u = indices_.numel();
  TESSEL_ASSIGN_OR_RETURN(Tensor g,
                          Tensor::zeros({u, embedding_dim()}, DType::kF32, weight_.device()));
  if (g.numel() == 0) return g;
  std::vector<int64_t> rows(static_cast<size_t>(u));
  for (int64_t i = 0; i < u; ++i)
    rows[i] = i;
  TESSEL_ASSIGN_OR_RETURN(Tensor row_ids, Tensor::from_vector(rows, {u}, weight_.device()));
  TESSEL_TRY(ops::launch_kernel("embedding_grad", row_params(*this),
                                {d, row_ids, starts_, positions_, g}));
  return g;
}

void SparseEmbedding::zero_grad() {
  // The output leaf is made anew by each forward and its gradient belongs to no flat buffer:
  // dropping it leaves the gradient undefined until the next backward reaches a new one
  // (Variable::zero_grad would keep a zero gradient of the old batch).
  output_ = Variable();
}

Expected<LazySgd> LazySgd::create(const LazySgdOptions& options) {
  if (options.lr < 0 || options.weight_decay < 0)
    return invalid_argument("LazySgd: lr {} and weight_decay {} must be >= 0", options.lr,
                            options.weight_decay);
  LazySgd s;
  s.options_ = options;
  return s;
}

Status LazySgd::step(SparseEmbedding& emb) {
  TESSEL_ASSIGN_OR_RETURN(Tensor d, emb.grad_values());
  if (!d.defined() || d.numel() == 0) return ok_status();
  return ops::launch_kernel("sgd_segments", row_params(emb),
                            {emb.weight(), emb.grad_indices(), emb.grad_starts(),
                             emb.grad_positions(), d, options_.lr, options_.weight_decay});
}

Expected<LazyAdamW> LazyAdamW::create(const SparseEmbedding& emb, const LazyAdamWOptions& options) {
  const LazyAdamWOptions& o = options;
  if (o.lr < 0 || o.eps < 0 || o.weight_decay < 0 || o.beta1 < 0 || o.beta1 >= 1 || o.beta2 < 0 ||
      o.beta2 >= 1)
    return invalid_argument(
        "LazyAdamW: needs lr, eps, weight_decay >= 0 and betas in [0, 1), got lr {} betas ({}, "
        "{}) eps {} weight_decay {}",
        o.lr, o.beta1, o.beta2, o.eps, o.weight_decay);
  LazyAdamW a;
  a.options_ = options;
  TESSEL_ASSIGN_OR_RETURN(a.m_,
                          Tensor::zeros(emb.weight().shape(), DType::kF32, emb.weight().device()));
  TESSEL_ASSIGN_OR_RETURN(a.v_,
                          Tensor::zeros(emb.weight().shape(), DType::kF32, emb.weight().device()));
  return a;
}

Status LazyAdamW::step(SparseEmbedding& emb) {
  TESSEL_ASSIGN_OR_RETURN(Tensor d, emb.grad_values());
  ++step_count_;
  if (!d.defined() || d.numel() == 0) return ok_status();
  const LazyAdamWOptions& o = options_;
  // The bias corrections of the global step, in double, as optim/optimizer.cpp's AdamW.
  const double t = static_cast<double>(step_count_);
  const double step_size = o.lr / (1 - std::pow(o.beta1, t));
  const double bc2_sqrt = std::sqrt(1 - std::pow(o.beta2, t));
  return ops::launch_kernel(
      "adamw_segments", row_params(emb),
      {emb.weight(), emb.grad_indices(), emb.grad_starts(), emb.grad_positions(), d, m_, v_, o.lr,
       o.beta1, o.beta2, o.eps, o.weight_decay, step_size, bc2_sqrt});
}

}  // namespace tessel::sparse
