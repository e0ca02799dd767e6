// CUDA vs CPU: reductions (every code path: warp rows, thread columns, chunked
// partials), softmax, cross-entropy, layer/batch norm, conv, pooling, embedding, index
// ops, dropout and the fused optimizer steps. Skips without a GPU.
#include <gtest/gtest.h>

#include <functional>
#include <limits>

#include "../cuda_test_util.h"

namespace strata {
namespace {

using namespace test;  // kGpu, Tol, tol_for, expect_close, rand_cpu, gpu


// Sums over many elements: both sides accumulate in f64, f32 outputs round once.
const Tol kSumTol{1e-4, 1e-5};

TEST(CudaParity, SumAndMeanOverEveryLayout) {
  STRATA_REQUIRE_GPU();
  struct Case {
    Shape shape;
    std::vector<int64_t> dims;
    bool transpose;
  };
  const Case cases[] = {
      {{1000003}, {}, false},          // all, chunked warp rows
      {{3, 100000}, {1}, false},       // few long rows, chunked
      {{5000, 7}, {1}, false},         // many short rows (thread per output)
      {{100000, 3}, {0}, false},       // column sums, chunked
      {{4096, 768}, {0}, false},       // bias-gradient shape
      {{4, 5000, 6}, {1}, false},      // middle dim
      {{2, 3, 4, 5}, {0, 2}, false},   // two separated dims
      {{2, 3, 4, 5}, {-1, 1}, false},  // negative dims
      {{64, 300}, {0}, true},          // transposed input: fastest dim reduced
      {{64, 300}, {1}, true},
      {{0, 5}, {0}, false},            // empty reduction
  };
  for (DType dt : {DType::f32, DType::f64}) {
    for (const auto& c : cases) {
      Tensor x = rand_cpu(c.shape, dt, 60);
      if (c.transpose) x = ops::transpose(x, 0, 1);
      // the same view on the device: transposing back gives the contiguous original
      const Tensor gx = c.transpose ? ops::transpose(gpu(ops::transpose(x, 0, 1)), 0, 1) : gpu(x);
      const std::string what = "sum " + shape_str(x.shape()) + (c.transpose ? " transposed" : "");
      expect_close(ops::sum(gx, c.dims), ops::sum(x, c.dims), kSumTol, what);
      expect_close(ops::mean(gx, c.dims, true), ops::mean(x, c.dims, true), kSumTol, "mean keepdim " + what);
    }
  }
  expect_close(ops::sum_to_shape(gpu(rand_cpu({8, 3, 5}, DType::f32, 61)), {3, 1}),
               ops::sum_to_shape(rand_cpu({8, 3, 5}, DType::f32, 61), {3, 1}), kSumTol, "sum_to_shape");
  const Tensor big = rand_cpu({300001}, DType::f32, 62);
  EXPECT_NEAR(ops::sum_squares(gpu(big)), ops::sum_squares(big), 1e-9 * ops::sum_squares(big));
}

TEST(CudaParity, MaxArgmaxWithTiesAndNaN) {
  STRATA_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64, DType::i32, DType::i64, DType::u8}) {
    Tensor x = rand_cpu({6, 300, 5}, dt, 70, 0, 4);  // few distinct values: many ties
    for (int64_t dim : {0, 1, 2, -1}) {
      expect_close(ops::amax(gpu(x), dim), ops::amax(x, dim), "amax");
      expect_close(ops::argmax(gpu(x), dim), ops::argmax(x, dim), "argmax (first on ties)");
    }
  }
  std::vector<double> v(2000, 1.0);
  v[700] = std::numeric_limits<double>::quiet_NaN();
  v[1500] = std::numeric_limits<double>::quiet_NaN();
  v[100] = 5.0;
  const Tensor x = ops::to_dtype(ops::from_vector(v, {2, 1000}), DType::f32);
  expect_close(ops::argmax(gpu(x), 1), ops::argmax(x, 1), "argmax: first NaN wins");
  expect_close(ops::amax(gpu(x), 0), ops::amax(x, 0), "amax: NaN propagates");
}

