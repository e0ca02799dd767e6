// The oneDNN convolution path (tensor/cpu/conv_dnnl.h) against direct f64 loops written
// here: forward with bias, dx, dw, db over strides, paddings, non-square kernels, odd
// sizes, batch 1 and the Fashion-MNIST CNN's shapes, in both layouts at 1 and 2 threads;
// the same bits on every call at a fixed thread count (automatic and forced routing);
// f64 staying on the im2col kernel. tests/CMakeLists.txt runs this file once more per
// oneDNN ISA cap (DNNL_MAX_CPU_ISA, read once per process).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include <strata/core/threads.h>
#include <strata/tensor/cpu/conv.h>
#include <strata/tensor/cpu/conv_dnnl.h>
#include <strata/tensor/ops.h>
#include "conv_reference.h"
#include "tests/test_tensors.h"
#include "tests/threads_guard.h"

using namespace strata;

namespace {

using strata::testing::Vec;
using strata::testing::rnd;
using strata::testing::ThreadsGuard;

using Case = strata::testing::ConvCase;
using strata::testing::direct_conv;
using strata::testing::expect_close;
using strata::testing::Reference;

const std::vector<Case> kCases = {
    {2, 3, 9, 9, 4, 3, 3, {1, 1, 1, 1}, true},     // 3x3 pad 1, bias
    {1, 2, 8, 7, 3, 3, 3, {2, 1, 1, 0}, false},    // batch 1, stride (2,1), pad (1,0)
    {3, 5, 11, 13, 6, 2, 5, {1, 2, 0, 2}, true},   // non-square kernel, odd sizes, stride (1,2)
    {2, 4, 7, 6, 5, 1, 1, {1, 1, 0, 0}, true},     // pointwise
    {2, 3, 10, 9, 7, 3, 2, {3, 2, 2, 1}, true},    // stride larger than 1 on both sides, pads uneven to the stride
    {64, 1, 28, 28, 32, 3, 3, {1, 1, 1, 1}, false},  // the CNN's first layer at B64
    {8, 32, 14, 14, 64, 3, 3, {1, 1, 1, 1}, false},  // the CNN's second layer (batch cut for time)
};

struct Data {
  Tensor x, w, b, dy;
  Reference ref;
};

Data make_data(const Case& c, uint64_t seed, bool with_reference = true) {
  Data d;
  d.x = rnd({c.N, c.C, c.H, c.W}, DType::f32, seed);
  d.w = rnd({c.O, c.C, c.kh, c.kw}, DType::f32, seed + 1, 0.5);
  d.b = c.bias ? rnd({c.O}, DType::f32, seed + 2) : Tensor();
  d.dy = rnd({c.N, c.O, c.Ho(), c.Wo()}, DType::f32, seed + 3);
  if (with_reference)
    d.ref = direct_conv(c, d.x.to_vector<double>(), d.w.to_vector<double>(), c.bias ? d.b.to_vector<double>() : Vec{},
                        d.dy.to_vector<double>());
  return d;
}

class LayoutGuard {
 public:
  LayoutGuard() : saved_(cpu::dnnl_conv_layout()) {}
  ~LayoutGuard() { cpu::set_dnnl_conv_layout(saved_); }

 private:
  cpu::DnnlConvLayout saved_;
};

class PathGuard {
 public:
  explicit PathGuard(cpu::ConvPath p) : saved_(cpu::conv_path()) { cpu::set_conv_path(p); }
  ~PathGuard() { cpu::set_conv_path(saved_); }

 private:
  cpu::ConvPath saved_;
};

const char* layout_name(cpu::DnnlConvLayout l) { return l == cpu::DnnlConvLayout::plain ? "plain" : "blocked"; }

}  // namespace

