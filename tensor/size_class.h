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
constexpr size_t size_class(size_t n, size_t g) {
  if (n <= g) return g;
  const size_t p = std::bit_floor(n);  // largest power of two <= n
  const size_t step = p / 4 < g ? g : p / 4;
  return (n + step - 1) / step * step;
}

/// A dense index of class `cls` (a value of size_class(n, g)): 0..3 for g..4g, then four
/// per power of two. Classes up to 2^k map below size_class_index(2^k, g) + 1.
constexpr size_t size_class_index(size_t cls, size_t g) {
  if (cls <= 4 * g) return cls / g - 1;
  const size_t p = std::bit_floor(cls - 1);  // cls is in (p, 2p], p >= 4g
  const size_t j = (cls - p) / (p / 4);      // 1..4
  return 4 + 4 * size_t(std::countr_zero(p) - std::countr_zero(4 * g)) + (j - 1);
}

}  // namespace strata::detail
