// LayerNorm rows in f32 with AVX-512 intrinsics, at SIMD level x86-64-v4: the forward row
// (layer_norm and the residual add fused with it) and the backward's row blocks
// (layer_norm_backward and its pending-adding form). The generic loops (norm_rows.h) reduce
// each row through one accumulator chain per `omp simd` reduction and walk the row five
// times in the backward; these keep two chains per reduction and make two passes: at 2048 x
// 128, forward 49 -> 33 us on rows in L1 and 57 -> 48 us on rows from DRAM, backward 90 ->
// 55 and 94 -> 81 us (docs/performance.md, "LayerNorm rows").
#pragma once
#include <cstdint>

namespace strata::cpu {

// Call these only where avx512_rows() (act_avx512.h).

/// y = layer_norm(x) for n rows of C elements (row i at x + i C, y + i C), w / b null for
/// none; each row's mean and rstd written to mean[i], rstd[i]. Rows in blocks of four (each
/// row's statistics, then each row's output), the rows ahead prefetched.
void layer_norm_rows_avx512(const float* x, const float* w, const float* b, float* y, float* mean, float* rstd,
                            int64_t n, int64_t C, float eps);

/// Rows [r0, r1) of the layer norm backward, norm_rows::layer_norm_backward_rows' contract:
/// dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w (w null: dy); dwp += dy xhat and
/// dbp += dy when not null; with pending, dx = pending + that dx (rounded first, then added:
/// the same bits as without pending followed by the add; dx may be pending).
void layer_norm_backward_rows_avx512(const float* dy, const float* x, const float* mean, const float* rstd,
                                     const float* w, float* dx, float* dwp, float* dbp, int64_t r0, int64_t r1,
                                     int64_t C, const float* pending);

}  // namespace strata::cpu