TEST(CudaParity, SoftmaxAndLogSoftmax) {
  STRATA_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64}) {
    for (const auto& [shape, dim] : {std::pair{Shape{64, 129}, int64_t(-1)}, {Shape{8, 5000}, 1},
                                     {Shape{4, 33, 7}, 1}, {Shape{3, 5, 2}, 0}}) {
      const Tensor x = rand_cpu(shape, dt, 80, -8, 8), dy = rand_cpu(shape, dt, 81);
      for (bool log : {false, true}) {
        const Tensor y = log ? ops::log_softmax(x, dim) : ops::softmax(x, dim);
        const Tensor gy = log ? ops::log_softmax(gpu(x), dim) : ops::softmax(gpu(x), dim);
        expect_close(gy, y, std::string(log ? "log_" : "") + "softmax " + shape_str(shape));
        const Tensor dx = log ? ops::log_softmax_backward(dy, y, dim) : ops::softmax_backward(dy, y, dim);
        const Tensor gdx = log ? ops::log_softmax_backward(gpu(dy), gy, dim) : ops::softmax_backward(gpu(dy), gy, dim);
        expect_close(gdx, dx, std::string(log ? "log_" : "") + "softmax backward " + shape_str(shape));
      }
    }
  }
  // a row masked with -inf (causal attention)
  Tensor m = rand_cpu({4, 4}, DType::f32, 82);
  m = ops::masked_fill(m, ops::compare_scalar(ops::CompareOp::gt, rand_cpu({4, 4}, DType::f32, 83), 0.5),
                       -std::numeric_limits<double>::infinity());
  expect_close(ops::softmax(gpu(m), -1), ops::softmax(m, -1), "softmax with -inf entries");
}

TEST(CudaParity, CrossEntropyWithIgnoredTargets) {
  STRATA_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64})
    for (DType it : {DType::i64, DType::i32}) {
      const int64_t N = 300, C = 50;
      const Tensor logits = rand_cpu({N, C}, dt, 90, -5, 5);
      std::vector<int64_t> t(static_cast<size_t>(N));
      for (int64_t i = 0; i < N; ++i) t[size_t(i)] = i % 7 == 0 ? -100 : (i * 13) % C;
      const Tensor target = ops::to_dtype(ops::from_vector(t, {N}), it);
      const auto [loss, probs] = ops::cross_entropy(logits, target, -100);
      const auto [gloss, gprobs] = ops::cross_entropy(gpu(logits), gpu(target), -100);
      expect_close(gloss, loss, "cross_entropy loss");
      expect_close(gprobs, probs, "cross_entropy probs");
      const Tensor dl = ops::full({}, 0.75, dt);
      expect_close(ops::cross_entropy_backward(gpu(dl), gprobs, gpu(target), -100),
                   ops::cross_entropy_backward(dl, probs, target, -100), "cross_entropy backward");
    }
  // every target ignored: loss 0 and zero gradient, as on the CPU
  const Tensor logits = rand_cpu({3, 4}, DType::f32, 91);
  const Tensor ign = ops::full({3}, -1, DType::i64);
  EXPECT_EQ(ops::cross_entropy(gpu(logits), gpu(ign), -1).first.item<double>(), 0.0);
}

TEST(CudaParity, OutOfRangeIndicesThrowTheCpuMessage) {
  STRATA_REQUIRE_GPU();
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const Tensor logits = rand_cpu({4, 5}, DType::f32, 92);
  const Tensor bad = ops::from_vector(std::vector<int64_t>{1, 7, 2, 9}, {4});
  const std::string want_ce = message([&] { (void)ops::cross_entropy(logits, bad, -100); });
  const std::string got_ce = message([&] { (void)ops::cross_entropy(gpu(logits), gpu(bad), -100); });
  EXPECT_NE(got_ce.find("[cross_entropy] target 7 at row 1 is out of range for 5 classes"), std::string::npos)
      << got_ce;
  EXPECT_NE(want_ce.find("[cross_entropy] target 7 at row 1 is out of range for 5 classes"), std::string::npos)
      << want_ce;
  const Tensor w = rand_cpu({5, 3}, DType::f32, 93);
  const std::string got_emb = message([&] { (void)ops::embedding(gpu(w), gpu(bad)); });
  EXPECT_NE(got_emb.find("[embedding] index 7 at position 1 is out of range for 5 embeddings"), std::string::npos)
      << got_emb;
  const std::string got_sel = message([&] { (void)ops::index_select(gpu(w), 0, gpu(bad)); });
  EXPECT_NE(got_sel.find("[index_select] index 7 is out of range for dim 0 of size 5"), std::string::npos) << got_sel;
  // the device is still usable afterwards (no kernel ran out of bounds)
  expect_close(ops::embedding(gpu(w), gpu(ops::from_vector(std::vector<int64_t>{4, 0}, {2}))),
               ops::embedding(w, ops::from_vector(std::vector<int64_t>{4, 0}, {2})), "embedding after an error");
}

