// Row-sparse embedding gradients and lazy optimizers (see embedding.h). Kernels: embedding
// (gather rows), sgd_rows and adamw_rows (kernels/sparse.tile).
#include "sparse/embedding.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "autograd/functional.h"
#include "nn/init.h"
#include "ops/kernel_cache.h"
#include "sparse/sparse_ops.h"

namespace tessel::sparse {

void dedupe_ids(const std::vector<int64_t>& ids, int64_t v, std::vector<int64_t>* unique,
                std::vector<int64_t>* local) {
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
  unique->clear();
  local->assign(n, 0);
  for (uint32_t p : order) {
    if (unique->empty() || unique->back() != ids[p]) unique->push_back(ids[p]);
    (*local)[p] = static_cast<int64_t>(unique->size()) - 1;
  }
}

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
  std::vector<int64_t> unique, local;
  dedupe_ids(host, v, &unique, &local);
  Device* device = weight_.device();
  const int64_t u = static_cast<int64_t>(unique.size()), c = embedding_dim();
  TESSEL_ASSIGN_OR_RETURN(indices_, Tensor::from_vector(unique, {u}, device));
  TESSEL_ASSIGN_OR_RETURN(Tensor local_ids, Tensor::from_vector(local, ids.shape(), device));
  // The leaf the gradient goes to: [U, C] in shape only (a zero-stride view of one element),
  // since embedding_rows reads the table itself.
  TESSEL_ASSIGN_OR_RETURN(Tensor one, Tensor::zeros({1, 1}, DType::kF32, device));
  TESSEL_ASSIGN_OR_RETURN(Tensor placeholder, one.expand({u, c}));
  rows_ = Variable(placeholder, /*requires_grad=*/true);
  TESSEL_ASSIGN_OR_RETURN(const ops::OpDef* op, find_sparse_op("embedding_rows"));
  return autograd::apply(*op, {Variable(weight_), rows_, Variable(ids), Variable(local_ids)});
}

void SparseEmbedding::zero_grad() {
  // The rows' leaf is made anew by each forward and its gradient belongs to no flat buffer:
  // dropping the leaf leaves grad_rows() undefined until the next backward reaches it
  // (Variable::zero_grad would keep a zero gradient of the old rows).
  rows_ = Variable();
}

namespace {

// The lazy steps' kernels take the row width as a compile-time size (kernels/sparse.tile).
ops::KernelParams row_params(const SparseEmbedding& emb) {
  return {{"W", std::to_string(emb.embedding_dim())}};
}

}  // namespace

Expected<LazySgd> LazySgd::create(const LazySgdOptions& options) {
  if (options.lr < 0 || options.weight_decay < 0)
    return invalid_argument("LazySgd: lr {} and weight_decay {} must be >= 0", options.lr,
                            options.weight_decay);
  LazySgd s;
  s.options_ = options;
  return s;
}

Status LazySgd::step(SparseEmbedding& emb) {
  const Tensor& g = emb.grad_rows();
  if (!g.defined() || g.numel() == 0) return ok_status();
  return ops::launch_kernel(
      "sgd_rows", row_params(emb),
      {emb.weight(), emb.grad_indices(), g, options_.lr, options_.weight_decay});
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
  const Tensor& g = emb.grad_rows();
  ++step_count_;
  if (!g.defined() || g.numel() == 0) return ok_status();
  const LazyAdamWOptions& o = options_;
  // The bias corrections of the global step, in double, as optim/optimizer.cpp's AdamW.
  const double t = static_cast<double>(step_count_);
  const double step_size = o.lr / (1 - std::pow(o.beta1, t));
  const double bc2_sqrt = std::sqrt(1 - std::pow(o.beta2, t));
  return ops::launch_kernel("adamw_rows", row_params(emb),
                            {emb.weight(), emb.grad_indices(), g, m_, v_, o.lr, o.beta1, o.beta2,
                             o.eps, o.weight_decay, step_size, bc2_sqrt});
}

}  // namespace tessel::sparse
