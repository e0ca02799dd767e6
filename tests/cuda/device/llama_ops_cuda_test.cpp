// The Llama kernels on CUDA (RMSNorm, rotary embedding, SwiGLU, forward and backward)
// against their CPU twins in f32 and f64 (bf16 / f16: half_kernels_parity_test.cpp), and
// three Llama training steps (grouped-query attention, tied and untied heads) on the GPU
// against the CPU. Skips without a GPU.
#include <gtest/gtest.h>

#include "train_steps.h"
#include <strata/autograd/functions.h>
#include <strata/nn/llama.h>

namespace strata {
namespace {

using namespace test;  // kGpu, Tol, tol_for, expect_close, expect_same_bits, rand_cpu, gpu

TEST(CudaLlamaOps, RmsNormRotarySwigluMatchTheCpu) {
  STRATA_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64}) {
    const std::string name = dtype_name(dt);
    const Tensor x = rand_cpu({3, 5, 2, 8}, dt, 1), w = rand_cpu({8}, dt, 2), dy = rand_cpu({3, 5, 2, 8}, dt, 3);
    for (bool with_w : {true, false}) {
      const Tensor wc = with_w ? w : Tensor(), wg = with_w ? w.to(kGpu) : Tensor();
      const auto [yc, rc] = ops::rms_norm(x, wc, 1e-5);
      const auto [yg, rg] = ops::rms_norm(x.to(kGpu), wg, 1e-5);
      expect_close(yg, yc, name + " rms_norm y");
      expect_close(rg, rc, name + " rms_norm rstd");
      const auto [dxc, dwc] = ops::rms_norm_backward(dy, x, rc, wc);
      const auto [dxg, dwg] = ops::rms_norm_backward(dy.to(kGpu), x.to(kGpu), rg, wg);
      expect_close(dxg, dxc, name + " rms_norm dx");
      if (with_w) expect_close(dwg, dwc, name + " rms_norm dw");
      // the pending gradient added in the pass: the CPU's within tolerance, and on the GPU
      // rms_norm_backward then add_ bit for bit, fresh and in place
      const Tensor pend = rand_cpu({3, 5, 2, 8}, dt, 9);
      const auto [dac, dwac] = ops::rms_norm_backward_add(dy, x, rc, wc, pend, false);
      const auto [dag, dwag] = ops::rms_norm_backward_add(dy.to(kGpu), x.to(kGpu), rg, wg, pend.to(kGpu), false);
      expect_close(dag, dac, name + " rms_norm_backward_add dx");
      Tensor sum2 = pend.to(kGpu);
      ops::add_(sum2, dxg);
      expect_same_bits(dag, sum2, name + " rms_norm_backward_add vs rms_norm_backward + add_");
      if (with_w) expect_same_bits(dwag, dwg, name + " rms_norm_backward_add dw");
      Tensor acc = pend.to(kGpu);
      (void)ops::rms_norm_backward_add(dy.to(kGpu), x.to(kGpu), rg, wg, acc, true);
      expect_same_bits(acc, sum2, name + " rms_norm_backward_add in place");
    }
    // 300 rows: the weight gradient's column sums over several chunks of rows
    const Tensor xl = rand_cpu({300, 8}, dt, 4), dyl = rand_cpu({300, 8}, dt, 5);
    const auto [ylc, rlc] = ops::rms_norm(xl, w, 1e-5);
    const auto [ylg, rlg] = ops::rms_norm(xl.to(kGpu), w.to(kGpu), 1e-5);
    expect_close(ops::rms_norm_backward(dyl.to(kGpu), xl.to(kGpu), rlg, w.to(kGpu)).second,
                 ops::rms_norm_backward(dyl, xl, rlc, w).second, name + " rms_norm dw over 300 rows");
    const Tensor pos = ops::from_vector(std::vector<int64_t>{0, 1, 7, 1000, 123456}, {5});
    const Tensor inv = ops::from_vector(std::vector<double>{1.0, 0.1, 0.01, 1e-4}, {4});
    for (bool inverse : {false, true})
      expect_close(ops::rotary(x.to(kGpu), pos.to(kGpu), inv.to(kGpu), inverse), ops::rotary(x, pos, inv, inverse),
                   name + (inverse ? " rotary inverse" : " rotary"));
    const Tensor g = rand_cpu({7, 33}, dt, 6, -8, 8), u = rand_cpu({7, 33}, dt, 7), dys = rand_cpu({7, 33}, dt, 8);
    expect_close(ops::swiglu(g.to(kGpu), u.to(kGpu)), ops::swiglu(g, u), name + " swiglu");
    const auto [dgc, duc] = ops::swiglu_backward(dys, g, u);
    const auto [dgg, dug] = ops::swiglu_backward(dys.to(kGpu), g.to(kGpu), u.to(kGpu));
    expect_close(dgg, dgc, name + " swiglu dg");
    expect_close(dug, duc, name + " swiglu du");
  }
}

void llama_steps(bool tied) {
  nn::LlamaConfig cfg;
  cfg.vocab = 64;
  cfg.block_size = 16;
  cfg.n_layer = 2;
  cfg.n_head = 4;
  cfg.n_kv_head = 2;
  cfg.n_embd = 32;
  cfg.intermediate_size = 48;
  cfg.tie_weights = tied;
  Generator gc(7), gg(7);
  auto cpu_m = std::make_shared<nn::Llama>(cfg, gc);
  auto gpu_m = std::make_shared<nn::Llama>(cfg, gg);
  gpu_m->to(kGpu);
  test::expect_adamw_steps_match(*cpu_m, *gpu_m, cfg.vocab);
  test::expect_same_params(*gpu_m, *cpu_m, Tol{2e-5, 1e-4}, "after 3 AdamW steps");
}

TEST(CudaLlamaOps, LlamaTrainingStepsMatchTheCpu) {
  STRATA_REQUIRE_GPU();
  llama_steps(/*tied=*/false);
  llama_steps(/*tied=*/true);
}

}  // namespace
}  // namespace strata
