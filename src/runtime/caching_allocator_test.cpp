// Caching allocator: size classes against an independently built class list, statistics after
// known allocation sequences, reuse, the cache limit, emptying, the out-of-memory retry, and
// concurrent use. The raw allocator is a fake that counts what it was asked to do.
#include "runtime/caching_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <vector>

namespace tessel {
namespace {

// malloc-backed raw allocator with a byte budget; counts live blocks so a test can see leaks.
struct FakeDevice {
  size_t budget = SIZE_MAX;
  size_t live_bytes = 0;
  int live_blocks = 0;
  int raw_allocs = 0;
  int raw_frees = 0;

  RawAllocator raw() {
    return RawAllocator{[this](size_t bytes) -> Expected<DeviceBuffer> {
                          if (live_bytes + bytes > budget)
                            return resource_exhausted("fake device is full");
                          live_bytes += bytes;
                          ++live_blocks;
                          ++raw_allocs;
                          return DeviceBuffer{std::malloc(bytes), bytes};
                        },
                        [this](DeviceBuffer b) {
                          live_bytes -= b.bytes;
                          --live_blocks;
                          ++raw_frees;
                          std::free(b.handle);
                        }};
  }
};

TEST(CachingAllocator, RoundSizeIsTheSmallestClassThatFits) {
  // The classes, built by listing them: 256, then 4 evenly spaced sizes per power of two.
  std::vector<size_t> classes = {256};
  for (size_t power = 256; power < (size_t{1} << 40); power *= 2) {
    for (size_t j = 1; j <= 4; ++j)
      classes.push_back(power + j * power / 4);
  }
  auto expected = [&](size_t bytes) {
    return *std::lower_bound(classes.begin(), classes.end(), bytes);
  };
  for (size_t bytes = 0; bytes <= 70000; ++bytes) {
    ASSERT_EQ(CachingAllocator::round_size(bytes), expected(bytes)) << bytes;
  }
  for (size_t bytes :
       {size_t{1} << 20, (size_t{1} << 20) + 1, size_t{3} << 29, (size_t{5} << 30) + 7}) {
    EXPECT_EQ(CachingAllocator::round_size(bytes), expected(bytes)) << bytes;
  }
  EXPECT_EQ(CachingAllocator::round_size(1000), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(1025), 1280u);
}

TEST(CachingAllocator, StatsFollowAKnownSequence) {
  FakeDevice fake;
  CachingAllocator alloc("fake", fake.raw());

  DeviceBuffer a = *alloc.allocate(1000);  // class 1024
  DeviceBuffer b = *alloc.allocate(3000);  // class 3072
  EXPECT_EQ(a.bytes, 1024u);
  EXPECT_EQ(b.bytes, 3072u);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.current_bytes, 4096u);
  EXPECT_EQ(s.requested_bytes, 4000u);
  EXPECT_EQ(s.peak_bytes, 4096u);
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.allocations, 2);
  EXPECT_EQ(s.raw_allocations, 2);
  EXPECT_EQ(s.cache_hits, 0);

  alloc.release(a);
  s = alloc.stats();
  EXPECT_EQ(s.current_bytes, 3072u);
  EXPECT_EQ(s.requested_bytes, 3000u);
  EXPECT_EQ(s.cached_bytes, 1024u);
  EXPECT_EQ(s.reserved_bytes, 4096u);
  EXPECT_EQ(s.peak_bytes, 4096u);
  EXPECT_EQ(fake.raw_frees, 0);

  DeviceBuffer c = *alloc.allocate(900);  // same class: the cached block comes back
  EXPECT_EQ(c.handle, a.handle);
  DeviceBuffer d = *alloc.allocate(5000);  // class 5120, new
  s = alloc.stats();
  EXPECT_EQ(s.cache_hits, 1);
  EXPECT_EQ(s.raw_allocations, 3);
  EXPECT_EQ(s.current_bytes, 1024u + 3072u + 5120u);
  EXPECT_EQ(s.peak_bytes, 1024u + 3072u + 5120u);
  EXPECT_EQ(s.cached_bytes, 0u);

  alloc.release(b);
  alloc.release(c);
  alloc.release(d);
  s = alloc.stats();
  EXPECT_EQ(s.current_bytes, 0u);
  EXPECT_EQ(s.requested_bytes, 0u);
  EXPECT_EQ(s.cached_bytes, 9216u);
  EXPECT_EQ(s.peak_bytes, 9216u);
  EXPECT_EQ(s.releases, 4);
  EXPECT_EQ(fake.live_blocks, 3);

  alloc.reset_peak();
  EXPECT_EQ(alloc.stats().peak_bytes, 0u);
  alloc.empty_cache();
  s = alloc.stats();
  EXPECT_EQ(s.cached_bytes, 0u);
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.raw_frees, 3);
  EXPECT_EQ(fake.live_blocks, 0);
  EXPECT_EQ(fake.live_bytes, 0u);
}

