// DDP buckets and ZeRO 1/2/3 (see data_parallel.h).
#include "parallel/data_parallel.h"

#include <algorithm>
#include <cmath>

#include "ops/ops.h"
#include "optim/clip.h"

namespace tessel::parallel {

using autograd::VariableState;

namespace {
// A tensor's first element in host memory (create() checks that the device is the CPU).
void* address(const Tensor& t) {
  return static_cast<char*>(t.storage()->host_address()) + t.offset_bytes();
}

// Parameter `e`'s place in whole flat buffers per group, shaped as the parameter.
Expected<Tensor> entry_view(const std::vector<Tensor>& full, const nn::FlatParameters::Entry& e) {
  TESSEL_ASSIGN_OR_RETURN(Tensor v, full[e.group].slice(0, e.offset, e.offset + e.numel));
  return v.reshape(e.parameter->shape);
}

// Waits for every call, also after one failed, and returns the first error: the calls write
// into buffers that an early return would free while the others still write them.
Status wait_all(const std::vector<dist::Work>& works) {
  Status first;
  for (const auto& w : works) {
    Status s = w.wait();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}
}  // namespace

struct DataParallel::Bucket {
  size_t group = 0;
  DType dtype = DType::kF32;
  dist::DataType comm_type = dist::DataType::kFloat32;
  int64_t begin = 0, end = 0;   // elements of the group's flat buffers
  int64_t shard = 0;            // elements each rank owns: (end - begin) / world
  std::vector<size_t> entries;  // indices into params_.entries()

  // This pass.
  int pending = 0;  // gradients not yet ready
  bool ready = false;
  bool launched = false;
  bool launched_in_backward = false;
  bool into_incoming = false;  // the reduction lands in `incoming`, to be added to shard_grads
  std::optional<dist::Work> reduction;
  Tensor grad_buffer;  // ZeRO-2/3: the bucket's full gradients until its reduce-scatter is done

  // ZeRO.
  Tensor shard_grads;   // this rank's averaged gradients
  Tensor incoming;      // a later accumulation pass's reduced part (ZeRO-2/3)
  Tensor shard_values;  // this rank's parameters (1/2: a view of the flat values; 3: its own)
  std::optional<dist::Work> gather;
  Tensor gathered;  // ZeRO-3: the full values while in use
  bool gathered_ready = false;

  std::unique_ptr<nn::FlatParameters> view;  // what the bucket's optimizer updates
  std::unique_ptr<optim::Optimizer> optimizer;

  char* values_at(const nn::FlatParameters& p) const {
    return static_cast<char*>(address(p.groups()[group].values)) +
           begin * int64_t(dtype_size(dtype));
  }
  char* grads_at(const nn::FlatParameters& p) const {
    return static_cast<char*>(address(p.groups()[group].grads)) +
           begin * int64_t(dtype_size(dtype));
  }
};

// The optimizer the trainer sees: one step() runs the per-bucket optimizers in launch order.
class DataParallel::BucketedOptimizer : public optim::Optimizer {
 public:
  BucketedOptimizer(DataParallel* dp, const nn::FlatParameters& params, double lr)
      : Optimizer(params, lr), dp_(dp) {}
  Status step() override {
    TESSEL_TRY(dp_->step(lr(), step_count()));
    set_step_count(step_count() + 1);
    return ok_status();
  }
  std::vector<std::pair<std::string, Tensor>> named_state() const override {
    std::vector<std::pair<std::string, Tensor>> out;
    if (dp_->options_.zero_stage != 0) return out;  // sharded: no rank holds a whole tensor
    for (const auto& b : dp_->buckets_)
      for (auto& named : b->optimizer->named_state())
        out.push_back(std::move(named));
    return out;
  }

