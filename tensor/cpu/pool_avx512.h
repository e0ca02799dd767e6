// The 2x2 stride-2 max pool of f32 planes up to 32 wide with AVX-512 intrinsics, at SIMD
// level x86-64-v4 (the callers test avx512_rows(), act_avx512.h). A small CNN's planes (28 and
// 14 wide: 14 and 7 outputs a row) are narrower than a vector, so the vectorised loop of
// cpu/pool.cpp ran only its scalar remainder and the short rows a scalar loop; here each
// output row is one masked vector: both input rows loaded (two vectors at most), their even
// and odd columns split by vpermt2ps, the selects done on masks. The same values and
// indices as the scalar loops: the first maximum on ties, a NaN wins.
#pragma once
#include <cstdint>

namespace strata::cpu {

/// One (H, W) plane, W <= 32: y (Ho, Wo) and idx (flat indices into the plane) of the
/// unpadded 2x2 stride-2 max pool, Ho = H / 2, Wo = W / 2.
void max2x2_plane_avx512(const float* x, int64_t W, float* y, int64_t* idx, int64_t Ho, int64_t Wo);

/// The same pool of relu(x * scale + shift) (the batch norm's rounding: one FMA; the ReLU's
/// rule: NaN -> 0), formed in registers: y the maxima, win each max's place in its window
/// (0..3 row-major, the first of equal maxima). One (H, W) plane, W <= 32.
void bn_relu_max2x2_plane_avx512(const float* x, float scale, float shift, int64_t W, float* y, uint8_t* win,
                                 int64_t Ho, int64_t Wo);

/// The backward of that pool behind the ReLU for one (H, W) plane, W <= 32: g = 0 + dy at
/// each window's max (win) where the max y > 0, zeros elsewhere (the rows and columns in no
/// window too).
void unpool2x2_relu_plane_avx512(const float* dy, const float* y, const uint8_t* win, float* g, int64_t H,
                                 int64_t W);

}  // namespace strata::cpu
