// A process-wide tap on every CachingAllocator's allocate and release, so the memory plan
// (plan/memory_plan.h) can record a training step: which blocks were handed out and given back,
// in order, with the bytes asked for and the block size they got.
//
//   set_allocation_observer(&record, &trace);   // every allocate/release now calls record
//   ... run a step ...
//   set_allocation_observer(nullptr, nullptr);
//
// The observer runs on the thread that allocates or releases, under that allocator's lock, so the
// events of one allocator arrive in the order the allocator saw them; it must not allocate through
// a CachingAllocator itself. Without an observer (the default) the cost is one atomic load.
#pragma once

#include <cstddef>

namespace tessel {

class CachingAllocator;

struct AllocationEvent {
  const CachingAllocator* allocator = nullptr;
  const void* handle = nullptr;
  size_t requested = 0;  // the bytes asked for (allocate) or that had been asked for (release)
  size_t block = 0;      // after rounding to the size class (CachingAllocator::round_size)
  bool allocate = true;  // false: release
};

using AllocationObserver = void (*)(const AllocationEvent& event, void* context);

// Installs `observer` (null: none). Set it while no other thread is between an allocation and its
// observation, e.g. around a recording made on one thread.
void set_allocation_observer(AllocationObserver observer, void* context);

}  // namespace tessel