 private:
  DataParallel* dp_;
};

DataParallel::DataParallel(nn::FlatParameters& params, dist::ProcessGroup& group,
                           DataParallelOptions options)
    : params_(params), group_(&group), options_(options) {}

DataParallel::~DataParallel() {
  // A collective still queued reads this object's buffers and writes into them (a bucket's
  // gradients, its shard, ZeRO-3's gathered values) on the communicator's progress thread. The
  // buffers go back to the caching allocator below, which hands the memory to the next tensor
  // of that size while the exchange would still write it: wait for every such call first (ZeRO-3
  // always has one, the gather that end_step starts for the next forward). Its error, if any,
  // no longer matters; a broken communicator fails its queued calls at once.
  for (const auto& b : buckets_) {
    if (b->reduction) (void)b->reduction->wait();
    if (b->gather) (void)b->gather->wait();
  }
  for (const auto& e : params_.entries()) {
    if (!e.parameter->variable.defined()) continue;
    e.parameter->variable.state()->on_grad_ready = nullptr;
    e.parameter->variable.state()->on_use = nullptr;
  }
}

optim::Optimizer& DataParallel::optimizer() {
  return *optimizer_;
}

const optim::Optimizer& DataParallel::optimizer() const {
  return *optimizer_;
}

Expected<std::unique_ptr<DataParallel>> DataParallel::create(nn::FlatParameters& params,
                                                             dist::ProcessGroup& group,
                                                             OptimizerFactory make_optimizer,
                                                             DataParallelOptions options) {
  if (options.zero_stage < 0 || options.zero_stage > 3)
    return invalid_argument("ZeRO stage must be 0 (DDP), 1, 2 or 3, got {}", options.zero_stage);
  if (options.bucket_cap_bytes <= 0 || options.first_bucket_bytes <= 0)
    return invalid_argument("bucket sizes must be > 0, got cap {} and first bucket {} bytes",
                            options.bucket_cap_bytes, options.first_bucket_bytes);
  if (options.zero_stage > 0 && nn::FlatParameters::kAlignElements % group.size() != 0)
    return invalid_argument(
        "ZeRO shards each bucket into equal parts of whole 1024-element rows: the number of "
        "ranks must divide 1024, got {}",
        group.size());
  if (params.device()->kind() != DeviceKind::kCpu)
    return unimplemented("data-parallel training runs on host memory (device cpu), not on {}",
                         params.device()->id());
  std::unique_ptr<DataParallel> dp(new DataParallel(params, group, options));
  TESSEL_TRY(dp->build(make_optimizer));
  return dp;
}

Status DataParallel::build(const OptimizerFactory& make_optimizer) {
  const int n = group_->size(), r = group_->rank();
  const int stage = options_.zero_stage;
  const auto& entries = params_.entries();

  // Every rank starts from rank 0's parameters.
  for (const auto& g : params_.groups()) {
    TESSEL_ASSIGN_OR_RETURN(dist::DataType type, dist::ProcessGroup::comm_dtype(g.dtype));
    TESSEL_ASSIGN_OR_RETURN(dist::Work w,
                            group_->broadcast(address(g.values), g.values.numel(), type, 0));
    Status s = w.wait();
    if (!s.ok()) return s.with_context("broadcasting the parameters from rank 0");
  }

  // Buckets: reverse parameter order, groups last to first.
  int64_t cap = options_.first_bucket_bytes;
  for (size_t gi = params_.groups().size(); gi-- > 0;) {
    const auto& g = params_.groups()[gi];
    const int64_t elem = int64_t(dtype_size(g.dtype));
    TESSEL_ASSIGN_OR_RETURN(dist::DataType type, dist::ProcessGroup::comm_dtype(g.dtype));
    std::vector<size_t> in_group;
    for (size_t i = entries.size(); i-- > 0;)
      if (entries[i].group == gi) in_group.push_back(i);
    int64_t end = g.values.numel();
    auto bucket = std::make_unique<Bucket>();
    for (size_t k = 0; k < in_group.size(); ++k) {
      const auto& e = entries[in_group[k]];
      bucket->entries.push_back(in_group[k]);
      const bool last = k + 1 == in_group.size();
      if ((end - e.offset) * elem >= cap || last) {
        bucket->group = gi;
        bucket->dtype = g.dtype;
        bucket->comm_type = type;
        bucket->begin = last ? 0 : e.offset;
        bucket->end = end;
        bucket->shard = (bucket->end - bucket->begin) / n;
        end = bucket->begin;
        buckets_.push_back(std::move(bucket));
        bucket = std::make_unique<Bucket>();
        cap = options_.bucket_cap_bytes;
      }
    }
  }

  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    Bucket& b = *buckets_[bi];
    const auto& g = params_.groups()[b.group];
    b.pending = int(b.entries.size());
    std::vector<nn::FlatParameters::Entry> view_entries;
    if (stage == 0) {
      for (size_t i : b.entries) {
        nn::FlatParameters::Entry e = entries[i];
        e.group = 0;
        e.offset -= b.begin;
        view_entries.push_back(e);
      }
      std::reverse(view_entries.begin(), view_entries.end());
      TESSEL_ASSIGN_OR_RETURN(Tensor values, g.values.slice(0, b.begin, b.end));
      TESSEL_ASSIGN_OR_RETURN(Tensor grads, g.grads.slice(0, b.begin, b.end));
      b.view = std::make_unique<nn::FlatParameters>(nn::FlatParameters::over(
          params_.device(), {{b.dtype, values, grads}}, std::move(view_entries)));
    } else {
      const int64_t lo = b.begin + r * b.shard;
      TESSEL_ASSIGN_OR_RETURN(b.shard_grads, Tensor::zeros({b.shard}, b.dtype, params_.device()));
      TESSEL_ASSIGN_OR_RETURN(Tensor mine, g.values.slice(0, lo, lo + b.shard));
      if (stage == 3) {
        TESSEL_ASSIGN_OR_RETURN(b.shard_values,
                                Tensor::empty({b.shard}, b.dtype, params_.device()));
        TESSEL_TRY(b.shard_values.copy_from(mine));
      } else {
        b.shard_values = mine;
      }
      b.view = std::make_unique<nn::FlatParameters>(
          nn::FlatParameters::over(params_.device(), {{b.dtype, b.shard_values, b.shard_grads}}));
    }
    TESSEL_ASSIGN_OR_RETURN(b.optimizer, make_optimizer(*b.view));
    memory_.optimizer_bytes += b.optimizer->state_bytes();
    memory_.gradient_bytes +=
        (stage >= 1 ? b.shard : b.end - b.begin) * int64_t(dtype_size(b.dtype));
    memory_.parameter_bytes +=
        (stage == 3 ? b.shard : b.end - b.begin) * int64_t(dtype_size(b.dtype));
    if (stage == 1) memory_.gradient_bytes += (b.end - b.begin) * int64_t(dtype_size(b.dtype));
  }
  // ZeRO-1 keeps the full gradients (accumulation happens there) as well as its shard: counted
  // above. ZeRO-2 and 3 free them, 3 the values too.
  if (stage >= 2) params_.release_grads();
  if (stage == 3) params_.release_values();

