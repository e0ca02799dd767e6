// The CUDA kernels' 16-bit loads and stores (tensor/cuda/widen.h, compiled here for the
// host) against the CPU kernels' (tensor/cpu/widen.h): every f16 and bf16 bit pattern
// widens to the same f32, and f32 values (ties, subnormals, overflow, infinities, NaN,
// random) round to the same 16 bits, so a 16-bit CUDA result equals the CPU's whenever
// their f32 arithmetic does.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <strata/tensor/cuda/widen.h>

namespace strata {
namespace {

static_assert(std::is_same_v<cuda::acc_t<Half>, float> && std::is_same_v<cuda::acc_t<BFloat16>, float>);
static_assert(std::is_same_v<cuda::acc_t<float>, float> && std::is_same_v<cuda::acc_t<double>, double>);
static_assert(std::is_same_v<cuda::acc_t<int64_t>, int64_t> && cuda::kIs16<Half> && !cuda::kIs16<float>);

bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || hd::float_bits(a) == hd::float_bits(b); }

TEST(CudaWiden, EveryBitPatternWidensLikeTheCpu) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const uint16_t bits = uint16_t(b);
    EXPECT_TRUE(same_float(cuda::ld(Half{bits}), cpu::ld(Half{bits}))) << "f16 0x" << std::hex << b;
    EXPECT_TRUE(same_float(cuda::ld(BFloat16{bits}), cpu::ld(BFloat16{bits}))) << "bf16 0x" << std::hex << b;
  }
  EXPECT_EQ(cuda::ld(2.5), 2.5);
  EXPECT_EQ(cuda::ld(int32_t(-7)), -7);
}

TEST(CudaWiden, StoresRoundToNearestEvenLikeTheCpu) {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 1.0f + 1.0f / 2048,
                          1.0f + 3.0f / 2048, 65504.0f, 65519.0f, 65520.0f, 1e5f, 3.0e38f, -3.0e38f,
                          6e-8f, 3e-8f, 1e-40f, std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> any_bits;
  for (int i = 0; i < 200000; ++i) v.push_back(hd::bits_float(any_bits(rng)));
  for (float f : v) {
    EXPECT_EQ(cuda::st<Half>(f).bits, cpu::st<Half>(f).bits) << f;
    EXPECT_EQ(cuda::st<BFloat16>(f).bits, cpu::st<BFloat16>(f).bits) << f;
    // a double goes through f32 first on both sides
    EXPECT_EQ(cuda::st<BFloat16>(double(f) * (1 + 1e-12)).bits, cpu::st<BFloat16>(double(f) * (1 + 1e-12)).bits) << f;
  }
  // exact values round-trip; ties go to even
  EXPECT_EQ(cuda::ld(cuda::st<BFloat16>(1.5f)), 1.5f);
  EXPECT_EQ(cuda::ld(cuda::st<BFloat16>(1.0f + 1.0f / 256)), 1.0f);             // tie below: even
  EXPECT_EQ(cuda::ld(cuda::st<BFloat16>(1.0f + 3.0f / 256)), 1.0f + 4.0f / 256);  // tie above: even
  EXPECT_EQ(cuda::ld(cuda::st<Half>(65520.0f)), std::numeric_limits<float>::infinity());
  EXPECT_EQ(cuda::st<int32_t>(3.0), 3);
  EXPECT_EQ(cuda::st<double>(0.25f), 0.25);
}

}  // namespace
}  // namespace strata
