// Context parallelism's pieces: ring attention on 2, 3 and 4 local ranks (zigzag and plain splits) against
// one process's full causal attention (outputs and gradients), the sequence split, and
// the K/V bytes each rank sends per layer.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <strata/autograd/engine.h>
#include <strata/autograd/functions.h>
#include <strata/comm/local.h>
#include <strata/parallel/context/context_parallel.h>
#include "equivalence.h"

namespace strata::parallel {
namespace {

using strata::testing::expect_close;

Tensor rnd(const Shape& s, uint64_t seed, DType dt = DType::f64) {
  Generator g(seed);
  return ops::normal(s, 0.0, 1.0, g, dt);
}

Tensor leaf(Tensor t) {
  t.set_requires_grad(true);
  return t;
}

// Full causal attention of qkv (B, T, 3C) and its gradient for the loss sum(y * w).
std::pair<Tensor, Tensor> full_attention(const Tensor& qkv0, const Tensor& w, int64_t hd) {
  Tensor qkv = leaf(ops::clone(qkv0));
  Tensor y = causal_attention(qkv, hd);
  backward(sum(y * w));
  return {y.detach(), qkv.grad()};
}

TEST(ContextParallel, SegmentsAndPositions) {
  EXPECT_EQ(cp_segments(16, 2, 0, CpSplit::zigzag), (std::vector<SeqSegment>{{0, 4}, {12, 4}}));
  EXPECT_EQ(cp_segments(16, 2, 1, CpSplit::zigzag), (std::vector<SeqSegment>{{4, 4}, {8, 4}}));
  EXPECT_EQ(cp_segments(12, 3, 2, CpSplit::plain), (std::vector<SeqSegment>{{8, 4}}));
  EXPECT_EQ(cp_positions(8, 2, 1, CpSplit::zigzag).to_vector<int64_t>(), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_THROW(cp_segments(12, 4, 0, CpSplit::zigzag), Error);  // 12 is not divisible by 2 x 4
  // Every position once over the ranks.
  for (CpSplit s : {CpSplit::zigzag, CpSplit::plain}) {
    std::vector<int> seen(24, 0);
    for (int r = 0; r < 4; ++r)
      for (int64_t p : cp_positions(24, 4, r, s).to_vector<int64_t>()) ++seen[size_t(p)];
    EXPECT_EQ(seen, std::vector<int>(24, 1)) << cp_split_name(s);
  }
  const Tensor x = ops::reshape(ops::arange(0, 16, 1, DType::i64), {2, 8});
  EXPECT_EQ(cp_shard(x, 2, 0, CpSplit::zigzag).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 6, 7, 8, 9, 14, 15}));
}

// Ring attention on cp local ranks: each rank's output and gradient equal its rows of
// one process's full causal attention (f64: 1e-12; f32: 1e-5).
void check_ring(int cp, CpSplit split, DType dt, double tol) {
  const int64_t B = 2, T = 24, H = 2, hd = 4, C = H * hd;
  const Tensor qkv = rnd({B, T, 3 * C}, 11, dt), w = rnd({B, T, C}, 12, dt);
  const auto [y_ref, g_ref] = full_attention(qkv, w, hd);
  comm::run_local(cp, [&](comm::ProcessGroup& g) {
    std::shared_ptr<comm::ProcessGroup> grp(&g, [](comm::ProcessGroup*) {});
    const int r = g.rank();
    Tensor x = leaf(cp_shard(qkv, cp, r, split));
    Tensor y = ring_attention(x, hd, grp, split);
    const std::string what = std::string(cp_split_name(split)) + " cp " + std::to_string(cp) + " rank " + std::to_string(r);
    expect_close(y.detach(), cp_shard(y_ref, cp, r, split), tol, (what + " forward").c_str());
    backward(sum(y * cp_shard(w, cp, r, split)));
    expect_close(x.grad(), cp_shard(g_ref, cp, r, split), tol, (what + " backward").c_str());
  });
}

TEST(RingAttention, EqualsFullCausalAttentionZigzag) {
  for (int cp : {1, 2, 3, 4}) check_ring(cp, CpSplit::zigzag, DType::f64, 1e-12);
}

TEST(RingAttention, EqualsFullCausalAttentionPlain) {
  for (int cp : {2, 3, 4}) check_ring(cp, CpSplit::plain, DType::f64, 1e-12);
}

TEST(RingAttention, EqualsFullCausalAttentionF32) {
  for (CpSplit s : {CpSplit::zigzag, CpSplit::plain})
    for (int cp : {2, 4}) check_ring(cp, s, DType::f32, 1e-5);
}

// One process's attention with dropout on the probabilities, as the GPT's unfused path
// computes it (softmax, then dropout(att, p, gen) over the contiguous (B, H, T, T)), and
// its gradient for the loss sum(y * w).
std::pair<Tensor, Tensor> dropout_attention(const Tensor& qkv0, const Tensor& w, int64_t hd, double p, Generator& gen) {
  Tensor qkv = leaf(ops::clone(qkv0));
  const int64_t B = qkv.size(0), T = qkv.size(1), C = qkv.size(2) / 3, H = C / hd;
  auto parts = split(qkv, {C, C, C}, -1);
  auto heads = [&](const Tensor& t) { return transpose(reshape(t, {B, T, H, hd}), 1, 2); };
  Tensor att = matmul(mul(heads(parts[0]), 1.0 / std::sqrt(double(hd))), transpose(heads(parts[1]), -1, -2));
  att = softmax(masked_fill(att, ops::causal_mask(T), -std::numeric_limits<double>::infinity()), -1);
  att = dropout(att, p, true, gen);
  Tensor y = reshape(contiguous(transpose(matmul(att, heads(parts[2])), 1, 2)), {B, T, C});
  backward(sum(y * w));
  return {y.detach(), qkv.grad()};
}

// Attention dropout in ring attention: the mask of every (b, h, query, key) is the one
// the whole attention's dropout draws (counter-based on the global indices), so each
// rank's output and gradient equal its rows of one process's, and every rank's generator
// advances as that process's does (one draw of B*H*T*T).
TEST(RingAttention, DropoutMasksEqualTheWholeAttentions) {
  const int64_t B = 2, T = 24, H = 2, hd = 4, C = H * hd;
  const double p = 0.3;
  for (DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
    const Tensor qkv = rnd({B, T, 3 * C}, 21, dt), w = rnd({B, T, C}, 22, dt);
    Generator ref_gen(99);
    ref_gen.reserve(40);  // any state: the ranks start from the same one
    const Generator start = ref_gen;
    const auto [y_ref, g_ref] = dropout_attention(qkv, w, hd, p, ref_gen);
    for (CpSplit split : {CpSplit::zigzag, CpSplit::plain})
      for (int cp : {1, 2, 3}) {
        comm::run_local(cp, [&](comm::ProcessGroup& g) {
          std::shared_ptr<comm::ProcessGroup> grp(&g, [](comm::ProcessGroup*) {});
          const int r = g.rank();
          Generator gen = start;
          Tensor x = leaf(cp_shard(qkv, cp, r, split));
          Tensor y = ring_attention(x, hd, grp, split, p, &gen);
          EXPECT_EQ(gen.offset(), ref_gen.offset());
          const std::string what = std::string(dtype_name(dt)) + " " + cp_split_name(split) + " cp " +
                                   std::to_string(cp) + " rank " + std::to_string(r);
          expect_close(y.detach(), cp_shard(y_ref, cp, r, split), tol, (what + " forward").c_str());
          backward(sum(y * cp_shard(w, cp, r, split)));
          expect_close(x.grad(), cp_shard(g_ref, cp, r, split), tol, (what + " backward").c_str());
        });
      }
    // Not vacuous: about p of the probabilities were dropped (the output differs from
    // attention without dropout).
    const auto [y_plain, g_plain] = full_attention(qkv, w, hd);
    const std::vector<double> a = y_ref.to_vector<double>(), b = y_plain.to_vector<double>();
    double diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::abs(a[i] - b[i]));
    EXPECT_GT(diff, 0.1);
  }
}

