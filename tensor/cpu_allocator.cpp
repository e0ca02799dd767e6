// The CPU caching allocator: one free list per size class (tensor/size_class.h), each
// behind its own lock, so a block allocated on one thread (a DataParallel replica) may
// be freed on another (the comm thread). Blocks are class-sized and 64-byte aligned.
#include <strata/tensor/cpu_allocator.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <strata/tensor/size_class.h>
#include <strata/tensor/storage.h>

#if defined(__linux__)
#include <sys/mman.h>
#define STRATA_HUGE_ARENA 1
#else
#define STRATA_HUGE_ARENA 0
#endif

// Under AddressSanitizer (STRATA_SANITIZE=address) a cached block is poisoned while it
// waits in its free list, and a live block past the tensor's own bytes, so a read or
// write of a freed tensor, or past a tensor's end into its size class's rounding, is
// reported as it would be without the cache.
#if defined(__SANITIZE_ADDRESS__)
#define STRATA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STRATA_ASAN 1
#endif
#endif
#ifdef STRATA_ASAN
#include <sanitizer/asan_interface.h>
#define STRATA_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define STRATA_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define STRATA_POISON(p, n) ((void)(p), (void)(n))
#define STRATA_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace strata {
namespace {

using detail::size_class;
using detail::size_class_index;
constexpr auto kRelaxed = std::memory_order_relaxed;
constexpr size_t kNumBins = size_class_index(kCpuCacheMaxBlock, kCpuAlignment);  // classes below the max
constexpr size_t kDefaultLimit = size_t(4) << 30;

#if STRATA_HUGE_ARENA && !defined(STRATA_ASAN)
constexpr bool kHugeArena = true;
#else
constexpr bool kHugeArena = false;  // under AddressSanitizer every block comes from malloc
#endif
constexpr size_t kPage = 4096;
constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kHugeChunk = size_t(64) << 20;

// Large blocks (kHugeMinBlock and up) are carved from 2 MiB-aligned anonymous mappings
// advised as transparent huge pages (MADV_HUGEPAGE: the default THP mode "madvise" backs
// only advised ranges with 2 MiB pages). A training step's activations and gradients are
// such blocks; with 4 KiB pages, the GEMMs' panel reads and the attention's strided rows
// over ~100 MiB of them miss the TLB (docs/performance.md, "Caching host allocator").
// Blocks are cut one after another from 64 MiB chunks (a block over a chunk gets a mapping
// of its own) and returned with munmap of exactly their pages; the cache above keeps them,
// so that happens only on empty_cache, past the cache limit or for uncacheable sizes.
// Without THP the advice is ignored and the mappings are plain pages.
class HugeArena {
 public:
  // nullptr when the OS refuses the mapping.
  void* allocate(size_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    if (size > left_) {
      if (size >= kHugeChunk) return map(size);
      if (left_ > 0) munmap(cur_, left_);  // the old chunk's unused tail
      cur_ = static_cast<char*>(map(kHugeChunk));
      left_ = cur_ ? kHugeChunk : 0;
      if (!cur_) return nullptr;
    }
    void* p = cur_;
    cur_ += size;
    left_ -= size;
    return p;
  }
  static void deallocate(void* p, size_t size) noexcept { munmap(p, size); }  // the length rounds up to pages

 private:
  // A kHugePage-aligned mapping of `size` bytes (whole 4 KiB pages: an uncacheable block's
  // size is only 64-byte aligned), advised as huge pages.
  static void* map(size_t size) {
    size = (size + kPage - 1) & ~(kPage - 1);
    const size_t span = size + kHugePage;
    void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) return nullptr;
    char* base = static_cast<char*>(raw);
    char* p = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(base) + kHugePage - 1) & ~(kHugePage - 1));
    if (p > base) munmap(base, size_t(p - base));
    if (char* end = base + span; end > p + size) munmap(p + size, size_t(end - (p + size)));
    madvise(p, size, MADV_HUGEPAGE);  // advice only: without THP the pages stay 4 KiB
    return p;
  }

  std::mutex mu_;
  char* cur_ = nullptr;
  size_t left_ = 0;
};

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

size_t env_limit() {
  const char* v = std::getenv("STRATA_CPU_CACHE_LIMIT_MB");
  if (!v || !*v) return kDefaultLimit;
  char* end = nullptr;
  const unsigned long long mb = std::strtoull(v, &end, 10);
  return end && *end == '\0' ? size_t(mb) << 20 : kDefaultLimit;
}