  for (size_t bi = 0; bi < buckets_.size(); ++bi)
    for (size_t ei : buckets_[bi]->entries) {
      const std::shared_ptr<VariableState>& state = entries[ei].parameter->variable.state();
      state->on_grad_ready = [this, bi, ei](VariableState& leaf) {
        return grad_ready(bi, ei, leaf);
      };
      if (stage == 3) state->on_use = [this, bi](VariableState&) { return ensure_gathered(bi); };
    }
  const double lr = buckets_.empty() ? 0.0 : buckets_.front()->optimizer->lr();
  optimizer_ = std::make_unique<BucketedOptimizer>(this, params_, lr);
  if (stage == 3 && !buckets_.empty()) TESSEL_TRY(launch_gather(*buckets_.back()));
  return ok_status();
}

Status DataParallel::broadcast_buffers(nn::Module& model) {
  for (auto& [name, buffer] : model.named_buffers()) {
    if (!buffer->tensor.defined()) continue;
    // A module may have replaced the tensor by a view of something else: broadcast a
    // contiguous copy and put it back.
    TESSEL_ASSIGN_OR_RETURN(Tensor owned, Tensor::empty(buffer->tensor.shape(),
                                                        buffer->tensor.dtype(), params_.device()));
    TESSEL_TRY(owned.copy_from(buffer->tensor));
    TESSEL_ASSIGN_OR_RETURN(dist::DataType type, dist::ProcessGroup::comm_dtype(owned.dtype()));
    TESSEL_ASSIGN_OR_RETURN(dist::Work w,
                            group_->broadcast(address(owned), size_t(owned.numel()), type, 0));
    Status s = wait(w);
    if (!s.ok()) return s.with_context("broadcasting buffer '{}' from rank 0", name);
    TESSEL_TRY(buffer->tensor.copy_from(owned));
  }
  return ok_status();
}

Status DataParallel::wait(const dist::Work& work) {
  const Clock::time_point start = Clock::now();
  Status s = work.wait();
  stats_.exposed_comm_ms += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  return s;
}

Status DataParallel::grad_ready(size_t bucket, size_t entry, VariableState& leaf) {
  Bucket& b = *buckets_[bucket];
  const int stage = options_.zero_stage;
  if (stage >= 2) {  // move the gradient into the bucket's buffer and free autograd's
    const auto& e = params_.entries()[entry];
    if (!b.grad_buffer.defined()) {
      // Buffers whose reduce-scatter is done go back first, so that the allocator can hand
      // their memory to this one: at most the buckets in flight hold full gradients.
      for (size_t i = 0; i < next_launch_; ++i)
        if (buckets_[i]->reduction && buckets_[i]->reduction->done())
          buckets_[i]->grad_buffer = Tensor();
      TESSEL_ASSIGN_OR_RETURN(b.grad_buffer,
                              Tensor::zeros({b.end - b.begin}, b.dtype, params_.device()));
    }
    TESSEL_ASSIGN_OR_RETURN(
        Tensor place, b.grad_buffer.slice(0, e.offset - b.begin, e.offset - b.begin + e.numel));
    TESSEL_ASSIGN_OR_RETURN(place, place.reshape(e.parameter->shape));
    TESSEL_TRY(place.copy_from(leaf.grad));
    leaf.grad = Tensor();
  } else if (!sync_) {
    return ok_status();  // accumulate locally; nothing to communicate on inner steps
  }
  if (--b.pending > 0) return ok_status();
  b.ready = true;
  if (stage == 3) {  // the bucket's values are no longer needed by this rank
    for (size_t i : b.entries)
      params_.entries()[i].parameter->variable.set_data(Tensor());
    b.gathered = Tensor();
    b.gathered_ready = false;
  }
  return options_.overlap ? launch_ready_buckets() : ok_status();
}

Status DataParallel::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_]->ready)
    TESSEL_TRY(launch_reduction(*buckets_[next_launch_++]));
  return ok_status();
}

