// The blockwise attention kernels on CUDA (tensor/cuda/attention_block.cu) against the CPU
// kernels (tensor/cpu/attention_block.cpp) on the same inputs: forward (merged into a
// running out / lse: fresh rows, rows already merged from an earlier block, rows left at
// -inf), delta, and backward (accumulated into non-zero dq, dk, dv), over diagonal,
// below-diagonal, partly and wholly masked blocks with Lq != Lk, head sizes that fill a
// warp's lanes unevenly, q|k|v read as strided views of a packed tensor, and attention
// dropout. Tolerances: f64 1e-12 absolute + 1e-10 relative (the two libms and the
// summation order differ by a few ulp); f32 2e-5 + 2e-4 (as the fused attention's test:
// the CPU sums a row in BLAS's order, the GPU in its warp's). Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include <strata/tensor/attention_block.h>

#include "../cuda_test_util.h"

namespace strata {
namespace {

using namespace test;  // kGpu, Tol, tol_for, expect_close, rand_cpu, gpu

struct Case {
  int64_t B, H, hd, Lq, Lk, q_pos, k_pos;
  const char* what;
};

// Blocks of ring attention's kinds (T = 64 tokens in all, for the dropout's index).
const Case kCases[] = {
    {2, 3, 8, 7, 7, 0, 0, "diagonal from 0"},
    {1, 2, 40, 5, 5, 16, 16, "diagonal at 16"},
    {2, 2, 64, 6, 9, 20, 0, "wholly visible (keys before every query)"},
    {1, 3, 40, 8, 6, 3, 5, "partly masked: rows 0 and 1 see nothing"},
    {1, 2, 128, 33, 40, 30, 20, "Lq != Lk across the diagonal, more rows than a thread block's warps"},
    {2, 1, 24, 4, 4, 8, 60, "wholly masked (every key after every query)"},
};
constexpr int64_t kSeq = 64;

Tol tol(DType dt) { return dt == DType::f64 ? test::tol_for(dt) : Tol{2e-5, 2e-4}; }

std::string name(const Case& c, DType dt, double p) {
  return std::string(dtype_name(dt)) + " " + c.what + " (B" + std::to_string(c.B) + " H" + std::to_string(c.H) + " hd" +
         std::to_string(c.hd) + " Lq" + std::to_string(c.Lq) + " Lk" + std::to_string(c.Lk) + " q_pos " +
         std::to_string(c.q_pos) + " k_pos " + std::to_string(c.k_pos) + (p > 0 ? " dropout" : "") + ")";
}

// Columns [c0, c0 + n) of t: a strided (B, L, n) view with a unit last stride.
Tensor cols(const Tensor& t, int64_t c0, int64_t n) { return ops::narrow(t, 2, c0, n); }

// The same inputs on the CPU and the GPU: packed q|k|v rows (views into them), dout.
struct Inputs {
  Tensor qpack, kvpack, dout;  // (B, Lq, 2C) = q | pad, (B, Lk, 2C) = k | v, (B, Lq, C)
  Inputs to(Device d) const { return {qpack.to(d), kvpack.to(d), dout.to(d)}; }
  Tensor q(int64_t C) const { return cols(qpack, C / 2, C); }  // offset columns: a non-zero view offset
  Tensor k(int64_t C) const { return cols(kvpack, 0, C); }
  Tensor v(int64_t C) const { return cols(kvpack, C, C); }
};

Inputs make_inputs(const Case& c, DType dt, uint64_t seed) {
  const int64_t C = c.H * c.hd;
  return {rand_cpu({c.B, c.Lq, 2 * C}, dt, seed, -1.5, 1.5), rand_cpu({c.B, c.Lk, 2 * C}, dt, seed + 1, -1.5, 1.5),
          rand_cpu({c.B, c.Lq, C}, dt, seed + 2)};
}

// A running (out, lse) as an earlier block leaves it: rows merged already (finite lse,
// some output) and, in every third row, rows no block has reached yet (0, -inf).
std::pair<Tensor, Tensor> running_state(const Case& c, DType dt, uint64_t seed) {
  const int64_t C = c.H * c.hd;
  Tensor out = rand_cpu({c.B, c.Lq, C}, dt, seed, -0.5, 0.5);
  std::vector<double> l = rand_cpu({c.B, c.H, c.Lq}, DType::f64, seed + 1, -1.0, 2.0).to_vector<double>();
  std::vector<double> o = out.to_vector<double>();
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t i = 0; i < c.Lq; i += 3) {
        l[size_t((b * c.H + h) * c.Lq + i)] = -std::numeric_limits<double>::infinity();
        for (int64_t d = 0; d < c.hd; ++d) o[size_t((b * c.Lq + i) * C + h * c.hd + d)] = 0;
      }
  return {ops::to_dtype(ops::from_vector(o, {c.B, c.Lq, C}), dt), ops::to_dtype(ops::from_vector(l, {c.B, c.H, c.Lq}), dt)};
}

AttentionDropout dropout_of(double p) { return {.p = p, .seed = 1234, .base = 77, .seq = kSeq}; }

TEST(CudaAttentionBlock, ForwardMatchesTheCpuKernel) {
  STRATA_REQUIRE_GPU();
  for (const Case& c : kCases)
    for (DType dt : {DType::f32, DType::f64})
      for (double p : {0.0, 0.25})
        for (bool fresh : {true, false}) {
          const std::string what = name(c, dt, p) + (fresh ? " fresh rows" : " running rows");
          const int64_t C = c.H * c.hd;
          const Inputs cpu = make_inputs(c, dt, 11), gpu = cpu.to(kGpu);
          Tensor out_c, lse_c;
          if (fresh) {
            out_c = ops::zeros({c.B, c.Lq, C}, dt);
            lse_c = ops::full({c.B, c.H, c.Lq}, -std::numeric_limits<double>::infinity(), dt);
          } else {
            std::tie(out_c, lse_c) = running_state(c, dt, 21);
          }
          // out as a strided view too: columns [C, 2C) of a (B, Lq, 2C) buffer.
          Tensor obuf_c = ops::zeros({c.B, c.Lq, 2 * C}, dt);
          Tensor ov_c = cols(obuf_c, C, C);
          ops::copy_(ov_c, out_c);
          Tensor obuf_g = obuf_c.to(kGpu), lse_g = lse_c.to(kGpu);
          Tensor ov_g = cols(obuf_g, C, C);
          const Tensor out0 = ops::clone(ov_c), lse0 = ops::clone(lse_c);
          const bool rc = ops::attention_block_forward(cpu.q(C), cpu.k(C), cpu.v(C), c.q_pos, c.k_pos, c.hd, ov_c, lse_c,
                                                       dropout_of(p));
          const bool rg = ops::attention_block_forward(gpu.q(C), gpu.k(C), gpu.v(C), c.q_pos, c.k_pos, c.hd, ov_g, lse_g,
                                                       dropout_of(p));
          EXPECT_EQ(rg, rc) << what;
          expect_close(lse_g, lse_c, tol(dt), what + " lse");
          expect_close(obuf_g, obuf_c, tol(dt), what + " out (and the columns beside it)");
          if (!rc) {  // wholly masked: nothing changed, bit for bit
            expect_close(ov_g, out0, Tol{0, 0}, what + " out unchanged");
            expect_close(lse_g, lse0, Tol{0, 0}, what + " lse unchanged");
          }
        }
}

TEST(CudaAttentionBlock, DeltaMatchesTheCpuKernel) {
  STRATA_REQUIRE_GPU();
  for (const Case& c : kCases)
    for (DType dt : {DType::f32, DType::f64}) {
      const std::string what = name(c, dt, 0);
      const int64_t C = c.H * c.hd;
      const Tensor outpack = rand_cpu({c.B, c.Lq, 3 * C}, dt, 31), dout = rand_cpu({c.B, c.Lq, C}, dt, 32);
      Tensor dc = ops::empty({c.B, c.H, c.Lq}, dt), dg = ops::full({c.B, c.H, c.Lq}, 7.0, dt, kGpu);
      ops::attention_block_delta(dout, cols(outpack, C, C), c.hd, dc);
      ops::attention_block_delta(dout.to(kGpu), cols(outpack.to(kGpu), C, C), c.hd, dg);
      expect_close(dg, dc, tol(dt), what + " delta");
    }
}

TEST(CudaAttentionBlock, BackwardMatchesTheCpuKernel) {
  STRATA_REQUIRE_GPU();
  for (const Case& c : kCases)
    for (DType dt : {DType::f32, DType::f64})
      for (double p : {0.0, 0.25}) {
        const std::string what = name(c, dt, p);
        const int64_t C = c.H * c.hd;
        const Inputs cpu = make_inputs(c, dt, 41), gpu = cpu.to(kGpu);
        // lse and delta as a whole ring would leave them: a forward from a running state
        // (every row then has a finite lse), delta from a random output.
        auto [out, lse] = running_state(c, dt, 51);
        (void)ops::attention_block_forward(cpu.q(C), cpu.k(C), cpu.v(C), c.q_pos, c.k_pos, c.hd, out, lse, dropout_of(p));
        std::vector<double> lv = lse.to_vector<double>();
        for (double& x : lv) x = std::isinf(x) ? 0.5 : x;  // rows no block reached (not read)
        lse = ops::to_dtype(ops::from_vector(lv, lse.shape()), dt);
        const Tensor delta = rand_cpu({c.B, c.H, c.Lq}, dt, 52, -0.5, 0.5);
        // Gradients accumulate: start from non-zero dq and dk | dv (packed, strided views).
        Tensor dq_c = rand_cpu({c.B, c.Lq, C}, dt, 53), dkv_c = rand_cpu({c.B, c.Lk, 2 * C}, dt, 54);
        Tensor dq_g = dq_c.to(kGpu), dkv_g = dkv_c.to(kGpu);
        const Tensor dq0 = ops::clone(dq_c), dkv0 = ops::clone(dkv_c);
        Tensor dk_c = cols(dkv_c, 0, C), dv_c = cols(dkv_c, C, C), dk_g = cols(dkv_g, 0, C), dv_g = cols(dkv_g, C, C);
        const bool rc = ops::attention_block_backward(cpu.q(C), cpu.k(C), cpu.v(C), cpu.dout, lse, delta, c.q_pos,
                                                      c.k_pos, c.hd, dq_c, dk_c, dv_c, dropout_of(p));
        const bool rg = ops::attention_block_backward(gpu.q(C), gpu.k(C), gpu.v(C), gpu.dout, lse.to(kGpu),
                                                      delta.to(kGpu), c.q_pos, c.k_pos, c.hd, dq_g, dk_g, dv_g,
                                                      dropout_of(p));
        EXPECT_EQ(rg, rc) << what;
        expect_close(dq_g, dq_c, tol(dt), what + " dq");
        expect_close(dkv_g, dkv_c, tol(dt), what + " dk | dv");
        if (!rc) {
          expect_close(dq_g, dq0, Tol{0, 0}, what + " dq unchanged");
          expect_close(dkv_g, dkv0, Tol{0, 0}, what + " dk | dv unchanged");
        } else {  // the block contributed something (the comparison is not of two no-ops)
          EXPECT_NE(dkv_c.to_vector<double>(), dkv0.to_vector<double>()) << what;
          EXPECT_NE(dq_c.to_vector<double>(), dq0.to_vector<double>()) << what;
        }
      }
}

// What the kernels refuse, with the op named: mixed devices, 16-bit dtypes, head sizes
// past a warp's registers.
TEST(CudaAttentionBlock, RefusesWhatItCannotRun) {
  STRATA_REQUIRE_GPU();
  const Tensor q = ops::zeros({1, 4, 8}, DType::f32, kGpu);
  Tensor out = ops::zeros({1, 4, 8}, DType::f32, kGpu), lse = ops::full({1, 2, 4}, -INFINITY, DType::f32, kGpu);
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message([&] {
              Tensor lse_cpu = ops::full({1, 2, 4}, -INFINITY);
              ops::attention_block_forward(q, q, q, 0, 0, 4, out, lse_cpu);
            }).find("attention_block_forward"),
            std::string::npos);
  const Tensor qb = ops::zeros({1, 4, 8}, DType::bf16, kGpu);
  Tensor ob = ops::zeros({1, 4, 8}, DType::bf16, kGpu), lb = ops::zeros({1, 2, 4}, DType::bf16, kGpu);
  EXPECT_NE(message([&] { ops::attention_block_forward(qb, qb, qb, 0, 0, 4, ob, lb); }).find("f32 or f64"),
            std::string::npos);
  const Tensor big = ops::zeros({1, 2, 512}, DType::f32, kGpu);
  Tensor obig = ops::zeros({1, 2, 512}, DType::f32, kGpu), lbig = ops::zeros({1, 1, 2}, DType::f32, kGpu);
  EXPECT_NE(message([&] { ops::attention_block_forward(big, big, big, 0, 0, 512, obig, lbig); }).find("head_dim 512"),
            std::string::npos);
}

}  // namespace
}  // namespace strata
