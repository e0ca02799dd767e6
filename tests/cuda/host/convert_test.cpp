// The CUDA kernels' dtype conversions (tensor/cuda/convert.h) against core/dtype.h's
// f16/bf16 routines bit for bit, and against the CPU copy kernel (ops::to_dtype) for
// every pair of dtypes.
#include <strata/tensor/cuda/convert.h>

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <limits>

#include <strata/core/rng.h>
#include <strata/tensor/ops.h>

namespace strata {
namespace {

TEST(CudaConvert, HalfToFloatAllBitPatterns) {
  for (uint32_t h = 0; h <= 0xffff; ++h)
    ASSERT_EQ(std::bit_cast<uint32_t>(cuda::half_bits_to_float(uint16_t(h))),
              std::bit_cast<uint32_t>(half_to_float(uint16_t(h))))
        << "half bits " << h;
}

TEST(CudaConvert, FloatToHalfAndBf16MatchCore) {
  Generator g(5);
  std::vector<float> vals = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65520.0f, 1e-8f, 6e-8f, 3e-5f,
                             std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min()};
  for (int i = 0; i < 1 << 20; ++i) {
    const auto w = g.block(uint64_t(i));
    vals.push_back(std::bit_cast<float>(w[0]));
  }
  for (float f : vals) {
    ASSERT_EQ(cuda::float_to_half_bits(f), float_to_half(f)) << "float bits " << std::bit_cast<uint32_t>(f);
    ASSERT_EQ(cuda::float_to_bf16_bits(f), float_to_bf16(f)) << "float bits " << std::bit_cast<uint32_t>(f);
    ASSERT_EQ(std::bit_cast<uint32_t>(cuda::bf16_bits_to_float(float_to_bf16(f))),
              std::bit_cast<uint32_t>(bf16_to_float(float_to_bf16(f))));
  }
}

// store_scalar(load_scalar(x)) element by element equals the CPU copy kernel's bytes.
TEST(CudaConvert, EveryDtypePairMatchesTheCpuCopyKernel) {
  const DType all[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8};
  std::vector<double> v;
  for (int i = 0; i < 200; ++i) v.push_back(i * 0.625);  // 0..124.4, exact in every float type's range
  v.push_back(255.0);
  const Tensor src64 = ops::from_vector(v, {int64_t(v.size())});
  for (DType s : all) {
    const Tensor src = ops::to_dtype(src64, s);
    for (DType d : all) {
      const Tensor want = ops::to_dtype(src, d);
      std::vector<unsigned char> got(size_t(want.nbytes()));
      for (int64_t i = 0; i < src.numel(); ++i)
        cuda::store_scalar(got.data(), i, d, cuda::load_scalar(src.raw_data(), i, s));
      ASSERT_EQ(std::memcmp(got.data(), want.raw_data(), got.size()), 0)
          << dtype_name(s) << " -> " << dtype_name(d);
    }
  }
}

TEST(CudaConvert, IntegersNarrowModuloLikeTheCpu) {
  const Tensor src = ops::from_vector(std::vector<int64_t>{-1, 256, 300, -129, (int64_t(1) << 40) + 7}, {5});
  for (DType d : {DType::u8, DType::i32}) {
    const Tensor want = ops::to_dtype(src, d);
    std::vector<unsigned char> got(size_t(want.nbytes()));
    for (int64_t i = 0; i < 5; ++i)
      cuda::store_scalar(got.data(), i, d, cuda::load_scalar(src.raw_data(), i, DType::i64));
    ASSERT_EQ(std::memcmp(got.data(), want.raw_data(), got.size()), 0) << dtype_name(d);
  }
}

}  // namespace
}  // namespace strata