Status DataParallel::set_batch_share(int64_t local_rows, int64_t global_rows) {
  if (global_rows < 1 || local_rows < 0 || local_rows > global_rows)
    return invalid_argument("a rank's share of the global batch must be 0 to {} rows, got {}",
                            global_rows, local_rows);
  gradient_weight_ = double(world_size()) * double(local_rows) / double(global_rows);
  return ok_status();
}

Status DataParallel::with_each_bucket_gathered(const std::function<Status(Bucket&)>& use) {
  for (size_t bi = buckets_.size(); bi-- > 0;) {
    Bucket& b = *buckets_[bi];
    TESSEL_TRY(ensure_gathered(bi));
    TESSEL_TRY(use(b));
    for (size_t i : b.entries)
      params_.entries()[i].parameter->variable.set_data(Tensor());
    b.gathered = Tensor();
    b.gathered_ready = false;
  }
  return ok_status();
}

Status DataParallel::pass_without_rows() {
  if (options_.zero_stage == 3)
    TESSEL_TRY(with_each_bucket_gathered([](Bucket&) { return ok_status(); }));
  return finish_backward();  // every bucket counts as ready with the gradient it has: zero
}

Status DataParallel::check_mirror(const nn::FlatParameters& device_params) const {
  const auto& mine = params_.groups();
  const auto& theirs = device_params.groups();
  bool same = mine.size() == theirs.size();
  for (size_t g = 0; same && g < mine.size(); ++g)
    same = mine[g].dtype == theirs[g].dtype;
  std::vector<int64_t> lengths(mine.size(), 0);  // the buckets cover each group
  for (const auto& b : buckets_)
    if (b->group < lengths.size()) lengths[b->group] = std::max(lengths[b->group], b->end);
  for (size_t g = 0; same && g < mine.size(); ++g)
    same = theirs[g].values.defined() && theirs[g].grads.defined() &&
           theirs[g].values.numel() == lengths[g];
  if (!same)
    return invalid_argument(
        "the parameters on {} are not laid out as the data-parallel ones (the "
        "same model, FlatParameters::create on that device)",
        device_params.device()->id());
  return ok_status();
}

Status DataParallel::copy_values_to(nn::FlatParameters& device_params) {
  TESSEL_TRY(check_mirror(device_params));
  if (options_.zero_stage == 3) {
    return with_each_bucket_gathered([&](Bucket& b) -> Status {
      TESSEL_ASSIGN_OR_RETURN(Tensor to,
                              device_params.groups()[b.group].values.slice(0, b.begin, b.end));
      return to.copy_from(b.gathered);
    });
  }
  for (size_t g = 0; g < params_.groups().size(); ++g) {
    Tensor to = device_params.groups()[g].values;  // a handle on the device buffer
    TESSEL_TRY(to.copy_from(params_.groups()[g].values));
  }
  return ok_status();
}

Status DataParallel::finish_backward_from(nn::FlatParameters& device_params) {
  TESSEL_TRY(check_mirror(device_params));
  const int stage = options_.zero_stage;
  for (auto& bp : buckets_) {
    Bucket& b = *bp;
    TESSEL_ASSIGN_OR_RETURN(Tensor from,
                            device_params.groups()[b.group].grads.slice(0, b.begin, b.end));
    if (stage >= 2) {
      // A copy even when the device is the CPU too: the device gradients are zeroed below.
      TESSEL_ASSIGN_OR_RETURN(b.grad_buffer,
                              Tensor::empty({b.end - b.begin}, b.dtype, params_.device()));
      TESSEL_TRY(b.grad_buffer.copy_from(from));
    } else if (sync_) {
      TESSEL_ASSIGN_OR_RETURN(Tensor to, params_.groups()[b.group].grads.slice(0, b.begin, b.end));
      TESSEL_TRY(to.copy_from(from));
    }
  }
  if (stage >= 2) TESSEL_TRY(device_params.zero_grad());
  return finish_backward();
}

