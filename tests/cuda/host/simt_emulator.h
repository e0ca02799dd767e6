// A host emulation of CUDA thread blocks for kernels written against the SIMT interface of
// tensor/cuda/attention_mma_kernels.h, so that their code runs and is checked on a machine
// without a GPU: a block is kBlockThreads std::threads; __syncthreads is a barrier of the
// block, __shfl_xor_sync and mma.sync exchanges through per-warp slots between barriers of
// the warp. mma.sync m16n8k16 follows the PTX ISA's fragment tables, spelled here by the
// ISA's own element numbering (a0..a7, b0..b3, c0..c3) rather than through
// attention_mma_plan.h, and accumulates in f32. Slow (a context switch per exchange):
// for small shapes.
#pragma once
#include <barrier>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include <strata/core/half_bits.h>
#include <strata/tensor/cuda/attention_mma_kernels.h>

namespace strata::test {

using cuda::mma::kBlockThreads;
using cuda::mma::kWarps;

struct SimtBlock {
  std::barrier<> block{kBlockThreads};
  std::vector<std::unique_ptr<std::barrier<>>> warp;
  float shfl[kWarps][32] = {};
  uint32_t a[kWarps][32][4] = {}, b[kWarps][32][2] = {};
  SimtBlock() {
    for (int w = 0; w < kWarps; ++w) warp.push_back(std::make_unique<std::barrier<>>(32));
  }
};

inline thread_local int t_tid = 0;
inline thread_local SimtBlock* t_block = nullptr;

template <DType DT>
float half_to_float(uint32_t bits16) {
  return DT == DType::bf16 ? bf16_bits_to_float(uint16_t(bits16)) : half_bits_to_float(uint16_t(bits16));
}

/// The SIMT interface for the emulated threads.
struct EmulatedThread {
  static int tid() { return t_tid; }
  static void sync() { t_block->block.arrive_and_wait(); }
  static float shfl_xor(float v, int mask) {
    const int w = t_tid / 32, lane = t_tid % 32;
    t_block->shfl[w][lane] = v;
    t_block->warp[size_t(w)]->arrive_and_wait();
    const float r = t_block->shfl[w][lane ^ mask];
    t_block->warp[size_t(w)]->arrive_and_wait();
    return r;
  }
  template <DType DT>
  static void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    const int w = t_tid / 32, lane = t_tid % 32;
    for (int r = 0; r < 4; ++r) t_block->a[w][lane][r] = a[r];
    t_block->b[w][lane][0] = b0;
    t_block->b[w][lane][1] = b1;
    t_block->warp[size_t(w)]->arrive_and_wait();
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; ++l) {
      const int group = l >> 2, tig = l % 4;
      for (int i = 0; i < 8; ++i) {  // a_i: register i / 2, half i % 2
        const int row = group + ((i >= 2 && i < 4) || i >= 6 ? 8 : 0);
        const int col = tig * 2 + (i & 1) + (i >= 4 ? 8 : 0);
        A[row][col] = half_to_float<DT>(t_block->a[w][l][i / 2] >> (16 * (i % 2)));
      }
      for (int i = 0; i < 4; ++i) {  // b_i: register i / 2, half i % 2
        const int row = tig * 2 + (i & 1) + (i >= 2 ? 8 : 0);
        B[row][group] = half_to_float<DT>(t_block->b[w][l][i / 2] >> (16 * (i % 2)));
      }
    }
    for (int i = 0; i < 4; ++i) {  // c_i
      const int row = (lane >> 2) + (i >= 2 ? 8 : 0), col = (lane % 4) * 2 + (i & 1);
      float acc = d[i];
      for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
      d[i] = acc;
    }
    t_block->warp[size_t(w)]->arrive_and_wait();
  }
  template <DType DT>
  static uint32_t pack(float lo, float hi) {
    auto bits = [](float x) { return uint32_t(DT == DType::bf16 ? float_to_bf16_bits(x) : float_to_half_bits(x)); };
    return bits(lo) | bits(hi) << 16;
  }
};

/// Runs body(x, y, smem) as every thread of every block (x, y) of a gx x gy grid, a block
/// at a time, with `smem_bytes` of zeroed shared memory a block.
template <class F>
void run_grid(int64_t gx, int64_t gy, size_t smem_bytes, F&& body) {
  for (int64_t x = 0; x < gx; ++x)
    for (int64_t y = 0; y < gy; ++y) {
      SimtBlock blk;
      std::vector<cuda::mma::U4> smem((smem_bytes + sizeof(cuda::mma::U4) - 1) / sizeof(cuda::mma::U4));
      std::vector<std::thread> threads;
      for (int t = 0; t < kBlockThreads; ++t)
        threads.emplace_back([&, t] {
          t_tid = t;
          t_block = &blk;
          body(x, y, reinterpret_cast<uint16_t*>(smem.data()));
        });
      for (std::thread& th : threads) th.join();
    }
}

}  // namespace strata::test
