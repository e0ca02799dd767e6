// Software prefetch for the row loops of the memory-bound kernels (bias + GELU, layer norm,
// RMSNorm, SwiGLU). Their inputs are activations written a whole forward pass earlier (or
// a GEMM's large output just before), so they come from DRAM, and on the 2-core VM of
// docs/performance.md the hardware prefetcher alone left the bias + GELU backward waiting
// on memory for half its time. Prefetching a few rows ahead hides that latency; the loop's
// results are unchanged.
#pragma once
#include <algorithm>
#include <cstdint>

namespace strata::cpu {

/// Rows ahead that the row loops prefetch (a row is 0.5-2 KiB in the models' widths).
inline constexpr int64_t kPrefetchRows = 2;

/// Prefetches the cache lines of [p, p + bytes) into all cache levels; kWrite: lines about
/// to be written. Outputs need it as much as inputs: a kernel's output is a block the
/// caching allocator last handed out a step earlier, so its lines are in DRAM too, and each
/// store waits for its line to be read in (bias + GELU forward in a GPT step: 1.38 -> 0.99
/// ms with its output prefetched as well).
template <bool kWrite = false>
inline void prefetch_lines(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(c + o, kWrite ? 1 : 0, 3);
}

/// Bytes ahead that the row loops reach at least: narrow rows (the models' 128-wide layer
/// norms: 512 B) are prefetched that many rows ahead.
inline constexpr int64_t kPrefetchBytes = 4096;

/// Prefetches row r + max(kPrefetchRows, kPrefetchBytes / row bytes) of a (rows, n) matrix
/// when it exists; kWrite: an output's row.
template <bool kWrite = false, class T>
inline void prefetch_row_ahead(const T* base, int64_t r, int64_t rows, int64_t n) {
  const int64_t bytes = n * int64_t(sizeof(T));
  const int64_t ahead = bytes > 0 ? std::max(kPrefetchRows, kPrefetchBytes / bytes) : kPrefetchRows;
  if (base && r + ahead < rows) prefetch_lines<kWrite>(base + (r + ahead) * n, bytes);
}

}  // namespace strata::cpu