Status DataParallel::weigh(const Tensor& grads, DType dtype) const {
  if (gradient_weight_ == 1.0) return ok_status();
  const nn::FlatParameters range =
      nn::FlatParameters::over(params_.device(), {{dtype, Tensor(), grads}});
  return optim::scale_grads(range, gradient_weight_);
}

Status DataParallel::launch_reduction(Bucket& b) {
  const int64_t count = b.end - b.begin;
  Expected<dist::Work> work = internal_error("unreachable");
  if (options_.zero_stage < 2) {
    TESSEL_ASSIGN_OR_RETURN(Tensor grads, params_.groups()[b.group].grads.slice(0, b.begin, b.end));
    TESSEL_TRY(weigh(grads, b.dtype));
  }
  if (options_.zero_stage == 0) {
    work = group_->all_reduce(b.grads_at(params_), size_t(count), b.comm_type, dist::RedOp::kAvg);
  } else {
    if (options_.zero_stage >= 2 && !b.grad_buffer.defined()) {  // no gradient reached it
      TESSEL_ASSIGN_OR_RETURN(b.grad_buffer, Tensor::zeros({count}, b.dtype, params_.device()));
    }
    if (options_.zero_stage >= 2) TESSEL_TRY(weigh(b.grad_buffer, b.dtype));
    const void* send = options_.zero_stage == 1 ? b.grads_at(params_) : address(b.grad_buffer);
    b.into_incoming = options_.zero_stage >= 2 && passes_since_step_ > 0;
    if (b.into_incoming && !b.incoming.defined()) {
      TESSEL_ASSIGN_OR_RETURN(b.incoming, Tensor::empty({b.shard}, b.dtype, params_.device()));
    }
    void* recv = b.into_incoming ? address(b.incoming) : address(b.shard_grads);
    work = group_->reduce_scatter(send, recv, size_t(b.shard), b.comm_type, dist::RedOp::kAvg);
  }
  if (!work.ok()) return work.status().with_context("queueing a gradient bucket's reduction");
  b.reduction = *work;
  b.launched = true;
  b.launched_in_backward = in_pass_ || b.launched_in_backward;
  return ok_status();
}

Status DataParallel::wait_reduction(Bucket& b) {
  if (!b.reduction) return ok_status();
  Status s = wait(*b.reduction);
  b.reduction.reset();
  if (!s.ok()) return s.with_context("reducing gradients");
  b.grad_buffer = Tensor();
  if (b.into_incoming) {
    TESSEL_ASSIGN_OR_RETURN(Tensor sum, ops::add(b.shard_grads, b.incoming));
    TESSEL_TRY(b.shard_grads.copy_from(sum));
    b.into_incoming = false;
  }
  return ok_status();
}

Status DataParallel::finish_backward() {
  const int stage = options_.zero_stage;
  auto end_pass = [&] {
    for (auto& b : buckets_) {
      b->pending = int(b->entries.size());
      b->ready = false;
    }
    in_pass_ = true;
  };
  if (stage < 2 && !sync_) {
    end_pass();
    return ok_status();
  }
  // Events at the end of backward: which collectives were already queued, and done.
  for (size_t i = 0; i < next_launch_; ++i) {
    stats_.launched_during_backward += 1;
    if (buckets_[i]->reduction && buckets_[i]->reduction->done())
      stats_.finished_during_backward += 1;
  }
  in_pass_ = false;
  for (auto& b : buckets_) {
    b->ready = true;
    if (stage == 3 && b->gathered_ready) {
      for (size_t i : b->entries)
        params_.entries()[i].parameter->variable.set_data(Tensor());
      b->gathered = Tensor();
      b->gathered_ready = false;
    }
  }
  TESSEL_TRY(launch_ready_buckets());
  if (stage >= 2 && !sync_) {  // an inner accumulation step: reduce it into the shards now
    for (auto& b : buckets_)
      TESSEL_TRY(wait_reduction(*b));
    next_launch_ = 0;
    for (auto& b : buckets_)
      b->launched = false;
  }
  if (stage >= 2) ++passes_since_step_;
  end_pass();
  return ok_status();
}

