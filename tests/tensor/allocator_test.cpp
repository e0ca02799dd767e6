// The CPU caching allocator: size classes, block reuse, exact per-category accounting,
// empty_cache, the cache limit, huge blocks, and blocks freed on other threads.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <strata/tensor/cpu_allocator.h>
#include <strata/tensor/size_class.h>
#include <strata/tensor/storage.h>

using namespace strata;

namespace {

std::unique_ptr<Storage> block(size_t nbytes) { return std::make_unique<Storage>(nbytes, kCPU); }

// Every test starts with caching on, an empty cache and the default limit.
class CpuAllocator : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv("STRATA_NO_CACHING_ALLOCATOR")) GTEST_SKIP() << "caching disabled by STRATA_NO_CACHING_ALLOCATOR";
    limit_ = cpu_cache_limit();
    set_cpu_caching(true);
    empty_cache();
  }
  void TearDown() override {
    set_cpu_cache_limit(limit_);
    set_cpu_caching(true);
  }
  size_t limit_ = 0;
};

}  // namespace

TEST(SizeClass, CoversTheRequestWithinAQuarterAndIndexesDensely) {
  constexpr size_t g = kCpuAlignment;
  std::set<size_t> indices;
  size_t expected_index = 0;
  for (size_t cls = g; cls < kCpuCacheMaxBlock; cls = detail::size_class(cls + 1, g)) {
    ASSERT_EQ(detail::size_class(cls, g), cls);  // a class is its own class
    ASSERT_EQ(cls % g, 0u);
    ASSERT_EQ(detail::size_class_index(cls, g), expected_index++) << cls;  // consecutive classes, consecutive bins
  }
  std::mt19937_64 rng(1);
  for (int i = 0; i < 100000; ++i) {
    const size_t n = 1 + rng() % (size_t(1) << (1 + rng() % 30));
    const size_t c = detail::size_class(n, g);
    ASSERT_GE(c, n);
    ASSERT_LE(c, std::max(n + n / 4, 4 * g)) << n;  // at most 25% over, beyond the smallest classes
  }
  EXPECT_EQ(detail::size_class(1, g), g);
  EXPECT_EQ(detail::size_class(65, g), 128u);
  EXPECT_EQ(detail::size_class((1 << 20) + 1, g), size_t(5) << 18);
}

TEST_F(CpuAllocator, ReusesTheBlockOfTheSameSizeClass) {
  void* p = nullptr;
  {
    auto s = block(1000);
    p = s->data();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kCpuAlignment, 0u);
  }
  const CpuAllocatorStats before = cpu_allocator_stats();
  EXPECT_EQ(before.cached_bytes, int64_t(detail::size_class(1000, kCpuAlignment)));
  auto same_class = block(1010);  // 1000 and 1010 share the 1024-byte class
  EXPECT_EQ(same_class->data(), p);
  const CpuAllocatorStats after = cpu_allocator_stats();
  EXPECT_EQ(after.cache_hits, before.cache_hits + 1);
  EXPECT_EQ(after.os_allocs, before.os_allocs);
  EXPECT_EQ(after.cached_bytes, 0);
  auto other_class = block(5000);  // another class: never the cached block of 1024
  EXPECT_NE(other_class->data(), p);
}

// The per-class OS counts (bench soak's explanation of a reserve rise): a miss counts in
// its class, a hit in none.
TEST_F(CpuAllocator, CountsOsAllocationsPerSizeClass) {
  auto count = [](int64_t cls) {
    for (const auto& [c, n] : cpu_os_allocs_by_class())
      if (c == cls) return n;
    return int64_t(0);
  };
  const int64_t c320 = count(320), c1024 = count(1024);
  {
    auto a = block(300), b = block(310);  // both 320-byte blocks, the cache holds none of them
    EXPECT_EQ(count(320), c320 + 2);
  }
  auto c = block(257);  // the cache serves it
  EXPECT_EQ(count(320), c320 + 2);
  EXPECT_EQ(count(1024), c1024);
  auto d = block(1000);
  EXPECT_EQ(count(1024), c1024 + 1);
  int64_t total = 0;
  for (const auto& [cls, n] : cpu_os_allocs_by_class()) total += n;
  EXPECT_LE(total, cpu_allocator_stats().os_allocs);  // blocks of 64 MiB and above are in no class
}

