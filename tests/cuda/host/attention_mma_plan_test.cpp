// The plan of the tensor-core attention (tensor/cuda/attention_mma_plan.h), on the host:
// the register fragments of mma.sync m16n8k16 cover each tile once, two C tiles are the
// next product's A fragment element for element, the fragment loads from the padded
// shared tiles fall in distinct banks, the shared memory fits, and which calls take the
// tensor cores.
#include <strata/tensor/cuda/attention_mma_plan.h>

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

namespace strata {
namespace {

using namespace cuda::mma;

// Each (row, col) of a rows x cols tile, counted over every lane's fragment elements.
template <class F>
std::vector<int> coverage(int rows, int cols, int per_lane, F&& at) {
  std::vector<int> hits(size_t(rows * cols), 0);
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < per_lane; ++i) {
      const auto [r, c] = at(lane, i);
      EXPECT_TRUE(r >= 0 && r < rows && c >= 0 && c < cols) << "lane " << lane << " element " << i;
      if (r >= 0 && r < rows && c >= 0 && c < cols) ++hits[size_t(r * cols + c)];
    }
  return hits;
}

TEST(CudaAttentionMmaPlan, FragmentsCoverEachTileElementOnce) {
  const std::vector<int> once_a(16 * 16, 1), once_bc(16 * 8, 1);
  // A: 4 registers x 2 halves, 16 x 16
  EXPECT_EQ(coverage(16, 16, 8, [](int lane, int i) {
              return std::pair{frag_a_row(lane, i / 2), frag_a_col(lane, i / 2, i % 2)};
            }),
            once_a);
  // B: 2 registers x 2 halves, k 16 x n 8
  EXPECT_EQ(coverage(16, 8, 4, [](int lane, int i) { return std::pair{frag_b_k(lane, i / 2, i % 2), frag_b_n(lane)}; }),
            once_bc);
  // C: 4 f32 elements, 16 x 8
  EXPECT_EQ(coverage(16, 8, 4, [](int lane, int e) { return std::pair{frag_c_row(lane, e), frag_c_col(lane, e)}; }),
            once_bc);
}

TEST(CudaAttentionMmaPlan, TwoCTilesAreTheNextProductsAFragment) {
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 4; ++r)
      for (int half = 0; half < 2; ++half) {
        const int tile = frag_a_from_c_tile(r), e = frag_a_from_c_elem(r, half);
        EXPECT_EQ(frag_c_row(lane, e), frag_a_row(lane, r)) << "lane " << lane << " reg " << r << " half " << half;
        EXPECT_EQ(8 * tile + frag_c_col(lane, e), frag_a_col(lane, r, half))
            << "lane " << lane << " reg " << r << " half " << half;
      }
  // the low half is the lower column: a register's two halves are adjacent columns
  for (int lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(frag_a_col(lane, r, 1), frag_a_col(lane, r, 0) + 1);
      EXPECT_EQ(frag_a_col(lane, r, 0) % 2, 0);  // a 32-bit load
    }
  for (int lane = 0; lane < 32; ++lane) EXPECT_EQ(frag_b_k(lane, 0, 0) % 2, 0);
}

// The 32-bit words a warp's fragment load reads from a tile of `stride` 16-bit elements a
// row fall in 32 distinct banks (one wavefront).
void expect_distinct_banks(const std::vector<int64_t>& elems, const std::string& what) {
  std::set<int64_t> banks;
  for (int64_t e : elems) banks.insert((e / 2) % 32);
  EXPECT_EQ(banks.size(), 32u) << what;
}