Status DataParallel::step(double lr, int64_t step_count) {
  const int stage = options_.zero_stage;
  for (auto& bp : buckets_) {
    Bucket& b = *bp;
    TESSEL_TRY(wait_reduction(b));
    b.optimizer->set_lr(lr);
    b.optimizer->set_step_count(step_count);
    TESSEL_TRY(b.optimizer->step());
    if (stage == 1 || stage == 2) {
      Expected<dist::Work> w = group_->all_gather(address(b.shard_values), b.values_at(params_),
                                                  size_t(b.shard), b.comm_type);
      if (!w.ok()) return w.status().with_context("queueing a parameter all-gather");
      b.gather = *w;
    }
  }
  for (auto& b : buckets_) {
    if (!b->gather || stage == 3) continue;
    Status s = wait(*b->gather);
    b->gather.reset();
    if (!s.ok()) return s.with_context("gathering the updated parameters");
  }
  return end_step();
}

Status DataParallel::skip_step() {
  TESSEL_TRY(wait_gradients());
  return end_step();  // the next pass's reductions overwrite the shards (passes_since_step_ = 0)
}

std::vector<Tensor> DataParallel::local_gradients() const {
  std::vector<Tensor> out;
  if (options_.zero_stage == 0) {
    for (const auto& g : params_.groups())
      out.push_back(g.grads);
  } else {
    for (const auto& b : buckets_)
      out.push_back(b->shard_grads);
  }
  return out;
}

Expected<double> DataParallel::clip_grad_norm(double max_norm) {
  if (!(max_norm > 0))
    return invalid_argument("clip_grad_norm: max_norm must be > 0, got {}", max_norm);
  TESSEL_TRY(wait_gradients());
  if (options_.zero_stage == 0) return optim::clip_grad_norm(params_, max_norm);
  std::vector<nn::FlatParameters::Group> groups;
  for (const auto& b : buckets_)
    groups.push_back({b->dtype, Tensor(), b->shard_grads});
  const nn::FlatParameters shards = nn::FlatParameters::over(params_.device(), std::move(groups));
  TESSEL_ASSIGN_OR_RETURN(double local_norm, optim::global_grad_norm(shards));
  double sum_squares = local_norm * local_norm;
  TESSEL_ASSIGN_OR_RETURN(
      dist::Work w,
      group_->all_reduce(&sum_squares, 1, dist::DataType::kFloat64, dist::RedOp::kSum));
  Status s = wait(w);
  if (!s.ok()) return s.with_context("all-reducing the gradient norm");
  const double norm = std::sqrt(sum_squares);
  const double coefficient = max_norm / (norm + 1e-6);
  if (coefficient < 1.0) TESSEL_TRY(optim::scale_grads(shards, coefficient));
  return norm;
}

Expected<std::vector<Tensor>> DataParallel::zeroed_flat(std::optional<DType> dtype) const {
  const auto& groups = params_.groups();
  std::vector<int64_t> lengths(groups.size(), 0);
  for (const auto& b : buckets_)
    lengths[b->group] = std::max(lengths[b->group], b->end);
  std::vector<Tensor> full(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    TESSEL_ASSIGN_OR_RETURN(
        full[g], Tensor::zeros({lengths[g]}, dtype.value_or(groups[g].dtype), params_.device()));
  }
  return full;
}

Expected<std::vector<Tensor>> DataParallel::gather_flat(
    const std::function<Tensor(const Bucket&)>& shard_of, std::optional<DType> dtype) {
  TESSEL_ASSIGN_OR_RETURN(std::vector<Tensor> full, zeroed_flat(dtype));
  std::vector<dist::Work> works;
  Status queued;
  for (const auto& b : buckets_) {
    const Tensor shard = shard_of(*b);
    Expected<dist::DataType> type = dist::ProcessGroup::comm_dtype(shard.dtype());
    if (!type.ok()) {
      queued = type.status();
      break;
    }
    char* into =
        static_cast<char*>(address(full[b->group])) + b->begin * int64_t(dtype_size(shard.dtype()));
    Expected<dist::Work> w = group_->all_gather(address(shard), into, size_t(b->shard), *type);
    if (!w.ok()) {
      queued = w.status();
      break;
    }
    works.push_back(std::move(*w));
  }
  const Clock::time_point start = Clock::now();
  Status s = wait_all(works);
  stats_.exposed_comm_ms += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (s.ok()) s = queued;
  if (!s.ok()) return s.with_context("gathering shards for a checkpoint");
  return full;
}

Expected<DataParallel::NamedTensorList> DataParallel::gather_parameters() {
  if (options_.zero_stage < 3) return params_.named_tensors();  // every rank holds them all
  TESSEL_ASSIGN_OR_RETURN(
      std::vector<Tensor> full,
      gather_flat([](const Bucket& b) { return b.shard_values; }, std::nullopt));
  NamedTensorList out;
  for (const auto& e : params_.entries()) {
    TESSEL_ASSIGN_OR_RETURN(Tensor v, entry_view(full, e));
    out.emplace_back(e.name, v);
  }
  return out;
}

