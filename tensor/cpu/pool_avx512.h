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

}  // namespace strata::cpu
