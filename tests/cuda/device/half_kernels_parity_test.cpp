// The f16/bf16 paths of the CUDA kernels a 16-bit model states step runs (elementwise,
// reductions, embedding, softmax, cross-entropy, layer norm, RMSNorm, batch norm, rotary,
// SwiGLU, bias + GELU, bias + residual, dropout, pooling, the multi-tensor norm / scale and
// the fused mixed optimizer steps) against the CPU kernel on the same 16-bit inputs.
// Both sides widen to f32, compute, and round once to nearest even, so they differ only by
// f32 rounding (summation order, libm vs the CPU's polynomial exp) carried into the last
// 16-bit bit. Tolerances: 16-bit outputs tol_for(dtype) (bf16: 1e-2 + 2e-2 relative, ~2-3
// ulps; f16: 2e-3 + 4e-3 relative, ~4 ulps); f32 outputs (statistics, probabilities,
// losses, master weights) kF32; exact (0) where both sides select or copy elements
// (max pooling, amax, masks, where). Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "../cuda_test_util.h"
#include <strata/tensor/half_ops.h>

namespace strata {
namespace {

using namespace test;  // kGpu, Tol, tol_for, expect_close, rand_cpu, gpu
using ops::BinaryOp;
using ops::CompareOp;
using ops::UnaryOp;

const DType k16[] = {DType::bf16, DType::f16};
const Tol kF32{1e-5, 1e-4};
const Tol kExact{0, 0};

std::string name_of(DType dt, const std::string& what) { return std::string(dtype_name(dt)) + " " + what; }

// A 16-bit result compared in its own dtype (and checked to be that dtype on both sides).
void expect_close16(const Tensor& got, const Tensor& want, DType dt, const std::string& what) {
  EXPECT_EQ(got.device(), kGpu) << what;
  EXPECT_EQ(want.dtype(), dt) << what;
  expect_close(got, want, test::tol_for(dt), name_of(dt, what));
}

TEST(CudaHalfParity, ElementwiseOps) {
  STRATA_REQUIRE_GPU();
  for (DType dt : k16) {
    for (int o = 0; o <= int(BinaryOp::minimum); ++o) {
      const auto op = BinaryOp(o);
      const double lo = op == BinaryOp::pow ? 0.1 : -3.0;
      const Tensor a = rand_cpu({3, 1, 50}, dt, 10, lo, 3.0), b = rand_cpu({4, 50}, dt, 11, lo + 0.25, 3.0);
      const std::string what = "binary " + std::to_string(o);
      expect_close16(ops::binary(op, gpu(a), gpu(b)), ops::binary(op, a, b), dt, what);
      const Tensor at = ops::transpose(rand_cpu({50, 4}, dt, 12, lo, 3.0), 0, 1);  // strided operand
      expect_close16(ops::binary(op, gpu(at), gpu(b)), ops::binary(op, at, b), dt, what + " strided");
      for (bool first : {false, true})
        expect_close16(ops::binary_scalar(op, gpu(a), 1.75, first), ops::binary_scalar(op, a, 1.75, first), dt,
                       what + " scalar");
    }
    const Tensor x = rand_cpu({7, 129}, dt, 13, -4, 4), pos = rand_cpu({7, 129}, dt, 14, 0.05, 6);
    for (int o = 0; o <= int(UnaryOp::reciprocal); ++o) {
      const auto op = UnaryOp(o);
      const bool positive = op == UnaryOp::log || op == UnaryOp::sqrt || op == UnaryOp::rsqrt;
      const Tensor in = positive ? pos : x;
      expect_close16(ops::unary(op, gpu(in)), ops::unary(op, in), dt, "unary " + std::to_string(o));
    }
    const Tensor g = rand_cpu({7, 129}, dt, 15);
    for (bool tanh_approx : {false, true})
      expect_close16(ops::gelu_backward(gpu(g), gpu(x), tanh_approx), ops::gelu_backward(g, x, tanh_approx), dt,
                     tanh_approx ? "gelu_tanh backward" : "gelu backward");
    // selections and comparisons are exact
    const Tensor y = rand_cpu({7, 129}, dt, 16, -4, 4);
    for (int o = 0; o <= int(CompareOp::ge); ++o) {
      expect_close(ops::compare(CompareOp(o), gpu(x), gpu(y)), ops::compare(CompareOp(o), x, y), kExact,
                   name_of(dt, "compare"));
      expect_close(ops::compare_scalar(CompareOp(o), gpu(x), 0.5), ops::compare_scalar(CompareOp(o), x, 0.5), kExact,
                   name_of(dt, "compare_scalar"));
    }
    const Tensor cond = ops::compare_scalar(CompareOp::gt, y, 0.0);
    expect_close(ops::where(gpu(cond), gpu(x), gpu(y)), ops::where(cond, x, y), kExact, name_of(dt, "where"));
    expect_close(ops::masked_fill(gpu(x), gpu(cond), -1e4), ops::masked_fill(x, cond, -1e4), kExact,
                 name_of(dt, "masked_fill"));
    for (double alpha : {1.0, -0.3}) {
      Tensor dc = ops::clone(x), dg = gpu(x);
      const Tensor row = ops::narrow(y, 0, 2, 1);  // broadcast source
      ops::add_(dc, row, alpha);
      ops::add_(dg, gpu(row), alpha);
      expect_close16(dg, dc, dt, "add_ alpha " + std::to_string(alpha));
    }
    Tensor mc = ops::clone(x), mg = gpu(x);
    ops::mul_(mc, 0.37);
    ops::mul_(mg, 0.37);
    expect_close16(mg, mc, dt, "mul_");
  }
}

TEST(CudaHalfParity, Reductions) {
  STRATA_REQUIRE_GPU();
  for (DType dt : k16) {
    const Tensor ties = rand_cpu({6, 300, 5}, dt, 20, 0, 4);  // few distinct values: many ties
    for (int64_t dim : {0, 1, 2}) {
      expect_close(ops::amax(gpu(ties), dim), ops::amax(ties, dim), kExact, name_of(dt, "amax"));
      expect_close(ops::argmax(gpu(ties), dim), ops::argmax(ties, dim), kExact, name_of(dt, "argmax"));
    }
    const Tensor big = rand_cpu({100003}, dt, 21);
    const double want = ops::sum_squares(big);
    EXPECT_NEAR(ops::sum_squares(gpu(big)), want, 1e-9 * want) << dtype_name(dt);
    expect_close16(ops::sum(gpu(rand_cpu({300, 70}, dt, 22)), {0}), ops::sum(rand_cpu({300, 70}, dt, 22), {0}), dt,
                   "sum over rows");
  }
}

TEST(CudaHalfParity, EmbeddingForwardAndBackward) {
  STRATA_REQUIRE_GPU();
  for (DType dt : k16) {
    const Tensor w = rand_cpu({40, 24}, dt, 30);
    const Tensor idx = ops::to_dtype(rand_cpu({6, 20}, DType::i64, 31, 0, 40), DType::i64);  // repeats
    expect_close(ops::embedding(gpu(w), gpu(idx)), ops::embedding(w, idx), kExact, name_of(dt, "embedding"));
    const Tensor dy = rand_cpu({6, 20, 24}, dt, 32);
    expect_close16(ops::embedding_backward(gpu(dy), gpu(idx), 40), ops::embedding_backward(dy, idx, 40), dt,
                   "embedding_backward (rows summed in f32)");
  }
}

TEST(CudaHalfParity, SoftmaxAndCrossEntropy) {
  STRATA_REQUIRE_GPU();
  for (DType dt : k16) {
    const Tensor x = rand_cpu({5, 37, 6}, dt, 40, -6, 6), dy = rand_cpu({5, 37, 6}, dt, 41);
    for (int64_t dim : {2, 1, 0}) {  // rows (block per row) and columns (thread per column)
      for (bool log : {false, true}) {
        const std::string what = std::string(log ? "log_softmax" : "softmax") + " dim " + std::to_string(dim);
        const Tensor yc = log ? ops::log_softmax(x, dim) : ops::softmax(x, dim);
        const Tensor yg = log ? ops::log_softmax(gpu(x), dim) : ops::softmax(gpu(x), dim);
        expect_close16(yg, yc, dt, what);
        // both backwards read the CPU's 16-bit y, so only the backward's arithmetic differs
        const Tensor dxc = log ? ops::log_softmax_backward(dy, yc, dim) : ops::softmax_backward(dy, yc, dim);
        const Tensor dxg =
            log ? ops::log_softmax_backward(gpu(dy), gpu(yc), dim) : ops::softmax_backward(gpu(dy), gpu(yc), dim);
        expect_close16(dxg, dxc, dt, what + " backward");
      }
    }
    // cross-entropy: f32 loss and probabilities, a 16-bit logit gradient; ignored rows
    const Tensor logits = rand_cpu({33, 50}, dt, 42, -5, 5);
    std::vector<int64_t> t(33);
    for (size_t i = 0; i < t.size(); ++i) t[i] = i % 7 == 3 ? -100 : int64_t((i * 13) % 50);
    const Tensor tgt = ops::from_vector(t, {33});
    const auto [lc, pc] = ops::cross_entropy(logits, tgt, -100);
    const auto [lg, pg] = ops::cross_entropy(gpu(logits), gpu(tgt), -100);
    EXPECT_EQ(lg.dtype(), DType::f32);
    EXPECT_EQ(pg.dtype(), DType::f32);
    expect_close(lg, lc, kF32, name_of(dt, "cross_entropy loss"));
    expect_close(pg, pc, kF32, name_of(dt, "cross_entropy probs"));
    const Tensor dloss = ops::full({}, 0.75);
    const Tensor dc = ops::cross_entropy_backward(ops::to_dtype(dloss, DType::f32), pc, tgt, -100, dt);
    const Tensor dg = ops::cross_entropy_backward(gpu(ops::to_dtype(dloss, DType::f32)), gpu(pc), gpu(tgt), -100, dt);
    expect_close16(dg, dc, dt, "cross_entropy_backward");
  }
}

TEST(CudaHalfParity, LayerNormRmsNormBatchNorm) {
  STRATA_REQUIRE_GPU();
  for (DType dt : k16) {
    // 300 rows: the parameter gradients' column sums run over several chunks of rows
    for (int64_t rows : {5, 300}) {
      const Tensor x = rand_cpu({rows, 48}, dt, 50, -3, 3), dy = rand_cpu({rows, 48}, dt, 51);
      const Tensor w = rand_cpu({48}, dt, 52, 0.5, 1.5), b = rand_cpu({48}, dt, 53);
      const std::string r = " (" + std::to_string(rows) + " rows)";
      const auto [yc, mc, rc] = ops::layer_norm(x, w, b, 1e-5);
      const auto [yg, mg, rg] = ops::layer_norm(gpu(x), gpu(w), gpu(b), 1e-5);
      EXPECT_EQ(mg.dtype(), DType::f32);
      EXPECT_EQ(rg.dtype(), DType::f32);
      expect_close16(yg, yc, dt, "layer_norm y" + r);
      expect_close(mg, mc, kF32, name_of(dt, "layer_norm mean (f32)" + r));
      expect_close(rg, rc, kF32, name_of(dt, "layer_norm rstd (f32)" + r));
      const auto [dxc, dwc, dbc] = ops::layer_norm_backward(dy, x, mc, rc, w, true);
      const auto [dxg, dwg, dbg] = ops::layer_norm_backward(gpu(dy), gpu(x), gpu(mc), gpu(rc), gpu(w), true);
      expect_close16(dxg, dxc, dt, "layer_norm dx" + r);
      expect_close16(dwg, dwc, dt, "layer_norm dw" + r);
      expect_close16(dbg, dbc, dt, "layer_norm db" + r);
      const auto [ryc, rrc] = ops::rms_norm(x, w, 1e-5);
      const auto [ryg, rrg] = ops::rms_norm(gpu(x), gpu(w), 1e-5);
      EXPECT_EQ(rrg.dtype(), DType::f32);
      expect_close16(ryg, ryc, dt, "rms_norm y" + r);
      expect_close(rrg, rrc, kF32, name_of(dt, "rms_norm rstd (f32)" + r));
      const auto [rdxc, rdwc] = ops::rms_norm_backward(dy, x, rrc, w);
      const auto [rdxg, rdwg] = ops::rms_norm_backward(gpu(dy), gpu(x), gpu(rrc), gpu(w));
      expect_close16(rdxg, rdxc, dt, "rms_norm dx" + r);
      expect_close16(rdwg, rdwc, dt, "rms_norm dw" + r);
    }
    // batch norm: statistics in the input's dtype, running statistics updated in place
    const Tensor x = rand_cpu({4, 3, 5, 6}, dt, 54, -2, 3), dy = rand_cpu({4, 3, 5, 6}, dt, 55);
    const Tensor w = rand_cpu({3}, dt, 56, 0.5, 1.5), b = rand_cpu({3}, dt, 57);
    for (bool training : {true, false}) {
      Tensor rmc = rand_cpu({3}, dt, 58, -0.5, 0.5), rvc = rand_cpu({3}, dt, 59, 0.5, 2);
      Tensor rmg = gpu(rmc), rvg = gpu(rvc);
      const std::string what = training ? "batch_norm training" : "batch_norm eval";
      const auto [yc, smc, sic] = ops::batch_norm(x, w, b, rmc, rvc, training, 0.1, 1e-5);
      const auto [yg, smg, sig] = ops::batch_norm(gpu(x), gpu(w), gpu(b), rmg, rvg, training, 0.1, 1e-5);
      expect_close16(yg, yc, dt, what + " y");
      expect_close16(smg, smc, dt, what + " save_mean");
      expect_close16(sig, sic, dt, what + " save_invstd");
      expect_close16(rmg, rmc, dt, what + " running_mean");
      expect_close16(rvg, rvc, dt, what + " running_var");
      const auto [dxc, dwc, dbc] = ops::batch_norm_backward(dy, x, w, smc, sic, training);
      const auto [dxg, dwg, dbg] = ops::batch_norm_backward(gpu(dy), gpu(x), gpu(w), gpu(smc), gpu(sic), training);
      expect_close16(dxg, dxc, dt, what + " dx");
      expect_close16(dwg, dwc, dt, what + " dw");
      expect_close16(dbg, dbc, dt, what + " db");
    }
  }
}

TEST(CudaHalfParity, RotarySwigluBiasGeluBiasResidual) {
  STRATA_REQUIRE_GPU();
  for (DType dt : k16) {
    const Tensor x = rand_cpu({3, 5, 4, 8}, dt, 60);
    const Tensor pos = ops::from_vector(std::vector<int64_t>{0, 1, 7, 1000, 12345}, {5});
    const Tensor inv = ops::from_vector(std::vector<double>{1.0, 0.1, 0.01, 1e-4}, {4});
    for (bool inverse : {false, true})
      for (int64_t rotated : {-1, 2})
        expect_close16(ops::rotary(gpu(x), gpu(pos), gpu(inv), inverse, rotated),
                       ops::rotary(x, pos, inv, inverse, rotated), dt, "rotary");
    const Tensor g = rand_cpu({7, 33}, dt, 61, -8, 8), u = rand_cpu({7, 33}, dt, 62), dy = rand_cpu({7, 33}, dt, 63);
    expect_close16(ops::swiglu(gpu(g), gpu(u)), ops::swiglu(g, u), dt, "swiglu");
    const auto [dgc, duc] = ops::swiglu_backward(dy, g, u);
    const auto [dgg, dug] = ops::swiglu_backward(gpu(dy), gpu(g), gpu(u));
    expect_close16(dgg, dgc, dt, "swiglu dg");
    expect_close16(dug, duc, dt, "swiglu du");
    const Tensor y = rand_cpu({40, 33}, dt, 64, -4, 4), b = rand_cpu({33}, dt, 65), dout = rand_cpu({40, 33}, dt, 66);
    for (bool tanh_approx : {false, true}) {
      expect_close16(ops::bias_gelu(gpu(y), gpu(b), tanh_approx), ops::bias_gelu(y, b, tanh_approx), dt, "bias_gelu");
      const auto [dhc, dbc] = ops::bias_gelu_backward(dout, y, b, tanh_approx, true);
      const auto [dhg, dbg] = ops::bias_gelu_backward(gpu(dout), gpu(y), gpu(b), tanh_approx, true);
      expect_close16(dhg, dhc, dt, "bias_gelu_backward dh");
      // the CPU sums dh before rounding it, the CUDA kernel after: 40 rows of rounding noise
      const Tol tb = test::tol_for(dt);
      expect_close(dbg, dbc, Tol{4 * tb.abs, tb.rel}, name_of(dt, "bias_gelu_backward db"));
    }
    Tensor rc = ops::clone(y), rg = gpu(y);
    const Tensor res = rand_cpu({40, 33}, dt, 67);
    ops::bias_residual_(rc, b, res);
    ops::bias_residual_(rg, gpu(b), gpu(res));
    expect_close16(rg, rc, dt, "bias_residual_");
  }
}

TEST(CudaHalfParity, DropoutAndPooling) {
  STRATA_REQUIRE_GPU();
  for (DType dt : k16) {
    const Tensor x = rand_cpu({9, 101}, dt, 70);
    Generator gc(5), gg(5);
    const auto [yc, mc] = ops::dropout(x, 0.3, gc);
    const auto [yg, mg] = ops::dropout(gpu(x), 0.3, gg);
    expect_close(mg, mc, kExact, name_of(dt, "dropout mask"));
    expect_close16(yg, yc, dt, "dropout y");
    expect_close16(ops::dropout_backward(gpu(x), mg, 0.3), ops::dropout_backward(x, mc, 0.3), dt, "dropout backward");
    const Tensor img = rand_cpu({2, 3, 9, 10}, dt, 71);
    for (const ops::Pool2dParams p : {ops::Pool2dParams{}, ops::Pool2dParams{3, 3, 2, 2, 1, 1}}) {
      const auto [pyc, pic] = ops::max_pool2d(img, p);
      const auto [pyg, pig] = ops::max_pool2d(gpu(img), p);
      expect_close(pyg, pyc, kExact, name_of(dt, "max_pool2d y"));
      expect_close(pig, pic, kExact, name_of(dt, "max_pool2d argmax"));
      const Tensor dy = rand_cpu(pyc.shape(), dt, 72);
      expect_close16(ops::max_pool2d_backward(gpu(dy), pig, img.shape()), ops::max_pool2d_backward(dy, pic, img.shape()),
                     dt, "max_pool2d backward");
      expect_close16(ops::avg_pool2d(gpu(img), p), ops::avg_pool2d(img, p), dt, "avg_pool2d");
      const Tensor ady = rand_cpu(ops::avg_pool2d(img, p).shape(), dt, 73);
      expect_close16(ops::avg_pool2d_backward(gpu(ady), img.shape(), p), ops::avg_pool2d_backward(ady, img.shape(), p),
                     dt, "avg_pool2d backward");
    }
  }
}

// The multi-tensor gradient norm and scale of clipping over 16-bit gradients (a list of
// several dtypes and sizes, across chunk boundaries).
TEST(CudaHalfParity, MultiTensorNormAndScale) {
  STRATA_REQUIRE_GPU();
  std::vector<Tensor> cs = {rand_cpu({70000}, DType::bf16, 80), rand_cpu({3, 5}, DType::f16, 81),
                            rand_cpu({131073}, DType::f32, 82), rand_cpu({17}, DType::bf16, 83)};
  std::vector<Tensor> gs;
  for (const Tensor& t : cs) gs.push_back(gpu(t));
  const double want = ops::sum_squares_multi(cs);
  EXPECT_NEAR(ops::sum_squares_multi(gs), want, 1e-9 * want);
  ops::mul_multi_(cs, 0.3);
  ops::mul_multi_(gs, 0.3);
  for (size_t i = 0; i < cs.size(); ++i) expect_close(gs[i], cs[i], "mul_multi_ entry " + std::to_string(i));
}

// The fused mixed steps: f32 masters and state as the CPU's within f32 rounding, and the
// 16-bit parameter exactly the rounding of the new master, over three steps with 16-bit and
// f32 gradients.
TEST(CudaHalfParity, MixedOptimizerSteps) {
  STRATA_REQUIRE_GPU();
  const int64_t n = 70001;  // several blocks, a ragged tail
  for (DType dt : k16)
    for (DType gdt : {dt, DType::f32}) {
      const std::string what = std::string(dtype_name(dt)) + " params, " + dtype_name(gdt) + " grads";
      for (bool decoupled : {false, true}) {
        Tensor wc = rand_cpu({n}, DType::f32, 90), mc = ops::zeros({n}), vc = ops::zeros({n});
        Tensor pc = ops::to_dtype(wc, dt);
        Tensor wg = gpu(wc), mg = gpu(mc), vg = gpu(vc), pg = gpu(pc);
        for (int64_t step = 1; step <= 3; ++step) {
          const Tensor g = rand_cpu({n}, gdt, 91 + uint64_t(step), -1e-2, 1e-2);
          const ops::AdamParams ap{1e-2, 0.9, 0.99, 1e-8, 0.1, step, decoupled};
          ops::adam_step_mixed_(wc, pc, g, mc, vc, ap);
          ops::adam_step_mixed_(wg, pg, gpu(g), mg, vg, ap);
        }
        const std::string a = what + (decoupled ? " AdamW" : " Adam");
        expect_close(wg, wc, Tol{1e-6, 1e-5}, a + " master");
        expect_close(mg, mc, Tol{1e-9, 1e-5}, a + " m");
        expect_close(vg, vc, Tol{1e-12, 1e-5}, a + " v");
        expect_close(pg, pc, a + " param16");
        expect_close(pg, ops::to_dtype(wg, dt), kExact, a + ": param16 is the rounded master");
      }
      const std::pair<double, bool> kSgdCases[] = {{0.0, false}, {0.9, false}, {0.9, true}};  // momentum, nesterov
      for (const auto& [momentum, nesterov] : kSgdCases) {
        Tensor wc = rand_cpu({n}, DType::f32, 95), bc = ops::zeros({n}), pc = ops::to_dtype(wc, dt);
        Tensor wg = gpu(wc), bg = gpu(bc), pg = gpu(pc);
        for (int64_t step = 1; step <= 3; ++step) {
          const Tensor g = rand_cpu({n}, gdt, 96 + uint64_t(step));
          const ops::SgdParams sp{0.05, momentum, 0.0, 1e-3, nesterov, step == 1};
          ops::sgd_step_mixed_(wc, pc, g, bc, sp);
          ops::sgd_step_mixed_(wg, pg, gpu(g), bg, sp);
        }
        const std::string s = what + " SGD momentum " + std::to_string(momentum) + (nesterov ? " nesterov" : "");
        expect_close(wg, wc, Tol{1e-6, 1e-5}, s + " master");
        if (momentum != 0) expect_close(bg, bc, Tol{1e-6, 1e-5}, s + " momentum buffer");
        expect_close(pg, pc, s + " param16");
        expect_close(pg, ops::to_dtype(wg, dt), kExact, s + ": param16 is the rounded master");
      }
    }
}

}  // namespace
}  // namespace strata