TEST(ConvDnnl, MatchesDirectF64LoopsInBothLayoutsAtOneAndTwoThreads) {
  ThreadsGuard threads;
  LayoutGuard layout;
  for (size_t ci = 0; ci < kCases.size(); ++ci) {
    const Case& c = kCases[ci];
    const Data d = make_data(c, 100 + 10 * ci);
    for (auto l : {cpu::DnnlConvLayout::plain, cpu::DnnlConvLayout::blocked})
      for (int t : {1, 2}) {
        cpu::set_dnnl_conv_layout(l);
        set_num_threads(t);
        const std::string what =
            "case " + std::to_string(ci) + " " + layout_name(l) + " threads " + std::to_string(t);
        Tensor y = ops::zeros({c.N, c.O, c.Ho(), c.Wo()});
        ASSERT_TRUE(cpu::dnnl_conv2d(d.x, d.w, d.b, y, c.p)) << what;
        expect_close(y, d.ref.y, what + " y");
        Tensor dx = ops::zeros(d.x.shape()), dw = ops::zeros(d.w.shape());
        Tensor db = c.bias ? ops::zeros({c.O}) : Tensor();
        ASSERT_TRUE(cpu::dnnl_conv2d_backward(d.dy, d.x, d.w, dx, dw, db, c.p)) << what;
        expect_close(dx, d.ref.dx, what + " dx");
        expect_close(dw, d.ref.dw, what + " dw");
        if (c.bias) expect_close(db, d.ref.db, what + " db");
        // no input gradient: dw and db alone, the same bits
        Tensor no_dx, dw0 = ops::zeros(d.w.shape()), db0 = c.bias ? ops::zeros({c.O}) : Tensor();
        ASSERT_TRUE(cpu::dnnl_conv2d_backward(d.dy, d.x, d.w, no_dx, dw0, db0, c.p)) << what;
        EXPECT_EQ(dw0.to_vector<float>(), dw.to_vector<float>()) << what;
        if (c.bias) {
          EXPECT_EQ(db0.to_vector<float>(), db.to_vector<float>()) << what;
        }
      }
  }
}

TEST(ConvDnnl, OpsRoutedToOneDnnMatchDirectF64Loops) {
  ThreadsGuard threads(2);
  PathGuard path(cpu::ConvPath::onednn);
  for (size_t ci = 0; ci < kCases.size(); ++ci) {
    const Case& c = kCases[ci];
    const Data d = make_data(c, 300 + 10 * ci);
    const std::string what = "case " + std::to_string(ci);
    expect_close(ops::conv2d(d.x, d.w, d.b, c.p), d.ref.y, what + " y");
    auto [dx, dw, db] = ops::conv2d_backward(d.dy, d.x, d.w, c.bias, c.p);
    expect_close(dx, d.ref.dx, what + " dx");
    expect_close(dw, d.ref.dw, what + " dw");
    if (c.bias) expect_close(db, d.ref.db, what + " db");
  }
}

// Bit-stability: at a fixed thread count, every path gives the same bits on every call,
// oneDNN's weight gradient (per-thread partial sums, then a reduction) included.
TEST(ConvDnnl, SameBitsOnEveryCallAtAFixedThreadCount) {
  ThreadsGuard threads;
  LayoutGuard layout;
  const std::pair<cpu::ConvPath, cpu::DnnlConvLayout> routes[] = {
      {cpu::ConvPath::automatic, cpu::dnnl_conv_layout()},
      {cpu::ConvPath::onednn, cpu::DnnlConvLayout::plain},
      {cpu::ConvPath::onednn, cpu::DnnlConvLayout::blocked}};
  for (size_t ci : {size_t(0), size_t(5), size_t(6)}) {
    const Case& c = kCases[ci];
    const Data d = make_data(c, 500 + 10 * ci, /*with_reference=*/false);
    for (const auto& [route, l] : routes)
      for (int t : {1, 2}) {
        PathGuard path(route);
        cpu::set_dnnl_conv_layout(l);
        set_num_threads(t);
        const std::string what = std::string(route == cpu::ConvPath::onednn ? "onednn " : "auto ") +
                                 layout_name(l) + " threads " + std::to_string(t) + " case " + std::to_string(ci);
        const auto y0 = ops::conv2d(d.x, d.w, d.b, c.p).to_vector<float>();
        auto [dx0, dw0, db0] = ops::conv2d_backward(d.dy, d.x, d.w, c.bias, c.p);
        for (int rep = 0; rep < 2; ++rep) {
          EXPECT_EQ(ops::conv2d(d.x, d.w, d.b, c.p).to_vector<float>(), y0) << what;
          auto [dx, dw, db] = ops::conv2d_backward(d.dy, d.x, d.w, c.bias, c.p);
          EXPECT_EQ(dx.to_vector<float>(), dx0.to_vector<float>()) << what;
          EXPECT_EQ(dw.to_vector<float>(), dw0.to_vector<float>()) << what;
          if (c.bias) {
            EXPECT_EQ(db.to_vector<float>(), db0.to_vector<float>()) << what;
          }
        }
      }
  }
}