TEST(CudaParity, LayerNormForwardBackward) {
  STRATA_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64})
    for (int64_t rows : {int64_t(7), int64_t(6000)})
      for (int affine = 0; affine < 3; ++affine) {  // weight+bias, weight only, neither
        const int64_t C = 96;
        const Tensor x = rand_cpu({rows, C}, dt, 100, -3, 3), dy = rand_cpu({rows, C}, dt, 101);
        const Tensor w = affine < 2 ? rand_cpu({C}, dt, 102) : Tensor();
        const Tensor b = affine < 1 ? rand_cpu({C}, dt, 103) : Tensor();
        auto opt_gpu = [](const Tensor& t) { return t.defined() ? gpu(t) : t; };
        const auto [y, mean, rstd] = ops::layer_norm(x, w, b, 1e-5);
        const auto [gy, gmean, grstd] = ops::layer_norm(gpu(x), opt_gpu(w), opt_gpu(b), 1e-5);
        expect_close(gy, y, "layer_norm y");
        expect_close(gmean, mean, "layer_norm mean");
        expect_close(grstd, rstd, "layer_norm rstd");
        const auto [dx, dw, db] = ops::layer_norm_backward(dy, x, mean, rstd, w, b.defined());
        const auto [gdx, gdw, gdb] = ops::layer_norm_backward(gpu(dy), gpu(x), gmean, grstd, opt_gpu(w), b.defined());
        expect_close(gdx, dx, "layer_norm dx");
        // the CPU sums the parameter gradients over rows in the input dtype
        const Tol ptol = dt == DType::f32 ? Tol{1e-3, 1e-4} : test::tol_for(dt);
        if (dw.defined()) expect_close(gdw, dw, ptol, "layer_norm dw");
        if (db.defined()) expect_close(gdb, db, ptol, "layer_norm db");
      }
}

TEST(CudaParity, BatchNormTrainAndEval) {
  STRATA_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64})
    for (const Shape& s : {Shape{8, 3, 5, 4}, Shape{16, 10}}) {
      const int64_t C = s[1];
      const Tensor x = rand_cpu(s, dt, 110, -2, 3), dy = rand_cpu(s, dt, 111);
      const Tensor w = rand_cpu({C}, dt, 112), b = rand_cpu({C}, dt, 113);
      Tensor rm = rand_cpu({C}, dt, 114), rv = rand_cpu({C}, dt, 115, 0.5, 2.0);
      Tensor grm = gpu(rm), grv = gpu(rv);
      for (bool training : {true, false}) {
        const auto [y, sm, si] = ops::batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5);
        const auto [gy, gsm, gsi] = ops::batch_norm(gpu(x), gpu(w), gpu(b), grm, grv, training, 0.1, 1e-5);
        expect_close(gy, y, "batch_norm y");
        expect_close(gsm, sm, "batch_norm save_mean");
        expect_close(gsi, si, "batch_norm save_invstd");
        expect_close(grm, rm, "batch_norm running_mean");
        expect_close(grv, rv, "batch_norm running_var");
        const auto [dx, dw, db] = ops::batch_norm_backward(dy, x, w, sm, si, training);
        const auto [gdx, gdw, gdb] = ops::batch_norm_backward(gpu(dy), gpu(x), gpu(w), gsm, gsi, training);
        expect_close(gdx, dx, "batch_norm dx");
        expect_close(gdw, dw, "batch_norm dw");
        expect_close(gdb, db, "batch_norm db");
      }
    }
}