// The bins' lock. Their critical sections are a few instructions (a free-list push or pop
// and two counters), taken on every tensor's allocation and release: a test-and-test-and-set
// lock takes one atomic exchange and drops with a plain release store, where a std::mutex
// costs two calls into libpthread and two locked instructions. A waiter spins on plain
// loads, then yields the core, so a holder that an oversubscribed host preempts is not spun
// against for its whole time slice.
class BinLock {
 public:
  void lock() noexcept {
    for (int spins = 0; held_.exchange(true, std::memory_order_acquire);) {
      while (held_.load(kRelaxed)) {
        if (++spins < 128) {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  void unlock() noexcept { held_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> held_{false};
};

void bump_peak(std::atomic<int64_t>& peak, int64_t v) {
  int64_t p = peak.load(kRelaxed);
  while (v > p && !peak.compare_exchange_weak(p, v, kRelaxed)) {
  }
}

class CachingCpuAllocator final : public Allocator {
 public:
  CachingCpuAllocator()
      : exact_(env_set("STRATA_NO_CACHING_ALLOCATOR")), enabled_(!exact_), limit_(env_limit()) {}

  Device device() const override { return kCPU; }

  // A cache hit costs one lock and one atomic (the cached bytes the limit needs); the
  // other counters of a cacheable request live in its bin, under the bin's lock, and
  // allocated bytes are reserved minus cached.
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    const size_t size = block_size(nbytes);
    void* p = nullptr;
    if (cacheable(size)) {
      Bin& b = bins_[bin(size)];
      std::lock_guard<BinLock> lock(b.mu);
      ++b.requests;
      if (!b.free.empty() && enabled_.load(kRelaxed)) {
        p = b.free.back();
        b.free.pop_back();
        ++b.hits;
      }
    } else {
      requests_.fetch_add(1, kRelaxed);
    }
    if (p) {
      cached_bytes_.fetch_sub(int64_t(size), kRelaxed);
    } else {
      p = os_alloc(size);
      if (!p) {  // the cache may hold what the OS cannot give: return it and retry once
        empty_cache();
        p = os_alloc(size);
      }
      if (!p) throw std::bad_alloc();
      os_allocs_.fetch_add(1, kRelaxed);
      if (cacheable(size)) os_allocs_by_bin_[bin(size)].fetch_add(1, kRelaxed);
      bump_peak(peak_reserved_, reserved_.fetch_add(int64_t(size), kRelaxed) + int64_t(size));
    }
    STRATA_UNPOISON(p, nbytes);
    STRATA_POISON(static_cast<char*>(p) + nbytes, size - nbytes);
    return p;
  }

  // Storage's destructor calls this: never throws (a full free list frees the block).
  void deallocate(void* p, size_t nbytes) noexcept override {
    if (!p) return;
    const size_t size = block_size(nbytes);
    if (cacheable(size) && enabled_.load(kRelaxed) && reserve_cache(size)) {
      Bin& b = bins_[bin(size)];
      try {
        std::lock_guard<BinLock> lock(b.mu);
        b.free.push_back(p);
        STRATA_POISON(p, size);  // under the lock: a concurrent allocate unpoisons after popping it
        return;
      } catch (...) {
        cached_bytes_.fetch_sub(int64_t(size), kRelaxed);
      }
    }
    os_free(p, size);
  }

  void empty_cache() noexcept {
    for (size_t i = 0; i < kNumBins; ++i) {
      std::vector<void*> blocks;
      {
        std::lock_guard<BinLock> lock(bins_[i].mu);
        blocks.swap(bins_[i].free);
      }
      if (blocks.empty()) continue;
      const size_t size = class_of_bin(i);
      cached_bytes_.fetch_sub(int64_t(size * blocks.size()), kRelaxed);
      for (void* p : blocks) os_free(p, size);
    }
  }

  bool enabled() const { return enabled_.load(kRelaxed); }
  void set_enabled(bool on) {
    enabled_.store(on && !exact_, kRelaxed);
    if (!on) empty_cache();
  }
  size_t limit() const { return limit_.load(kRelaxed); }
  void set_limit(size_t bytes) { limit_.store(bytes, kRelaxed); }

  std::vector<std::pair<int64_t, int64_t>> os_allocs_by_class() const {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (size_t i = 0; i < kNumBins; ++i)
      if (const int64_t n = os_allocs_by_bin_[i].load(kRelaxed)) out.emplace_back(int64_t(class_of_bin(i)), n);
    return out;
  }

  CpuAllocatorStats stats() {
    int64_t blocks = 0, requests = requests_.load(kRelaxed), hits = 0;
    for (Bin& b : bins_) {
      std::lock_guard<BinLock> lock(b.mu);
      blocks += int64_t(b.free.size());
      requests += b.requests;
      hits += b.hits;
    }
    const int64_t reserved = reserved_.load(kRelaxed), cached = cached_bytes_.load(kRelaxed);
    return {.allocated_bytes = reserved - cached,
            .reserved_bytes = reserved,
            .peak_reserved_bytes = peak_reserved_.load(kRelaxed),
            .cached_bytes = cached,
            .cached_blocks = blocks,
            .requests = requests,
            .cache_hits = hits,
            .os_allocs = os_allocs_.load(kRelaxed),
            .os_frees = os_frees_.load(kRelaxed)};
  }

 private:
  struct alignas(64) Bin {  // a line each: threads working different classes do not share one
    BinLock mu;
    std::vector<void*> free;  // blocks of this bin's class, most recently freed last
    int64_t requests = 0, hits = 0;
  };

  // The bytes a request of nbytes gets: its size class, or (exact mode, huge blocks)
  // the request rounded up to the alignment. A function of nbytes alone, so deallocate
  // (which gets the same nbytes) finds the block's size without a lookup table.
  size_t block_size(size_t nbytes) const {
    const size_t cls = size_class(nbytes, kCpuAlignment);
    if (exact_ || cls >= kCpuCacheMaxBlock) return (nbytes + kCpuAlignment - 1) & ~(kCpuAlignment - 1);
    return cls;
  }
  bool cacheable(size_t size) const { return !exact_ && size < kCpuCacheMaxBlock; }
  static size_t bin(size_t cls) { return size_class_index(cls, kCpuAlignment); }
  static size_t class_of_bin(size_t i) {
    static const std::array<size_t, kNumBins> classes = [] {
      std::array<size_t, kNumBins> c{};
      for (size_t n = kCpuAlignment; n < kCpuCacheMaxBlock; n = size_class(n + 1, kCpuAlignment))
        c[bin(n)] = n;
      return c;
    }();
    return classes[i];
  }

  // Counts `size` more cached bytes unless that would pass the limit.
  bool reserve_cache(size_t size) {
    const int64_t now = cached_bytes_.fetch_add(int64_t(size), kRelaxed) + int64_t(size);
    if (now > int64_t(limit_.load(kRelaxed))) {
      cached_bytes_.fetch_sub(int64_t(size), kRelaxed);
      return false;
    }
    return true;
  }

  // Whether blocks of `size` come from the huge-page arena: a function of the size alone
  // (and the mode, fixed at construction), so os_free knows which way to return one.
  bool huge(size_t size) const { return kHugeArena && !exact_ && size >= kHugeMinBlock; }

  void* os_alloc(size_t size) { return huge(size) ? huge_.allocate(size) : std::aligned_alloc(kCpuAlignment, size); }

  void os_free(void* p, size_t size) noexcept {
    STRATA_UNPOISON(p, size);
    if (huge(size))
      HugeArena::deallocate(p, size);
    else
      std::free(p);
    os_frees_.fetch_add(1, kRelaxed);
    reserved_.fetch_sub(int64_t(size), kRelaxed);
  }

  const bool exact_;  // STRATA_NO_CACHING_ALLOCATOR: exact sizes, never cached, from malloc
  HugeArena huge_;
  std::atomic<bool> enabled_;
  std::atomic<size_t> limit_;
  std::array<Bin, kNumBins> bins_;
  std::atomic<int64_t> reserved_{0}, peak_reserved_{0}, cached_bytes_{0};
  std::atomic<int64_t> requests_{0}, os_allocs_{0}, os_frees_{0};  // requests_: uncacheable sizes
  std::array<std::atomic<int64_t>, kNumBins> os_allocs_by_bin_{};
};

// Never destroyed: tensors in static storage may be freed after main() returns.
CachingCpuAllocator& the_allocator() {
  alignas(CachingCpuAllocator) static unsigned char storage[sizeof(CachingCpuAllocator)];
  static CachingCpuAllocator* const a = ::new (static_cast<void*>(storage)) CachingCpuAllocator();
  return *a;
}

}  // namespace

CpuAllocatorStats cpu_allocator_stats() { return the_allocator().stats(); }
std::vector<std::pair<int64_t, int64_t>> cpu_os_allocs_by_class() { return the_allocator().os_allocs_by_class(); }
void empty_cache() { the_allocator().empty_cache(); }
bool cpu_caching_enabled() { return the_allocator().enabled(); }
void set_cpu_caching(bool on) { the_allocator().set_enabled(on); }
size_t cpu_cache_limit() { return the_allocator().limit(); }
void set_cpu_cache_limit(size_t bytes) { the_allocator().set_limit(bytes); }

namespace detail {
Allocator* cpu_caching_allocator() { return &the_allocator(); }
}  // namespace detail

}  // namespace strata
