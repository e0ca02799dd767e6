// Row chunks for ops whose consecutive passes over a (M, n) matrix should meet in the
// core's L2: a GEMM writing rows that an elementwise pass then reads (ops::linear_bias_gelu),
// or a backward whose two GEMMs read the same gradient rows (autograd/fn_linalg.cpp). On
// one CPU thread, chunks of about kBytes of the matrix (at least two of them, else one;
// even sizes in multiples of 16 rows, no short tail); on other devices, or with more
// threads (each GEMM's rows then already split over several L2s; smaller calls measured
// slower), one chunk of all M rows.
#pragma once
#include <algorithm>
#include <cstdint>

#include <strata/core/threads.h>

namespace strata {

struct RowChunks {
  static constexpr int64_t kBytes = 512 * 1024;
  int64_t M = 0, rows = 0;

  /// M rows of row_bytes each, on the CPU (cpu) or another device.
  RowChunks(int64_t m, int64_t row_bytes, bool cpu) : M(m), rows(m) {
    if (!cpu || M == 0 || get_num_threads() != 1) return;
    const int64_t r = std::max<int64_t>(64, kBytes / std::max<int64_t>(1, row_bytes));
    if (2 * r > M) return;
    const int64_t n = (M + r - 1) / r;
    rows = ((M + n - 1) / n + 15) / 16 * 16;
  }
  int64_t count() const { return rows > 0 ? (M + rows - 1) / rows : 1; }  // M = 0: one empty chunk
  int64_t start(int64_t c) const { return c * rows; }
  int64_t size(int64_t c) const { return std::min(rows, M - c * rows); }
};

}  // namespace strata