TEST(CachingAllocator, ALargerCachedBlockUpToTwiceTheClassIsReused) {
  FakeDevice fake;
  CachingAllocator alloc("fake", fake.raw());
  DeviceBuffer big = *alloc.allocate(1000);  // class 1024
  DeviceBuffer mid = *alloc.allocate(700);   // class 768
  DeviceBuffer own = *alloc.allocate(600);   // class 640
  alloc.release(big);
  alloc.release(mid);
  alloc.release(own);
  ASSERT_EQ(fake.raw_allocs, 3);

  // Its own class first, then the smallest larger class within twice its own.
  DeviceBuffer a = *alloc.allocate(600);
  EXPECT_EQ(a.handle, own.handle);
  EXPECT_EQ(a.bytes, 640u);
  DeviceBuffer b = *alloc.allocate(520);  // class 640: none left; 768 before 1024
  EXPECT_EQ(b.handle, mid.handle);
  EXPECT_EQ(b.bytes, 768u);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.current_bytes, 640u + 768u);  // blocks as handed out, not as asked for
  EXPECT_EQ(s.requested_bytes, 1120u);
  EXPECT_EQ(s.cached_bytes, 1024u);
  EXPECT_EQ(s.cache_hits, 2);

  // 1024 is more than twice class 384, so a request of 300 gets a new block...
  DeviceBuffer c = *alloc.allocate(300);
  EXPECT_NE(c.handle, big.handle);
  EXPECT_EQ(c.bytes, 320u);
  EXPECT_EQ(fake.raw_allocs, 4);
  // ...and one of class 512 takes it.
  DeviceBuffer d = *alloc.allocate(500);
  EXPECT_EQ(d.handle, big.handle);
  EXPECT_EQ(d.bytes, 1024u);
  EXPECT_EQ(alloc.stats().cached_bytes, 0u);

  // A block goes back to the free list of its own size, whatever it was asked for.
  alloc.release(d);
  DeviceBuffer e = *alloc.allocate(1024);
  EXPECT_EQ(e.handle, big.handle);
  for (DeviceBuffer x : {a, b, c, e})
    alloc.release(x);
  EXPECT_EQ(alloc.stats().current_bytes, 0u);
  EXPECT_EQ(alloc.stats().requested_bytes, 0u);
  EXPECT_EQ(fake.raw_allocs, 4);
}

TEST(CachingAllocator, ZeroBytesGetsARealBlock) {
  FakeDevice fake;
  CachingAllocator alloc("fake", fake.raw());
  DeviceBuffer z = *alloc.allocate(0);
  EXPECT_NE(z.handle, nullptr);
  EXPECT_EQ(z.bytes, CachingAllocator::kMinBlockBytes);
  alloc.release(z);
}

TEST(CachingAllocator, CacheLimitFreesWhatDoesNotFit) {
  FakeDevice fake;
  CachingAllocator alloc("fake", fake.raw(), /*max_cached_bytes=*/2048);
  std::vector<DeviceBuffer> blocks;
  for (int i = 0; i < 3; ++i)
    blocks.push_back(*alloc.allocate(1024));
  for (DeviceBuffer b : blocks)
    alloc.release(b);
  EXPECT_EQ(alloc.stats().cached_bytes, 2048u);
  EXPECT_EQ(fake.raw_frees, 1);
  EXPECT_EQ(fake.live_blocks, 2);
}

TEST(CachingAllocator, OutOfMemoryEmptiesTheCacheAndRetries) {
  FakeDevice fake;
  fake.budget = 4096;
  CachingAllocator alloc("fake:0", fake.raw());
  DeviceBuffer a = *alloc.allocate(3072);
  alloc.release(a);  // cached: the fake now has 1024 bytes left
  // Class 1280: more than the fake has left, and the cached 3072 is over twice its class.
  Expected<DeviceBuffer> b = alloc.allocate(1280);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(fake.raw_frees, 1);
  EXPECT_EQ(alloc.stats().cached_bytes, 0u);

  Expected<DeviceBuffer> too_big = alloc.allocate(4000);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), Code::kResourceExhausted);
  EXPECT_EQ(too_big.status().message(),
            "fake:0: cannot allocate 4.0 KiB (1.2 KiB in use, 0 B cached): fake device is full");
  alloc.release(*b);
}

TEST(CachingAllocator, DestructorFreesTheCache) {
  FakeDevice fake;
  {
    CachingAllocator alloc("fake", fake.raw());
    alloc.release(*alloc.allocate(100));
    alloc.release(*alloc.allocate(10000));
    EXPECT_EQ(fake.live_blocks, 2);
  }
  EXPECT_EQ(fake.live_blocks, 0);
  EXPECT_EQ(fake.raw_frees, 2);
}

TEST(CachingAllocator, ConcurrentUseKeepsCountsConsistent) {
  FakeDevice fake;
  // The fake is not thread-safe; the allocator calls it under its own lock.
  CachingAllocator alloc("fake", fake.raw());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&alloc, t] {
      std::vector<DeviceBuffer> held;
      for (int i = 0; i < 2000; ++i) {
        held.push_back(*alloc.allocate(static_cast<size_t>(64 * (1 + (i * 7 + t) % 50))));
        if (held.size() > 8) {
          alloc.release(held.front());
          held.erase(held.begin());
        }
      }
      for (DeviceBuffer b : held)
        alloc.release(b);
    });
  }
  for (std::thread& t : threads)
    t.join();
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.allocations, 8000);
  EXPECT_EQ(s.releases, 8000);
  EXPECT_EQ(s.current_bytes, 0u);
  EXPECT_EQ(s.cache_hits + s.raw_allocations, 8000);
  EXPECT_EQ(s.cached_bytes, fake.live_bytes);
  // At most 9 blocks per thread are held at once, the largest (3200 bytes) in a 3584-byte class.
  EXPECT_GT(s.peak_bytes, 0u);
  EXPECT_LE(s.peak_bytes, 4u * 9u * 3584u);
  EXPECT_GT(s.cache_hits, 7000);  // 50 sizes, 9 live per thread: nearly everything is reused
}

TEST(CachingAllocatorDeathTest, ReleasingAForeignBufferIsABug) {
  FakeDevice fake;
  CachingAllocator alloc("fake", fake.raw());
  int not_ours = 0;
  EXPECT_DEATH(alloc.release(DeviceBuffer{&not_ours, 256}), "did not hand out");
}

}  // namespace
}  // namespace tessel