TEST(CudaParity, Conv2dForwardBackward) {
  STRATA_REQUIRE_GPU();
#ifndef STRATA_WITH_CUDNN
  GTEST_SKIP() << "built without cuDNN";
#endif
  struct Case {
    Shape x, w;
    ops::Conv2dParams p;
    bool bias;
  };
  const Case cases[] = {
      {{2, 3, 9, 9}, {4, 3, 3, 3}, {1, 1, 1, 1}, true},
      {{3, 2, 8, 10}, {5, 2, 3, 2}, {2, 1, 0, 1}, false},
      {{2, 4, 6, 6}, {3, 4, 1, 1}, {1, 1, 0, 0}, true},
      {{1, 1, 28, 28}, {8, 1, 5, 5}, {1, 1, 2, 2}, true},
  };
  for (DType dt : {DType::f32, DType::f64})
    for (const auto& c : cases) {
      const Tensor x = rand_cpu(c.x, dt, 120), w = rand_cpu(c.w, dt, 121, -0.5, 0.5);
      const Tensor b = c.bias ? rand_cpu({c.w[0]}, dt, 122) : Tensor();
      const Tensor y = ops::conv2d(x, w, b, c.p);
      const Tensor gy = ops::conv2d(gpu(x), gpu(w), c.bias ? gpu(b) : Tensor(), c.p);
      const Tol tol = dt == DType::f32 ? Tol{1e-4, 1e-4} : test::tol_for(dt);
      expect_close(gy, y, tol, "conv2d " + shape_str(c.x) + " * " + shape_str(c.w));
      const Tensor dy = rand_cpu(y.shape(), dt, 123);
      const auto [dx, dw, db] = ops::conv2d_backward(dy, x, w, c.bias, c.p);
      const auto [gdx, gdw, gdb] = ops::conv2d_backward(gpu(dy), gpu(x), gpu(w), c.bias, c.p);
      expect_close(gdx, dx, tol, "conv2d dx");
      expect_close(gdw, dw, tol, "conv2d dw");
      if (c.bias) expect_close(gdb, db, tol, "conv2d db");
    }
}

TEST(CudaParity, Pooling) {
  STRATA_REQUIRE_GPU();
  const ops::Pool2dParams params[] = {{2, 2, 2, 2, 0, 0}, {3, 3, 2, 2, 1, 1}, {3, 2, 1, 2, 1, 0}};
  for (DType dt : {DType::f32, DType::f64})
    for (const auto& p : params) {
      const Tensor x = rand_cpu({2, 3, 9, 8}, dt, 130, 0, 3);  // ties: values repeat
      const auto [y, idx] = ops::max_pool2d(x, p);
      const auto [gy, gidx] = ops::max_pool2d(gpu(x), p);
      expect_close(gy, y, "max_pool2d");
      expect_close(gidx, idx, "max_pool2d indices");
      const Tensor dy = rand_cpu(y.shape(), dt, 131);
      expect_close(ops::max_pool2d_backward(gpu(dy), gidx, x.shape()), ops::max_pool2d_backward(dy, idx, x.shape()),
                   "max_pool2d backward");
      expect_close(ops::avg_pool2d(gpu(x), p), ops::avg_pool2d(x, p), "avg_pool2d");
      expect_close(ops::avg_pool2d_backward(gpu(dy), x.shape(), p), ops::avg_pool2d_backward(dy, x.shape(), p),
                   "avg_pool2d backward");
    }
}

