// Inverted dropout's f32 rows with AVX-512 intrinsics, at SIMD level x86-64-v4 (the callers
// test avx512_rows(), act_avx512.h). Sixteen Philox-4x32-10 blocks run side by side, one in
// each 32-bit lane of four zmm registers, two such groups interleaved; each 32x32 -> 64-bit
// product is one vpmuludq on the even lanes and one on the odd. The generic loops
// (cpu/dropout.cpp) compiled for the same level multiply in 64-bit lanes (vpmullq, several
// uops each) and pass the words through memory to put them in element order. Per element
// on one core (f32, 128 x 256), against them: forward 2.5 -> 0.53 ns, backward (whose
// generic loop had run scalar) 1.05 -> 0.10 ns. The mask and the outputs are the generic
// loops' bit for bit: element i is kept iff Generator::to_unit(word i % 4 of block
// base + i / 4) >= p, and y = x * scale or +0.
#pragma once
#include <cstdint>

namespace strata::cpu {

/// Elements [0, n) of a draw whose element 0 is word 0 of Philox block c0 under `seed`:
/// mask[i] = (word >> 8) >= threshold, y[i] = mask[i] ? x[i] * scale : +0.
void dropout_row_avx512(const float* x, float* y, uint8_t* mask, int64_t n, uint64_t seed, uint64_t c0,
                        uint32_t threshold, float scale);

/// dx[i] = mask[i] ? dy[i] * scale : +0 for i < n.
void dropout_backward_row_avx512(const float* dy, const uint8_t* mask, float* dx, int64_t n, float scale);

}  // namespace strata::cpu