TEST_F(CpuAllocator, CategoryCountersCountRequestedBytesExactly) {
  MemoryTracker& t = cpu_memory();
  const int64_t params0 = t.stats(MemCategory::params).current, grads0 = t.stats(MemCategory::grads).current;
  {
    MemoryScope scope(MemCategory::params);
    auto a = block(1000);  // served with a 1024-byte block, charged 1000
    EXPECT_EQ(t.stats(MemCategory::params).current - params0, 1000);
    a->release();  // ZeRO-3 frees a gathered parameter: the bytes leave the category at once
    EXPECT_EQ(t.stats(MemCategory::params).current, params0);
    a->reallocate(MemCategory::grads);
    EXPECT_EQ(t.stats(MemCategory::grads).current - grads0, 1000);
    auto b = block(1000);  // the block a released went to a's reallocation: b is fresh
    EXPECT_NE(a->data(), b->data());
    EXPECT_EQ(t.stats(MemCategory::params).current - params0, 1000);
  }
  EXPECT_EQ(t.stats(MemCategory::params).current, params0);
  EXPECT_EQ(t.stats(MemCategory::grads).current, grads0);
  EXPECT_GT(cpu_allocator_stats().cached_bytes, 0);  // cached bytes are no category's
}

TEST_F(CpuAllocator, EmptyCacheReturnsTheCachedBytesToTheOs) {
  const CpuAllocatorStats s0 = cpu_allocator_stats();
  const std::vector<size_t> sizes = {100, 4096, 70000, size_t(3) << 20};
  int64_t classes = 0;
  {
    std::vector<std::unique_ptr<Storage>> live;
    for (size_t n : sizes) {
      live.push_back(block(n));
      classes += int64_t(detail::size_class(n, kCpuAlignment));
    }
    EXPECT_EQ(cpu_allocator_stats().allocated_bytes - s0.allocated_bytes, classes);
  }
  const CpuAllocatorStats s1 = cpu_allocator_stats();
  EXPECT_EQ(s1.allocated_bytes, s0.allocated_bytes);
  EXPECT_EQ(s1.cached_bytes, classes);
  EXPECT_EQ(s1.cached_blocks, int64_t(sizes.size()));
  empty_cache();
  const CpuAllocatorStats s2 = cpu_allocator_stats();
  EXPECT_EQ(s2.cached_bytes, 0);
  EXPECT_EQ(s2.cached_blocks, 0);
  EXPECT_EQ(s1.reserved_bytes - s2.reserved_bytes, classes);
  EXPECT_EQ(s2.os_frees - s1.os_frees, int64_t(sizes.size()));
}

TEST_F(CpuAllocator, OffLimitAndHugeBlocksGoStraightToTheOs) {
  const size_t huge = kCpuCacheMaxBlock + 1;
  block(huge).reset();
  EXPECT_EQ(cpu_allocator_stats().cached_bytes, 0);

  set_cpu_cache_limit(4096);
  block(4096).reset();  // fits the limit
  block(8192).reset();  // would pass it
  EXPECT_EQ(cpu_allocator_stats().cached_bytes, 4096);

  set_cpu_caching(false);  // empties the cache; frees go to the OS
  EXPECT_FALSE(cpu_caching_enabled());
  EXPECT_EQ(cpu_allocator_stats().cached_bytes, 0);
  const int64_t frees = cpu_allocator_stats().os_frees;
  block(4096).reset();
  EXPECT_EQ(cpu_allocator_stats().cached_bytes, 0);
  EXPECT_EQ(cpu_allocator_stats().os_frees, frees + 1);
}