Expected<DataParallel::NamedTensorList> DataParallel::gather_optimizer_state() {
  if (options_.zero_stage == 0) return optimizer_->named_state();  // bucket views of full state
  if (buckets_.empty()) return NamedTensorList{};
  const std::vector<std::string>& names = buckets_.front()->optimizer->state_names();
  std::vector<std::vector<Tensor>> full;  // [state][group]
  for (size_t s = 0; s < names.size(); ++s) {
    TESSEL_ASSIGN_OR_RETURN(
        std::vector<Tensor> state,
        gather_flat([s](const Bucket& b) { return b.optimizer->flat_state(s, 0); }, DType::kF32));
    full.push_back(std::move(state));
  }
  NamedTensorList out;  // Optimizer::named_state's order: parameters, then their states
  for (const auto& e : params_.entries())
    for (size_t s = 0; s < names.size(); ++s) {
      TESSEL_ASSIGN_OR_RETURN(Tensor v, entry_view(full[s], e));
      out.emplace_back(e.name + "." + names[s], v);
    }
  return out;
}

Expected<std::vector<Tensor>> DataParallel::flat_from(const TensorLookup& take,
                                                      const std::string& suffix,
                                                      std::optional<DType> dtype) const {
  TESSEL_ASSIGN_OR_RETURN(std::vector<Tensor> full, zeroed_flat(dtype));
  for (const auto& e : params_.entries()) {
    TESSEL_ASSIGN_OR_RETURN(Tensor saved, take(e.name + suffix));
    TESSEL_ASSIGN_OR_RETURN(Tensor place, entry_view(full, e));
    Status s = place.copy_from(saved);
    if (!s.ok()) return s.with_context("tensor '{}{}'", e.name, suffix);
  }
  return full;
}

Status DataParallel::drop_gathered() {
  for (auto& b : buckets_) {
    if (b->gather) {
      Status s = wait(*b->gather);
      b->gather.reset();
      if (!s.ok()) return s.with_context("gathering parameters");
    }
    if (!b->gathered.defined() && !b->gathered_ready) continue;
    for (size_t i : b->entries)
      params_.entries()[i].parameter->variable.set_data(Tensor());
    b->gathered = Tensor();
    b->gathered_ready = false;
  }
  return ok_status();
}

Status DataParallel::load_parameters(const TensorLookup& take) {
  if (options_.zero_stage < 3) {  // the shards (ZeRO 1/2) are views of the whole values
    for (const auto& e : params_.entries()) {
      TESSEL_ASSIGN_OR_RETURN(Tensor saved, take(e.name));
      Tensor target = e.parameter->variable.data();
      Status s = target.copy_from(saved);
      if (!s.ok()) return s.with_context("tensor '{}'", e.name);
    }
    return ok_status();
  }
  TESSEL_TRY(drop_gathered());
  TESSEL_ASSIGN_OR_RETURN(std::vector<Tensor> full, flat_from(take, "", std::nullopt));
  const int64_t r = group_->rank();
  for (auto& b : buckets_) {
    const int64_t lo = b->begin + r * b->shard;
    TESSEL_ASSIGN_OR_RETURN(Tensor mine, full[b->group].slice(0, lo, lo + b->shard));
    TESSEL_TRY(b->shard_values.copy_from(mine));
  }
  // As at the end of a step: the first bucket forward reads starts gathering.
  if (!buckets_.empty()) TESSEL_TRY(launch_gather(*buckets_.back()));
  return ok_status();
}

Status DataParallel::load_optimizer_state(const TensorLookup& take) {
  if (options_.zero_stage == 0) {
    for (auto& [name, tensor] : optimizer_->named_state()) {
      TESSEL_ASSIGN_OR_RETURN(Tensor saved, take(name));
      Status s = tensor.copy_from(saved);
      if (!s.ok()) return s.with_context("tensor '{}'", name);
    }
    return ok_status();
  }
  if (buckets_.empty()) return ok_status();
  const std::vector<std::string>& names = buckets_.front()->optimizer->state_names();
  const int64_t r = group_->rank();
  for (size_t s = 0; s < names.size(); ++s) {
    TESSEL_ASSIGN_OR_RETURN(std::vector<Tensor> full, flat_from(take, "." + names[s], DType::kF32));
    for (auto& b : buckets_) {
      const int64_t lo = b->begin + r * b->shard;
      TESSEL_ASSIGN_OR_RETURN(Tensor mine, full[b->group].slice(0, lo, lo + b->shard));
      Tensor target = b->optimizer->flat_state(s, 0);
      TESSEL_TRY(target.copy_from(mine));
    }
  }
  return ok_status();
}