// Token-wise dropout of a rank's part of the sequences (cp_dropout) equals its rows of
// dropout over the whole (B, T, C), forward and backward.
TEST(ContextParallel, TokenDropoutMatchesTheWholeSequences) {
  const int64_t B = 2, T = 24, C = 6;
  const double p = 0.25;
  const Tensor x = rnd({B, T, C}, 31);
  Generator ref_gen(5);
  const Generator start = ref_gen;
  Tensor xr = leaf(ops::clone(x));
  Tensor y_ref = dropout(xr, p, true, ref_gen);
  backward(sum(y_ref * y_ref));
  for (CpSplit split : {CpSplit::zigzag, CpSplit::plain})
    for (int cp : {1, 2, 4})
      for (int r = 0; r < cp; ++r) {
        Generator gen = start;
        Tensor xs = leaf(cp_shard(x, cp, r, split));
        Tensor y = cp_dropout(xs, p, gen, cp, r, split);
        EXPECT_EQ(gen.offset(), ref_gen.offset());
        expect_close(y.detach(), cp_shard(y_ref.detach(), cp, r, split), 0, "cp_dropout forward");
        backward(sum(y * y));
        expect_close(xs.grad(), cp_shard(xr.grad(), cp, r, split), 0, "cp_dropout backward");
      }
}

// The K/V bytes one rank sends for one layer: (cp-1) blocks of B * T/cp * 2C forward,
// (cp-1) K/V blocks plus cp dK/dV blocks backward, counted by the group (local backend).
TEST(RingAttention, BytesSentMatchTheFormula) {
  const int64_t B = 2, T = 24, H = 2, hd = 4, C = H * hd;
  for (int cp : {2, 3, 4})
    comm::run_local(cp, [&](comm::ProcessGroup& g) {
      std::shared_ptr<comm::ProcessGroup> grp(&g, [](comm::ProcessGroup*) {});
      Tensor x = leaf(cp_shard(rnd({B, T, 3 * C}, 5, DType::f32), cp, g.rank(), CpSplit::zigzag));
      const CpLayerBytes want = cp_layer_bytes(B, T, C, cp, 4);
      g.reset_stats();
      Tensor y = ring_attention(x, hd, grp, CpSplit::zigzag);
      EXPECT_EQ(g.stats()[comm::OpKind::batch_isend_irecv].bytes_sent, want.forward) << "cp " << cp;
      backward(sum(y));
      EXPECT_EQ(g.stats()[comm::OpKind::batch_isend_irecv].bytes_sent, want.forward + want.backward) << "cp " << cp;
      EXPECT_EQ(want.forward, (cp - 1) * B * (T / cp) * 2 * C * 4);
      EXPECT_EQ(want.backward, (2 * cp - 1) * B * (T / cp) * 2 * C * 4);
    });
}

}  // namespace
}  // namespace strata::parallel
