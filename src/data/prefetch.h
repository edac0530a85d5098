// Background prefetch: a thread of its own runs a BatchSource ahead of the consumer and keeps up
// to `depth` ready batches in a bounded queue, so reading and converting the next batch overlaps
// the training step.
//
//   TESSEL_ASSIGN_OR_RETURN(auto source, ImageBatches::make(train, options));
//   Prefetcher batches(std::move(source), /*depth=*/4);
//   TESSEL_ASSIGN_OR_RETURN(Batch b, batches.next());    // the same batches, in the same order
//   DataPosition p = batches.position();                 // after the batches handed out so far
//
// An error from the source comes out of next() on the consumer's side, in order, and again from
// every later next(); the thread stops producing after it. position() counts only what the
// consumer took, not what the thread read ahead, so it is what a checkpoint must record.
// restore() stops the thread, discards what it read ahead, moves the source and starts again.
// The destructor stops and joins the thread (never waits on a full queue). When no thread can be
// started (a memory or thread limit), next() reads the source on the caller's thread instead.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "data/batches.h"

namespace tessel {

class Prefetcher : public BatchSource {
 public:
  explicit Prefetcher(std::unique_ptr<BatchSource> source, size_t depth = 4);
  ~Prefetcher() override;
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  Expected<Batch> next() override;
  DataPosition position() const override;
  Status restore(const DataPosition& position) override;

 private:
  struct Ready {
    Expected<Batch> batch;
    DataPosition after;  // the source's position once this batch was taken
  };
  void start();
  void stop();
  void produce();
  void produce_batches();

  std::unique_ptr<BatchSource> source_;
  const size_t depth_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;  // a batch was queued, or the producer ended
  std::condition_variable space_;  // a batch was taken, or stopping
  std::deque<Ready> queue_;
  bool stopping_ = false;
  // That error, repeated by later next() calls; or the producer's, once it ran out of memory.
  std::optional<Status> failure_;
  DataPosition consumed_;
  std::thread thread_;
  bool inline_ = false;  // no thread could be started: next() reads the source itself
};

}  // namespace tessel