// The automatic rule (conv.cpp): the CNN's 32->64 layer and its 1-channel first layer's
// backward on oneDNN at 1 and 2 threads, that layer's forward and other shapes on the
// im2col kernel; and the automatic path gives the bits of the path the rule names.
TEST(ConvDnnl, AutomaticRoutingFollowsTheRule) {
  ThreadsGuard threads;
  const Tensor x1 = ops::zeros({4, 1, 28, 28}), w1 = ops::zeros({32, 1, 3, 3});
  const Tensor x2 = ops::zeros({4, 32, 14, 14}), w2 = ops::zeros({64, 32, 3, 3});
  const ops::Conv2dParams same{1, 1, 1, 1};
  for (bool bwd : {false, true}) {
    EXPECT_TRUE(cpu::conv_auto_uses_dnnl(bwd, x2, w2, same, 1));
    EXPECT_TRUE(cpu::conv_auto_uses_dnnl(bwd, x2, w2, same, 2));
    EXPECT_EQ(cpu::conv_auto_uses_dnnl(bwd, x1, w1, same, 1), bwd);
    EXPECT_EQ(cpu::conv_auto_uses_dnnl(bwd, x1, w1, same, 2), bwd);
    EXPECT_FALSE(cpu::conv_auto_uses_dnnl(bwd, x2, ops::zeros({6, 32, 3, 3}), same, 1));  // 6 output channels
    EXPECT_FALSE(cpu::conv_auto_uses_dnnl(bwd, x2, w2, {2, 2, 1, 1}, 1));                // stride 2
    EXPECT_FALSE(cpu::conv_auto_uses_dnnl(bwd, x2, ops::zeros({64, 32, 5, 5}), same, 1)); // 5x5
  }
  for (size_t ci : {size_t(5), size_t(6)}) {
    const Case& c = kCases[ci];
    const Data d = make_data(c, 700 + 10 * ci, /*with_reference=*/false);
    for (int t : {1, 2}) {
      set_num_threads(t);
      const auto route = [&](bool bwd) {
        return cpu::conv_auto_uses_dnnl(bwd, d.x, d.w, c.p, t) ? cpu::ConvPath::onednn : cpu::ConvPath::native;
      };
      auto forward = [&](cpu::ConvPath r) {
        PathGuard path(r);
        return ops::conv2d(d.x, d.w, d.b, c.p).to_vector<float>();
      };
      auto weight_grad = [&](cpu::ConvPath r) {
        PathGuard path(r);
        return std::get<1>(ops::conv2d_backward(d.dy, d.x, d.w, c.bias, c.p)).to_vector<float>();
      };
      EXPECT_EQ(forward(cpu::ConvPath::automatic), forward(route(false))) << "case " << ci << " threads " << t;
      EXPECT_EQ(weight_grad(cpu::ConvPath::automatic), weight_grad(route(true))) << "case " << ci << " threads " << t;
    }
  }
}

