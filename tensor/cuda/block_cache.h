// The bookkeeping of the CUDA caching allocator, free of CUDA calls so the CPU tests
// cover it: request sizes round up to size classes (quarter-octave steps, at most 25%
// over the request), and freed blocks wait in per-(stream, size class) free lists for
// the next request of that class on that stream. Not thread-safe; the allocator locks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include <strata/tensor/size_class.h>

namespace strata::cuda::detail {

inline constexpr size_t kMinBlock = 512;  // bytes; also the alignment of every class

/// The block size a request of n > 0 bytes is served with: 512-byte granules below
/// 2 KiB, then four classes per power of two (1, 1.25, 1.5, 1.75 x 2^k).
constexpr size_t size_class(size_t n) { return strata::detail::size_class(n, kMinBlock); }

/// Free device blocks keyed by (stream, size class).
class BlockCache {
 public:
  using StreamId = uintptr_t;

  /// A cached block of class `cls` freed on `stream`, removed from the cache; nullptr if none.
  void* take(StreamId stream, size_t cls) {
    auto it = free_.find({stream, cls});
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    bytes_ -= cls;
    --blocks_;
    return p;
  }

  void put(StreamId stream, size_t cls, void* p) {
    free_[{stream, cls}].push_back(p);
    bytes_ += cls;
    ++blocks_;
  }

  /// Calls release(ptr, cls) for every cached block and empties the cache.
  template <class F>
  void drain(F&& release) {
    for (auto& [key, ptrs] : free_)
      for (void* p : ptrs) release(p, key.second);
    free_.clear();
    bytes_ = 0;
    blocks_ = 0;
  }

  size_t cached_bytes() const { return bytes_; }
  size_t cached_blocks() const { return blocks_; }

 private:
  std::map<std::pair<StreamId, size_t>, std::vector<void*>> free_;
  size_t bytes_ = 0;
  size_t blocks_ = 0;
};

}  // namespace strata::cuda::detail
