// Background prefetch thread over a bounded queue.
#include "data/prefetch.h"

#include <new>
#include <system_error>

#include "support/log.h"

namespace tessel {

Prefetcher::Prefetcher(std::unique_ptr<BatchSource> source, size_t depth)
    : source_(std::move(source)), depth_(depth < 1 ? 1 : depth) {
  TESSEL_CHECK(source_ != nullptr, "Prefetcher without a source");
  consumed_ = source_->position();
  start();
}

Prefetcher::~Prefetcher() {
  stop();
}

void Prefetcher::start() {
  stopping_ = false;
  failure_.reset();
  queue_.clear();
  // Without a thread (a memory or thread limit), next() reads on the caller's thread: the same
  // batches, only without the overlap. An uncaught std::system_error here used to abort the run.
  try {
    thread_ = std::thread([this] { produce(); });
    inline_ = false;
  } catch (const std::system_error& e) {
    if (!inline_)
      log_warn("prefetch: could not start its thread ({}); reading batches on the caller's thread",
               e.what());
    inline_ = true;
  }
}

void Prefetcher::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  space_.notify_all();
  if (thread_.joinable()) thread_.join();
}

// Memory can run out in the source (a shuffled epoch order, a batch's tensors) or in the queue;
// on this thread a std::bad_alloc would end the process (std::terminate), so it becomes the
// stream's error, which next() returns once the batches queued before it are taken.
void Prefetcher::produce() {
  try {
    produce_batches();
  } catch (const std::bad_alloc&) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      failure_ = resource_exhausted("out of host memory reading the next batch");
    }
    ready_.notify_one();
  }
}

void Prefetcher::produce_batches() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      space_.wait(lock, [this] { return stopping_ || queue_.size() < depth_; });
      if (stopping_) return;
    }
    // The source is used only by this thread while it runs, so no lock is held while it works.
    Expected<Batch> batch = source_->next();
    const bool failed = !batch.ok();
    Ready ready{std::move(batch), source_->position()};
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(ready));
    }
    ready_.notify_one();
    if (failed) return;
  }
}

Expected<Batch> Prefetcher::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (inline_) {
    if (failure_) return *failure_;
    Expected<Batch> batch = source_->next();
    if (batch.ok())
      consumed_ = source_->position();
    else
      failure_ = batch.status();
    return batch;
  }
  ready_.wait(lock, [this] { return !queue_.empty() || failure_.has_value(); });
  if (queue_.empty()) return *failure_;
  Ready ready = std::move(queue_.front());
  queue_.pop_front();
  if (ready.batch.ok()) {
    consumed_ = ready.after;
  } else {
    failure_ = ready.batch.status();
  }
  lock.unlock();
  space_.notify_one();
  return std::move(ready.batch);
}

DataPosition Prefetcher::position() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return consumed_;
}

Status Prefetcher::restore(const DataPosition& position) {
  stop();
  Status status = source_->restore(position);
  if (status.ok()) {
    consumed_ = position;
  } else {
    // Carry on from what was consumed; the thread had read ahead of it.
    const Status back = source_->restore(consumed_);
    TESSEL_CHECK(back.ok(), "a source refused its own position: {}", back.to_string());
  }
  start();
  return status;
}

}  // namespace tessel
