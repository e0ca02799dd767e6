// Philox-4x32-10 for CUDA kernels, bit-identical to core/rng.h's Generator::block, so a
// CUDA dropout mask equals the CPU one for the same generator state. Host-testable.
#pragma once
#include <cstdint>

#include <strata/tensor/cuda/hd.h>

namespace strata::cuda {

struct PhiloxWords {
  uint32_t w[4];
};

/// Generator::block(counter) for a generator with `seed`: 4 uniform 32-bit words.
STRATA_HD PhiloxWords philox_block(uint64_t seed, uint64_t counter) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
STRATA_UNROLL
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = uint64_t(kM0) * c0;
    const uint64_t p1 = uint64_t(kM1) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += kW0;
    k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

/// The dropout keep threshold of the CPU kernel: element kept iff (word >> 8) >= it,
/// i.e. Generator::to_unit(word) >= float(p).
inline uint32_t dropout_threshold(double p) {
  const double t = double(float(p)) * 16777216.0;
  const uint64_t c = uint64_t(t);
  return uint32_t(double(c) < t ? c + 1 : c);  // ceil without <cmath> in device headers
}

}  // namespace strata::cuda