// A training step's convolutions create their primitives on the first step only; a new
// thread count gets its own.
TEST(ConvDnnl, RepeatedCallsCreateNoPrimitives) {
  ThreadsGuard threads(1);
  LayoutGuard layout;
  PathGuard path(cpu::ConvPath::onednn);
  for (auto l : {cpu::DnnlConvLayout::plain, cpu::DnnlConvLayout::blocked}) {
    cpu::set_dnnl_conv_layout(l);
    const Case c{3, 2, 6, 5, 4, 3, 3, {1, 1, 1, 1}, true};  // a shape no other test uses
    const Data d = make_data(c, 900, /*with_reference=*/false);
    auto step = [&] {
      (void)ops::conv2d(d.x, d.w, d.b, c.p);
      (void)ops::conv2d_backward(d.dy, d.x, d.w, c.bias, c.p);
    };
    const int64_t before = cpu::dnnl_conv_primitives_created();
    step();
    const int64_t after_first = cpu::dnnl_conv_primitives_created();
    EXPECT_EQ(after_first, before + 3) << layout_name(l);
    step();
    step();
    EXPECT_EQ(cpu::dnnl_conv_primitives_created(), after_first) << layout_name(l);
    set_num_threads(2);
    step();
    EXPECT_EQ(cpu::dnnl_conv_primitives_created(), after_first + 3) << layout_name(l);  // fwd, bwd_d, bwd_w
    step();
    EXPECT_EQ(cpu::dnnl_conv_primitives_created(), after_first + 3) << layout_name(l);
    set_num_threads(1);
  }
}

TEST(ConvDnnl, OtherDtypesStayOnTheIm2colKernel) {
  ThreadsGuard threads(2);
  PathGuard path(cpu::ConvPath::onednn);
  const Case& c = kCases[2];
  const Tensor x = rnd({c.N, c.C, c.H, c.W}, DType::f64, 7), w = rnd({c.O, c.C, c.kh, c.kw}, DType::f64, 8);
  const Tensor b = rnd({c.O}, DType::f64, 9), dy = rnd({c.N, c.O, c.Ho(), c.Wo()}, DType::f64, 10);
  Tensor y = ops::zeros({c.N, c.O, c.Ho(), c.Wo()}, DType::f64), dx = ops::zeros(x.shape(), DType::f64);
  Tensor dw = ops::zeros(w.shape(), DType::f64), db = ops::zeros({c.O}, DType::f64);
  EXPECT_FALSE(cpu::dnnl_conv2d(x, w, b, y, c.p));
  EXPECT_FALSE(cpu::dnnl_conv2d_backward(dy, x, w, dx, dw, db, c.p));
  // through ops::, routed to oneDNN, f64 still runs (on the im2col kernel) to f64 accuracy
  const Reference ref =
      direct_conv(c, x.to_vector<double>(), w.to_vector<double>(), b.to_vector<double>(), dy.to_vector<double>());
  const Vec got = ops::conv2d(x, w, b, c.p).to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], ref.y.v[i], 1e-12 * ref.y.abs[i]);
  for (DType half : {DType::f16, DType::bf16})
    EXPECT_FALSE(cpu::dnnl_conv2d(ops::to_dtype(x, half), ops::to_dtype(w, half), ops::to_dtype(b, half), y, c.p)) << dtype_name(half);
}

// Under DNNL_MAX_CPU_ISA (tests/CMakeLists.txt) the primitives oneDNN picks stay within
// the cap, so the cases above ran on that ISA's code.
TEST(ConvDnnl, ImplementationsRespectTheIsaCap) {
  LayoutGuard layout;
  const char* cap = std::getenv("DNNL_MAX_CPU_ISA");
  const std::string isa = cap ? cap : "";
  const Tensor x = ops::zeros({8, 32, 14, 14}), w = ops::zeros({64, 32, 3, 3});
  for (auto l : {cpu::DnnlConvLayout::plain, cpu::DnnlConvLayout::blocked}) {
    cpu::set_dnnl_conv_layout(l);
    const std::string impl = cpu::dnnl_conv_impl_info(x, w, {1, 1, 1, 1});
    EXPECT_EQ(impl.find("none"), std::string::npos) << impl;
    if (isa == "SSE41") {
      EXPECT_EQ(impl.find("avx"), std::string::npos) << impl;
    }
    if (isa == "AVX2") {
      EXPECT_EQ(impl.find("avx512"), std::string::npos) << impl;
    }
  }
}