TEST(CudaAttentionMmaPlan, FragmentLoadsFromTheSharedTilesHitDistinctBanks) {
  std::vector<int64_t> strides;
  for (int64_t hd : {32, 64, 128}) {
    strides.push_back(smem_stride(hd));
    strides.push_back(smem_stride(dkv_query_tile(hd)));
  }
  strides.push_back(smem_stride(kTile));
  for (int64_t stride : strides)
    for (int k0 : {0, 16, 48})
      for (int reg = 0; reg < 4; ++reg) {
        std::vector<int64_t> a, b;
        for (int lane = 0; lane < 32; ++lane) {
          a.push_back(frag_a_row(lane, reg) * stride + k0 + frag_a_col(lane, reg, 0));
          if (reg < 2) b.push_back((8 + frag_b_n(lane)) * stride + k0 + frag_b_k(lane, reg, 0));
        }
        expect_distinct_banks(a, "A, stride " + std::to_string(stride) + " reg " + std::to_string(reg));
        if (reg < 2) expect_distinct_banks(b, "B, stride " + std::to_string(stride) + " reg " + std::to_string(reg));
      }
  // unpadded rows of 64 elements would put the eight rows of a load in four banks
  std::vector<int64_t> unpadded;
  for (int lane = 0; lane < 32; ++lane) unpadded.push_back(frag_b_n(lane) * 64 + frag_b_k(lane, 0, 0));
  std::set<int64_t> banks;
  for (int64_t e : unpadded) banks.insert((e / 2) % 32);
  EXPECT_EQ(banks.size(), 4u);
}

TEST(CudaAttentionMmaPlan, SharedMemoryFitsAndRowsStay16ByteAligned) {
  for (int64_t hd : {32, 64, 128}) {
    EXPECT_LE(forward_smem_bytes(hd), size_t(48) * 1024) << hd;  // no opt-in for the forward
    EXPECT_LE(dq_smem_bytes(hd), kSmemOptInLimit) << hd;
    EXPECT_LE(dkv_smem_bytes(hd), kSmemOptInLimit) << hd;
    for (int64_t n : {int64_t(kTile), int64_t(hd), int64_t(dkv_query_tile(hd))}) EXPECT_EQ(smem_stride(n) * 2 % 16, 0);
  }
  // K rows and V^T for a tile of 64 keys at hd 64: 2 bytes x (64 x 72 + 64 x 72)
  EXPECT_EQ(forward_smem_bytes(64), size_t(18432));
  // dk/dv at hd 128 take 32 query rows: own K, V (64 x 136), Q, dO (32 x 136), their
  // transposes (128 x 40), and 2 x 32 floats
  EXPECT_EQ(dkv_smem_bytes(128), size_t(2 * (2 * 64 * 136 + 2 * 32 * 136 + 2 * 128 * 40) + 2 * 32 * 4));
  EXPECT_EQ(tiles(0), 0);
  EXPECT_EQ(tiles(1), 1);
  EXPECT_EQ(tiles(64), 1);
  EXPECT_EQ(tiles(65), 2);
}

TEST(CudaAttentionMmaPlan, SixteenBitCallsAtTheBuiltHeadSizesTakeTheTensorCores) {
  for (DType dt : {DType::bf16, DType::f16})
    for (int64_t hd : {32, 64, 128}) EXPECT_TRUE(choose_attention(dt, hd, true, nullptr).tensor_cores);
  EXPECT_FALSE(choose_attention(DType::f32, 64, true, nullptr).tensor_cores);
  EXPECT_FALSE(choose_attention(DType::f64, 64, true, nullptr).tensor_cores);
  for (int64_t hd : {8, 16, 40, 48, 96, 256}) EXPECT_FALSE(choose_attention(DType::bf16, hd, true, nullptr).tensor_cores);
  EXPECT_FALSE(choose_attention(DType::bf16, 64, false, nullptr).tensor_cores);
  for (const char* v : {"", "auto", "mma"}) EXPECT_TRUE(choose_attention(DType::bf16, 64, true, v).tensor_cores) << v;
  const AttentionChoice warp = choose_attention(DType::bf16, 64, true, "warp");
  EXPECT_FALSE(warp.tensor_cores);
  EXPECT_FALSE(warp.bad_setting);
  for (const char* v : {"flash", "war", "warps", "MMA"}) {
    const AttentionChoice c = choose_attention(DType::bf16, 64, true, v);
    EXPECT_FALSE(c.tensor_cores) << v;
    EXPECT_TRUE(c.bad_setting) << v;
    EXPECT_EQ(std::string(c.reason), "STRATA_CUDA_ATTENTION must be auto, mma or warp");
  }
}

}  // namespace
}  // namespace strata
