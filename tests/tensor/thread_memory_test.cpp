// ThreadMemoryScope: one thread's share of the allocator's counters (what each local rank
// allocates and frees when ranks are threads sharing cpu_memory()).
#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include <strata/core/thread_memory.h>
#include <strata/tensor/storage.h>

using namespace strata;

namespace {

std::unique_ptr<Storage> block(size_t nbytes, MemCategory c) {
  MemoryScope scope(c);
  return std::make_unique<Storage>(nbytes, kCPU);
}

TEST(ThreadMemory, CountsThisThreadsAllocationsFreesAndRechargesByCategory) {
  MemoryTracker mine;
  std::unique_ptr<Storage> before = block(1000, MemCategory::grads);  // not counted: no scope yet
  {
    ThreadMemoryScope scope(mine);
    auto a = block(4096, MemCategory::grads);
    auto b = block(512, MemCategory::comm);
    EXPECT_EQ(mine.stats(MemCategory::grads).current, 4096);
    EXPECT_EQ(mine.stats(MemCategory::comm).current, 512);
    a->recharge(MemCategory::params);
    EXPECT_EQ(mine.stats(MemCategory::grads).current, 0);
    EXPECT_EQ(mine.stats(MemCategory::grads).peak, 4096);
    EXPECT_EQ(mine.stats(MemCategory::params).current, 4096);
    a->release();
    EXPECT_EQ(mine.stats(MemCategory::params).current, 0);
    a->reallocate(MemCategory::comm);
    EXPECT_EQ(mine.stats(MemCategory::comm).current, 4096 + 512);
    mine.reset_peaks();
    b.reset();
    EXPECT_EQ(mine.stats(MemCategory::comm).current, 4096);
    EXPECT_EQ(mine.stats(MemCategory::comm).peak, 4096 + 512);
    // another thread's allocations are not this scope's
    std::thread([] { auto c = block(8192, MemCategory::comm); }).join();
    EXPECT_EQ(mine.stats(MemCategory::comm).peak, 4096 + 512);
    a.reset();
    EXPECT_EQ(mine.stats(MemCategory::comm).current, 0);
  }
  // after the scope nothing more is counted
  auto d = block(256, MemCategory::grads);
  EXPECT_EQ(mine.stats(MemCategory::grads).current, 0);
  EXPECT_EQ(mine.total_current(), 0);
}

TEST(ThreadMemory, ScopesNestAndThreadsHaveTheirOwn) {
  MemoryTracker outer, inner, other;
  ThreadMemoryScope so(outer);
  auto a = block(100, MemCategory::grads);
  {
    ThreadMemoryScope si(inner);
    auto b = block(200, MemCategory::grads);
    EXPECT_EQ(inner.stats(MemCategory::grads).current, 200);
    EXPECT_EQ(outer.stats(MemCategory::grads).current, 100) << "only the innermost scope counts";
  }
  std::thread([&] {
    ThreadMemoryScope st(other);
    auto c = block(300, MemCategory::grads);
    EXPECT_EQ(other.stats(MemCategory::grads).current, 300);
  }).join();
  EXPECT_EQ(other.stats(MemCategory::grads).peak, 300);
  EXPECT_EQ(other.stats(MemCategory::grads).current, 0);
  EXPECT_EQ(outer.stats(MemCategory::grads).current, 100);
}

}  // namespace