Status DataParallel::end_step() {
  const int stage = options_.zero_stage;
  for (auto& b : buckets_) {
    b->launched = false;
    b->launched_in_backward = false;
  }
  next_launch_ = 0;
  passes_since_step_ = 0;
  stats_.buckets = int(buckets_.size());
  last_stats_ = stats_;
  stats_ = StepStats{};
  in_pass_ = true;
  // ZeRO-3: the first bucket forward reads starts gathering now, during the step's tail.
  if (stage == 3 && !buckets_.empty() && !buckets_.back()->gathered_ready &&
      !buckets_.back()->gather)
    TESSEL_TRY(launch_gather(*buckets_.back()));
  return ok_status();
}

Status DataParallel::launch_gather(Bucket& b) {
  TESSEL_ASSIGN_OR_RETURN(b.gathered, Tensor::empty({b.end - b.begin}, b.dtype, params_.device()));
  Expected<dist::Work> w = group_->all_gather(address(b.shard_values), address(b.gathered),
                                              size_t(b.shard), b.comm_type);
  if (!w.ok()) return w.status().with_context("queueing a parameter all-gather");
  b.gather = *w;
  return ok_status();
}

Status DataParallel::ensure_gathered(size_t bucket) {
  Bucket& b = *buckets_[bucket];
  if (b.gathered_ready) return ok_status();
  if (!b.gather) TESSEL_TRY(launch_gather(b));
  Status s = wait(*b.gather);
  b.gather.reset();
  if (!s.ok()) return s.with_context("gathering parameters");
  for (size_t i : b.entries) {
    const auto& e = params_.entries()[i];
    TESSEL_ASSIGN_OR_RETURN(Tensor v,
                            b.gathered.slice(0, e.offset - b.begin, e.offset - b.begin + e.numel));
    TESSEL_ASSIGN_OR_RETURN(v, v.reshape(e.parameter->shape));
    e.parameter->variable.set_data(v);
  }
  b.gathered_ready = true;
  // Prefetch: forward reads the buckets from last to first.
  if (bucket > 0) {
    Bucket& next = *buckets_[bucket - 1];
    if (!next.gathered_ready && !next.gather) TESSEL_TRY(launch_gather(next));
  }
  return ok_status();
}

Status DataParallel::wait_gradients() {
  for (auto& b : buckets_)
    TESSEL_TRY(wait_reduction(*b));
  return ok_status();
}

std::vector<std::pair<int64_t, int64_t>> DataParallel::bucket_ranges() const {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& b : buckets_)
    out.emplace_back(b->begin, b->end);
  return out;
}

bool DataParallel::bucket_launched(size_t b) const {
  return buckets_.at(b)->launched;
}

bool DataParallel::bucket_reduced(size_t b) const {
  const Bucket& bucket = *buckets_.at(b);
  return bucket.launched && (!bucket.reduction || bucket.reduction->done());
}

Expected<double> DataParallel::time_collectives_alone() {
  // Scratch buffers of the largest bucket, so that the model's own buffers are untouched.
  int64_t largest = 0;
  for (const auto& b : buckets_)
    largest = std::max(largest, (b->end - b->begin) * int64_t(dtype_size(b->dtype)));
  TESSEL_ASSIGN_OR_RETURN(Tensor full, Tensor::zeros({largest}, DType::kU8, params_.device()));
  TESSEL_ASSIGN_OR_RETURN(Tensor part, Tensor::zeros({largest}, DType::kU8, params_.device()));
  TESSEL_TRY(group_->barrier());
  const Clock::time_point start = Clock::now();
  std::vector<dist::Work> works;
  auto queue = [&](Expected<dist::Work> w) -> Status {
    if (!w.ok()) return w.status();
    works.push_back(*w);
    return ok_status();
  };
  const int stage = options_.zero_stage;
  Status queued;
  for (const auto& b : buckets_) {
    const size_t count = size_t(b->end - b->begin);
    if (stage == 3)  // the forward gather
      queued =
          queue(group_->all_gather(address(part), address(full), size_t(b->shard), b->comm_type));
    if (!queued.ok()) break;
    if (stage == 0) {
      queued = queue(group_->all_reduce(address(full), count, b->comm_type, dist::RedOp::kAvg));
    } else {
      queued = queue(group_->reduce_scatter(address(full), address(part), size_t(b->shard),
                                            b->comm_type, dist::RedOp::kAvg));
      if (queued.ok() && stage < 3)
        queued =
            queue(group_->all_gather(address(part), address(full), size_t(b->shard), b->comm_type));
    }
    if (!queued.ok()) break;
  }
  Status s = wait_all(works);  // all of them: they use `full` and `part`
  TESSEL_TRY(s);
  TESSEL_TRY(queued);
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace tessel::parallel
