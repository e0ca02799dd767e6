// Size classes shared by the caching allocators (CPU: tensor/cpu_allocator.cpp, CUDA:
// tensor/cuda/block_cache.h): a request rounds up to a class at most 25% above it, so a
// freed block serves every later request of the same class.
#pragma once
#include <bit>
#include <cstddef>

namespace strata::detail {

/// The block size a request of n > 0 bytes is served with, for a power-of-two granule g:
/// multiples of g up to 4g, then four classes per power of two (1, 1.25, 1.5, 1.75 x 2^k).
/// Every class is a multiple of g.
/// Every step is a power of two, so the rounding is a mask: the allocators compute a class
/// and its index on every tensor's allocation and release, where a division by a step the
/// compiler cannot prove a power of two costs ~30 cycles each.
constexpr size_t size_class(size_t n, size_t g) {
  if (n <= g) return g;
  const size_t p = std::bit_floor(n);  // largest power of two <= n
  const size_t step = p / 4 < g ? g : p / 4;
  return (n + step - 1) & ~(step - 1);
}

/// A dense index of class `cls` (a value of size_class(n, g)): 0..3 for g..4g, then four
/// per power of two. Classes up to 2^k map below size_class_index(2^k, g) + 1.
constexpr size_t size_class_index(size_t cls, size_t g) {
  const int lg = std::countr_zero(g);
  if (cls <= 4 * g) return (cls >> lg) - 1;
  const size_t p = std::bit_floor(cls - 1);  // cls is in (p, 2p], p >= 4g
  const int lp = std::countr_zero(p);
  const size_t j = (cls - p) >> (lp - 2);  // 1..4: (cls - p) / (p / 4)
  return 4 + 4 * size_t(lp - lg - 2) + (j - 1);
}

}  // namespace strata::detail
