// The CUDA caching allocator's bookkeeping (tensor/cuda/block_cache.h): size classes
// and the per-(stream, class) free lists, without a GPU.
#include <strata/tensor/cuda/block_cache.h>

#include <gtest/gtest.h>

#include <set>

namespace strata {
namespace {

using cuda::detail::BlockCache;
using cuda::detail::size_class;

TEST(CudaBlockCache, SizeClassesBoundTheWaste) {
  size_t prev = 0;
  for (size_t n = 1; n < (size_t(1) << 26); n = n < 4096 ? n + 1 : n + n / 7 + 1) {
    const size_t c = size_class(n);
    ASSERT_GE(c, n);
    ASSERT_EQ(c % 512, 0u) << n;
    ASSERT_LE(c, n + n / 4 + 512) << n;  // at most 25% over (plus one granule)
    ASSERT_GE(c, prev) << n;             // monotonic
    ASSERT_EQ(size_class(c), c) << n;    // a class is its own class
    prev = c;
  }
  EXPECT_EQ(size_class(1), 512u);
  EXPECT_EQ(size_class(513), 1024u);
  EXPECT_EQ(size_class(1 << 20), size_t(1) << 20);
  EXPECT_EQ(size_class((1 << 20) + 1), size_t(5) << 18);  // 1.25 MiB
}

TEST(CudaBlockCache, ReusesOnlyTheSameStreamAndClass) {
  BlockCache cache;
  int a = 0, b = 0, c = 0;
  EXPECT_EQ(cache.take(1, 512), nullptr);
  cache.put(1, 512, &a);
  cache.put(1, 1024, &b);
  cache.put(2, 512, &c);
  EXPECT_EQ(cache.cached_bytes(), 2048u);
  EXPECT_EQ(cache.cached_blocks(), 3u);
  EXPECT_EQ(cache.take(1, 2048), nullptr);
  EXPECT_EQ(cache.take(3, 512), nullptr);
  EXPECT_EQ(cache.take(1, 512), &a);
  EXPECT_EQ(cache.take(1, 512), nullptr);
  EXPECT_EQ(cache.take(2, 512), &c);
  EXPECT_EQ(cache.cached_bytes(), 1024u);
  std::set<void*> released;
  size_t released_bytes = 0;
  cache.drain([&](void* p, size_t cls) {
    released.insert(p);
    released_bytes += cls;
  });
  EXPECT_EQ(released, std::set<void*>{&b});
  EXPECT_EQ(released_bytes, 1024u);
  EXPECT_EQ(cache.cached_bytes(), 0u);
  EXPECT_EQ(cache.take(1, 1024), nullptr);
}

}  // namespace
}  // namespace strata
