// The fused residual add + LayerNorm on CUDA (tensor/cuda/residual_norm.cu) against its CPU
// twin (f32, f64, bf16, f16; widths 37 and 768, 7 and 300 rows: several column-sum chunks)
// and, bit for bit, against the separate CUDA kernels it replaces (bias_residual_ then
// layer_norm; layer_norm_backward then add_, in place too); and a GPT on CUDA, where the
// default policy fuses, with the same loss and gradients as with the fusion off. Skips
// without a GPU.
#include <gtest/gtest.h>

#include "../cuda_test_util.h"
#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/nn/gpt.h>

namespace strata {
namespace {

using namespace test;  // kGpu, Tol, tol_for, expect_close, expect_same_bits, rand_cpu, gpu

TEST(CudaResidualNorm, MatchesTheCpuAndTheSeparateCudaKernels) {
  STRATA_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16})
    for (const int64_t rows : {7, 300})
      for (const int64_t C : {37, 768})
        for (bool params : {true, false}) {
          const std::string what = std::string(dtype_name(dt)) + " rows " + std::to_string(rows) + " C " +
                                   std::to_string(C) + (params ? " params" : " no params");
          const Tensor y = rand_cpu({rows, C}, dt, 1, -3, 3), r = rand_cpu({rows, C}, dt, 2);
          const Tensor b = params ? rand_cpu({C}, dt, 3) : Tensor(), w = params ? rand_cpu({C}, dt, 4, 0.5, 1.5) : Tensor();
          const Tensor lb = params ? rand_cpu({C}, dt, 5) : Tensor();
          const Tensor dz = rand_cpu({rows, C}, dt, 6), g = rand_cpu({rows, C}, dt, 7);
          Tensor sc = ops::clone(y), sg = gpu(y);
          const auto [zc, mc, rc] = ops::bias_residual_layer_norm_(sc, b, r, w, lb, 1e-5);
          const auto [zg, mg, rg] = ops::bias_residual_layer_norm_(sg, gpu(b), gpu(r), gpu(w), gpu(lb), 1e-5);
          expect_close(sg, sc, what + " s");
          expect_close(zg, zc, what + " z");
          expect_close(rg, rc, tol_for(rc.dtype()), what + " rstd");
          const auto [dsc, dwc, dbc] = ops::layer_norm_backward_add(dz, sc, mc, rc, w, params, g, false);
          const auto [dsg, dwg, dbg] =
              ops::layer_norm_backward_add(gpu(dz), sg, mg, rg, gpu(w), params, gpu(g), false);
          expect_close(dsg, dsc, what + " ds");
          if (params) {
            expect_close(dwg, dwc, what + " dw");
            expect_close(dbg, dbc, what + " db");
          }
          // the separate CUDA kernels, bit for bit
          Tensor s2 = gpu(y);
          ops::bias_residual_(s2, gpu(b), gpu(r));
          const auto [z2, m2, r2] = ops::layer_norm(s2, gpu(w), gpu(lb), 1e-5);
          expect_same_bits(sg, s2, what + " s vs bias_residual_");
          expect_same_bits(zg, z2, what + " z vs layer_norm");
          const auto [dx2, dw2, db2] = ops::layer_norm_backward(gpu(dz), s2, m2, r2, gpu(w), params);
          Tensor ds2 = gpu(g);
          ops::add_(ds2, dx2);
          expect_same_bits(dsg, ds2, what + " ds vs layer_norm_backward + add_");
          if (params) {
            expect_same_bits(dwg, dw2, what + " dw vs layer_norm_backward");
            expect_same_bits(dbg, db2, what + " db vs layer_norm_backward");
          }
          Tensor acc = gpu(g);
          (void)ops::layer_norm_backward_add(gpu(dz), sg, mg, rg, gpu(w), params, acc, true);
          expect_same_bits(acc, ds2, what + " ds in place");
        }
}

TEST(CudaResidualNorm, GptFusesByDefaultWithTheSameLossAndGradients) {
  STRATA_REQUIRE_GPU();
  const ResidualNormFusion saved = residual_norm_fusion();
  nn::GPTConfig cfg;
  cfg.vocab = 23;
  cfg.block_size = 16;
  cfg.n_layer = 2;
  cfg.n_head = 2;
  cfg.n_embd = 64;
  const Tensor idx = gpu(ops::to_dtype(rand_cpu({3, 16}, DType::i64, 8, 0, 23), DType::i64));
  const Tensor tgt = gpu(ops::to_dtype(rand_cpu({3, 16}, DType::i64, 9, 0, 23), DType::i64));
  std::vector<std::vector<double>> runs[2];
  for (ResidualNormFusion f : {ResidualNormFusion::automatic, ResidualNormFusion::never}) {
    set_residual_norm_fusion(f);
    Generator gen(5);
    nn::GPT model(cfg, gen);
    model.to(kGpu);
    Tensor loss = model.loss(idx, tgt);
    backward(loss);
    auto& out = runs[f == ResidualNormFusion::never ? 1 : 0];
    out.push_back(loss.to_vector<double>());
    for (const auto& [name, p] : model.named_parameters()) out.push_back(p.grad().to_vector<double>());
  }
  set_residual_norm_fusion(saved);
  ASSERT_EQ(runs[0].size(), runs[1].size());
  for (size_t k = 0; k < runs[0].size(); ++k) EXPECT_EQ(runs[0][k], runs[1][k]) << "tensor " << k << " (0: loss)";
}

}  // namespace
}  // namespace strata
