// The CUDA dropout's random stream (tensor/cuda/philox.h) equals the CPU generator's:
// Philox blocks word for word, the keep threshold for every 24-bit value, and whole
// masks of the CPU dropout kernel.
#include <strata/tensor/cuda/philox.h>

#include <gtest/gtest.h>

#include <strata/core/rng.h>
#include <strata/tensor/ops.h>

namespace strata {
namespace {

TEST(CudaPhilox, BlocksEqualTheCpuGenerator) {
  Generator pick(7);
  for (uint64_t seed : {0ull, 1ull, 42ull, 0xdeadbeefcafef00dull, ~0ull}) {
    const Generator g(seed);
    for (int i = 0; i < 2000; ++i) {
      const uint64_t c = i < 1000 ? uint64_t(i) : (uint64_t(pick.next_below(1ull << 62)) << 1);
      const auto want = g.block(c);
      const auto got = cuda::philox_block(seed, c);
      for (int k = 0; k < 4; ++k) ASSERT_EQ(got.w[k], want[size_t(k)]) << "seed " << seed << " counter " << c;
    }
  }
}

TEST(CudaPhilox, ThresholdDecidesLikeToUnit) {
  for (double p : {0.0, 1e-9, 0.1, 1.0 / 3.0, 0.5, 0.9, 0.999999, 1.0}) {
    const uint32_t th = cuda::dropout_threshold(p);
    for (uint32_t hi = 0; hi < (1u << 24); ++hi) {
      const uint32_t w = (hi << 8) | 0x5a;
      ASSERT_EQ((w >> 8) >= th, Generator::to_unit(w) >= float(p)) << "p " << p << " word " << w;
    }
  }
}

TEST(CudaPhilox, MaskEqualsTheCpuDropoutMask) {
  for (double p : {0.1, 0.5}) {
    Generator gen(123);
    gen.reserve(37);  // a non-zero base
    const uint64_t base = gen.offset();
    const Tensor x = ops::ones({1001});
    const auto [y, mask] = ops::dropout(x, p, gen);
    const auto m = mask.to_vector<uint8_t>();
    const uint32_t th = cuda::dropout_threshold(p);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const auto w = cuda::philox_block(123, base + uint64_t(i / 4));
      ASSERT_EQ(m[size_t(i)], uint8_t((w.w[i % 4] >> 8) >= th)) << "p " << p << " element " << i;
    }
  }
}

}  // namespace
}  // namespace strata
