// The CPU caching allocator behind Storage: freed tensor buffers wait in size-class free
// lists for the next request of their class, so a training step stops paying the kernel
// to fault in and zero fresh pages. Tensor bytes are still charged per category by Storage.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace strata {

class Allocator;

/// Counters of the CPU caching allocator (process-wide).
struct CpuAllocatorStats {
  int64_t allocated_bytes = 0;      ///< in live blocks, rounded up to their size class
  int64_t reserved_bytes = 0;       ///< obtained from the OS (aligned_alloc, mmap) and not yet returned
  int64_t peak_reserved_bytes = 0;  ///< high-water mark of reserved_bytes
  int64_t cached_bytes = 0;         ///< reserved but free, waiting for reuse
  int64_t cached_blocks = 0;
  int64_t requests = 0;    ///< allocate() calls with nbytes > 0
  int64_t cache_hits = 0;  ///< requests served from the cache
  int64_t os_allocs = 0;   ///< blocks obtained from the OS (aligned_alloc, or cut from a mapping)
  int64_t os_frees = 0;    ///< blocks returned (free, munmap)
};

/// Blocks of this size and above bypass the cache (an OS allocation and release per tensor).
inline constexpr size_t kCpuCacheMaxBlock = size_t(64) << 20;
/// Blocks of this size and above come from 2 MiB-aligned mappings advised as transparent
/// huge pages (Linux; not with STRATA_NO_CACHING_ALLOCATOR or AddressSanitizer).
inline constexpr size_t kHugeMinBlock = size_t(256) << 10;
/// Alignment of every CPU block, and the smallest size class.
inline constexpr size_t kCpuAlignment = 64;

/// A snapshot of the counters. Thread-safe.
CpuAllocatorStats cpu_allocator_stats();

/// OS allocations (cache misses) so far per cached size class: {class bytes, count} for
/// every class with a nonzero count, smallest first. A rise of the reserved peak between
/// two snapshots is exactly the classes whose count rose (`strata bench soak` names them).
/// Thread-safe.
std::vector<std::pair<int64_t, int64_t>> cpu_os_allocs_by_class();

/// Returns every cached (free) CPU block to the OS; blocks in use are untouched.
/// Thread-safe. Tensor accounting (cpu_memory()) does not change: it counts live bytes only.
void empty_cache();

/// Whether freed CPU blocks are cached. On by default; STRATA_NO_CACHING_ALLOCATOR=1 in
/// the environment turns it off at start-up (every tensor is then aligned_alloc'ed and
/// freed exactly, as AddressSanitizer wants).
bool cpu_caching_enabled();
/// Turns caching on or off at run time (benchmarks compare the two in one process);
/// turning it off empties the cache. Under STRATA_NO_CACHING_ALLOCATOR it stays off.
/// Thread-safe; a block freed while another thread switches may stay cached until the
/// next empty_cache().
void set_cpu_caching(bool on);

/// Most bytes the cache holds free: a block freed beyond it goes back to the OS. Default
/// 4 GiB, or STRATA_CPU_CACHE_LIMIT_MB from the environment. Thread-safe.
size_t cpu_cache_limit();
void set_cpu_cache_limit(size_t bytes);

namespace detail {
/// The allocator allocator_for(kCPU) returns (never destroyed). Blocks are 64-byte aligned.
Allocator* cpu_caching_allocator();
}  // namespace detail

}  // namespace strata