#if defined(__linux__) && !defined(__SANITIZE_ADDRESS__)
// The VmFlags line of the mapping of /proc/self/smaps that holds p ("" if none does).
std::string vm_flags_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find('-') < line.find(' ')) {
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST_F(CpuAllocator, LargeBlocksAreAdvisedAsHugePagesAndReturnOnlyTheirOwnPages) {
  // three large blocks cut one after another, each filled; the middle one returned to the
  // OS (caching off) leaves its neighbours' bytes and pages alone
  const size_t sizes[] = {kHugeMinBlock, size_t(3) << 20, size_t(1) << 20};
  std::vector<std::unique_ptr<Storage>> live;
  for (size_t i = 0; i < 3; ++i) {
    live.push_back(block(sizes[i]));
    ASSERT_EQ(reinterpret_cast<uintptr_t>(live[i]->data()) % 4096, 0u) << i;
    std::memset(live[i]->data(), int(i + 1), sizes[i]);
    EXPECT_NE(vm_flags_of(live[i]->data()).find(" hg"), std::string::npos) << vm_flags_of(live[i]->data());
  }
  EXPECT_EQ(vm_flags_of(block(4096)->data()).find(" hg"), std::string::npos);  // small blocks: malloc's
  set_cpu_caching(false);
  const int64_t frees = cpu_allocator_stats().os_frees;
  live[1].reset();
  EXPECT_EQ(cpu_allocator_stats().os_frees, frees + 1);
  for (size_t i : {size_t(0), size_t(2)}) {
    const auto* b = static_cast<const unsigned char*>(live[i]->data());
    for (size_t j = 0; j < sizes[i]; j += 4093) ASSERT_EQ(b[j], i + 1) << i;
    std::memset(live[i]->data(), 7, sizes[i]);
  }
  // a block over a whole 64 MiB chunk gets a mapping of its own (its size need not be whole
  // pages), uncached: released, its pages are gone
  const size_t big_size = kCpuCacheMaxBlock + 100;
  auto big = block(big_size);
  std::memset(big->data(), 1, big_size);
  EXPECT_NE(vm_flags_of(big->data()).find(" hg"), std::string::npos);
  const char* last = static_cast<const char*>(big->data()) + big_size - 1;
  const char* past = static_cast<const char*>(big->data()) + (big_size + 4095) / 4096 * 4096;
  EXPECT_NE(vm_flags_of(last).find(" hg"), std::string::npos);
  big.reset();
  EXPECT_EQ(vm_flags_of(last), "");
  EXPECT_EQ(vm_flags_of(past), "");  // nothing of the over-allocated mapping is left behind
}
#endif

TEST_F(CpuAllocator, BlocksFreedOnAnotherThreadAreReused) {
  auto s = block(50000);
  void* p = s->data();
  std::thread([s = std::move(s)]() mutable { s.reset(); }).join();
  EXPECT_EQ(cpu_allocator_stats().cached_bytes, int64_t(detail::size_class(50000, kCpuAlignment)));
  EXPECT_EQ(block(50000)->data(), p);
}

TEST_F(CpuAllocator, ThreadsAllocatingAndFreeingEachOthersBlocksKeepDataAndCountersExact) {
  const CpuAllocatorStats s0 = cpu_allocator_stats();
  const int64_t other0 = cpu_memory().stats(MemCategory::other).current;
  constexpr int kThreads = 4, kRounds = 2000;
  // Each thread fills its blocks with its id, checks them, and hands every other block to
  // the next thread to free; a block in two hands at once would fail a check.
  std::vector<std::vector<std::unique_ptr<Storage>>> handoff(kThreads);
  std::vector<std::mutex> mu(kThreads);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      MemoryScope scope(MemCategory::other);
      std::mt19937 rng{unsigned(t)};
      for (int r = 0; r < kRounds; ++r) {
        const size_t n = 1 + rng() % 20000;
        auto s = block(n);
        std::memset(s->data(), t + 1, n);
        std::this_thread::yield();
        const auto* bytes = static_cast<const unsigned char*>(s->data());
        for (size_t i = 0; i < n; i += 97)
          if (bytes[i] != t + 1) ++bad;
        if (r % 2) {
          std::lock_guard<std::mutex> lock(mu[(t + 1) % kThreads]);
          handoff[(t + 1) % kThreads].push_back(std::move(s));
        }
        std::vector<std::unique_ptr<Storage>> mine;
        {
          std::lock_guard<std::mutex> lock(mu[t]);
          mine.swap(handoff[t]);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  handoff.clear();
  EXPECT_EQ(bad.load(), 0);
  const CpuAllocatorStats s1 = cpu_allocator_stats();
  EXPECT_EQ(s1.allocated_bytes, s0.allocated_bytes);
  EXPECT_EQ(cpu_memory().stats(MemCategory::other).current, other0);
  EXPECT_EQ(s1.requests - s0.requests, kThreads * kRounds);
  EXPECT_GT(s1.cache_hits - s0.cache_hits, kThreads * kRounds / 2);  // most requests reuse a block
  EXPECT_EQ(s1.reserved_bytes - s1.cached_bytes, s1.allocated_bytes);
}