TEST(CudaParity, EmbeddingAndIndexOps) {
  STRATA_REQUIRE_GPU();
  for (DType it : {DType::i64, DType::i32}) {
    const Tensor w = rand_cpu({50, 16}, DType::f32, 140);
    const Tensor idx = ops::to_dtype(ops::from_vector(std::vector<int64_t>{3, 49, 0, 3, 3, 17, 49, 8}, {2, 4}), it);
    expect_close(ops::embedding(gpu(w), gpu(idx)), ops::embedding(w, idx), "embedding");
    const Tensor dy = rand_cpu({2, 4, 16}, DType::f32, 141);
    expect_close(ops::embedding_backward(gpu(dy), gpu(idx), 50), ops::embedding_backward(dy, idx, 50),
                 "embedding backward (repeated rows)");
    const Tensor t = rand_cpu({6, 5, 4}, DType::f64, 142);
    const Tensor i1 = ops::to_dtype(ops::from_vector(std::vector<int64_t>{4, 0, 4, 2}, {4}), it);
    for (int64_t d : {0, 1}) {
      expect_close(ops::index_select(gpu(t), d, gpu(i1)), ops::index_select(t, d, i1), "index_select");
      const Tensor sel = ops::index_select(t, d, i1);
      expect_close(ops::index_add(t.shape(), d, gpu(i1), gpu(sel)), ops::index_add(t.shape(), d, i1, sel), "index_add");
    }
    const Tensor gi = ops::to_dtype(rand_cpu({6, 3, 4}, DType::i64, 143, 0, 5), it);
    expect_close(ops::gather(gpu(t), 1, gpu(gi)), ops::gather(t, 1, gi), "gather");
    const Tensor src = rand_cpu({6, 3, 4}, DType::f64, 144);
    expect_close(ops::scatter_add(t.shape(), 1, gpu(gi), gpu(src)), ops::scatter_add(t.shape(), 1, gi, src),
                 "scatter_add");
    // strided operands
    const Tensor tt = ops::transpose(t, 0, 2);
    expect_close(ops::index_select(ops::transpose(gpu(t), 0, 2), 1, gpu(i1)), ops::index_select(tt, 1, i1),
                 "index_select strided");
  }
  // integer index_add (atomics on i64 and u8)
  for (DType dt : {DType::i64, DType::i32, DType::u8}) {
    const Tensor i1 = ops::from_vector(std::vector<int64_t>{1, 1, 0, 1}, {4});
    const Tensor src = ops::to_dtype(rand_cpu({4, 3}, DType::i64, 145, 0, 9), dt);
    expect_close(ops::index_add({2, 3}, 0, gpu(i1), gpu(src)), ops::index_add({2, 3}, 0, i1, src), "index_add ints");
  }
}

TEST(CudaParity, DropoutMaskIsTheCpuMask) {
  STRATA_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64})
    for (double p : {0.0, 0.1, 0.5, 1.0}) {
      const Tensor x = rand_cpu({37, 29}, dt, 150);
      Generator gc(9), gg(9);
      gc.reserve(5);
      gg.reserve(5);
      const auto [y, mask] = ops::dropout(x, p, gc);
      const auto [gy, gmask] = ops::dropout(gpu(x), p, gg);
      EXPECT_EQ(gg.offset(), gc.offset());
      expect_close(gmask, mask, test::Tol{0, 0}, "dropout mask");
      expect_close(gy, y, test::Tol{0, 0}, "dropout y");
      const Tensor dy = rand_cpu(x.shape(), dt, 151);
      expect_close(ops::dropout_backward(gpu(dy), gmask, p), ops::dropout_backward(dy, mask, p), test::Tol{0, 0},
                   "dropout backward");
    }
}

TEST(CudaParity, FusedAdamWAndSgdSteps) {
  STRATA_REQUIRE_GPU();
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor p = rand_cpu({1000}, dt, 160), m = ops::zeros({1000}, dt), v = ops::zeros({1000}, dt);
    Tensor gp = gpu(p), gm = gpu(m), gv = gpu(v);
    for (int64_t step = 1; step <= 5; ++step) {
      const Tensor g = rand_cpu({1000}, dt, 161 + uint64_t(step));
      const ops::AdamParams ap{1e-2, 0.9, 0.999, 1e-8, 0.1, step, /*decoupled=*/true};
      ops::adam_step_(p, g, m, v, ap);
      ops::adam_step_(gp, gpu(g), gm, gv, ap);
    }
    expect_close(gp, p, "adamw param");
    expect_close(gm, m, "adamw exp_avg");
    expect_close(gv, v, "adamw exp_avg_sq");
    Tensor q = rand_cpu({500}, dt, 170), buf = ops::zeros({500}, dt), gq = gpu(q), gbuf = gpu(buf);
    for (int step = 0; step < 3; ++step) {
      const Tensor g = rand_cpu({500}, dt, 171 + uint64_t(step));
      const ops::SgdParams sp{0.1, 0.9, 0.0, 1e-4, true, step == 0};
      ops::sgd_step_(q, g, buf, sp);
      ops::sgd_step_(gq, gpu(g), gbuf, sp);
    }
    expect_close(gq, q, "sgd nesterov param");
    expect_close(gbuf, buf, "sgd momentum buffer");
  }
}

}  // namespace
}  // namespace strata
