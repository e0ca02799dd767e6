// The tensor-parallel regions on 2 and 4 local ranks: forward values and gradients equal
// what one process computes for the same global function.
#include <gtest/gtest.h>

#include <strata/autograd/engine.h>
#include <strata/comm/local.h>
#include "equivalence.h"
#include <strata/parallel/tensor/layers.h>
#include <strata/parallel/tensor/regions.h>

namespace strata::parallel {
namespace {

using strata::testing::expect_close;

constexpr double kTol = 1e-12;

Tensor rnd(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return ops::normal(s, 0.0, 1.0, g, DType::f64);
}

Tensor leaf(Tensor t) {
  t.set_requires_grad(true);
  return t;
}

// The sum over ranks of w_r * x: copy_to_tp's gradient on every rank is sum_r w_r.
TEST(TpRegions, CopyToTpSumsTheGradient) {
  for (int n : {2, 4})
    comm::run_local(n, [n](comm::ProcessGroup& tp) {
      const Shape s{3, 2, 8};
      Tensor x = leaf(rnd(s, 1)), w = rnd(s, 10 + uint64_t(tp.rank()));
      Tensor y = copy_to_tp(x, tp);
      expect_close(y, x, kTol, "copy_to_tp forward");
      backward(sum(y * w));
      Tensor want = rnd(s, 10);
      for (int r = 1; r < n; ++r) want = want + rnd(s, 10 + uint64_t(r));
      expect_close(x.grad(), want, kTol, "copy_to_tp backward");
    });
}

// y = sum_r x_r on every rank; d(w . y)/dx_r = w.
TEST(TpRegions, ReduceFromTpSumsTheForward) {
  for (int n : {2, 4})
    comm::run_local(n, [n](comm::ProcessGroup& tp) {
      const Shape s{4, 6};
      Tensor x = leaf(rnd(s, 20 + uint64_t(tp.rank()))), w = rnd(s, 5);
      Tensor y = reduce_from_tp(x, tp);
      Tensor want = rnd(s, 20);
      for (int r = 1; r < n; ++r) want = want + rnd(s, 20 + uint64_t(r));
      expect_close(y, want, kTol, "reduce_from_tp forward");
      expect_close(x.detach(), rnd(s, 20 + uint64_t(tp.rank())), 0, "reduce_from_tp leaves its input");
      backward(sum(y * w));
      expect_close(x.grad(), w, kTol, "reduce_from_tp backward");
    });
}

// Rank r sees columns [r C/n, (r+1) C/n) of x; with loss_r = W_r . y_r summed over ranks
// (the single-process W . x) every rank's gradient is the whole W.
TEST(TpRegions, ScatterToTpSplitsTheLastDimension) {
  for (int n : {2, 4})
    comm::run_local(n, [n](comm::ProcessGroup& tp) {
      const Shape s{2, 3, 8};
      const int64_t c = 8 / n;
      Tensor x = leaf(rnd(s, 3)), w = rnd(s, 4);
      Tensor y = scatter_to_tp(x, tp);
      expect_close(y, ops::contiguous(ops::narrow(x.detach(), 2, tp.rank() * c, c)), 0, "scatter_to_tp forward");
      backward(sum(y * ops::contiguous(ops::narrow(w, 2, tp.rank() * c, c))));
      expect_close(x.grad(), w, kTol, "scatter_to_tp backward");
    });
}

// The chunks X_r gathered are X on every rank; the gradient of the replicated W . X
// with respect to X_r is W's chunk r.
TEST(TpRegions, GatherFromTpConcatenatesTheLastDimension) {
  for (int n : {2, 4})
    comm::run_local(n, [n](comm::ProcessGroup& tp) {
      const Shape s{3, 2, 4 * n};
      const int64_t c = 4;
      Tensor global = rnd(s, 7), w = rnd(s, 8);
      Tensor x = leaf(ops::contiguous(ops::narrow(global, 2, tp.rank() * c, c)));
      Tensor y = gather_from_tp(x, tp);
      expect_close(y, global, 0, "gather_from_tp forward");
      backward(sum(y * w));
      expect_close(x.grad(), ops::contiguous(ops::narrow(w, 2, tp.rank() * c, c)), kTol, "gather_from_tp backward");
    });
}

// Sequence parallelism: each rank holds T/n rows of X; after the gather each rank's
// downstream differs (its own W_r, as a column-parallel layer's), so the single-process
// loss is sum_r W_r . X and rank r's gradient is rows r of sum_r W_r.
TEST(TpRegions, AllGatherSeqReduceScattersTheGradient) {
  for (int n : {2, 4})
    comm::run_local(n, [n](comm::ProcessGroup& tp) {
      const Shape s{2, 2 * n, 3};
      const int64_t rows = 2;
      Tensor global = rnd(s, 30);
      Tensor x = leaf(ops::contiguous(ops::narrow(global, 1, tp.rank() * rows, rows)));
      Tensor y = all_gather_seq(x, tp);
      expect_close(y, global, 0, "all_gather_seq forward");
      backward(sum(y * rnd(s, 40 + uint64_t(tp.rank()))));
      Tensor want = rnd(s, 40);
      for (int r = 1; r < n; ++r) want = want + rnd(s, 40 + uint64_t(r));
      expect_close(x.grad(), ops::narrow(want, 1, tp.rank() * rows, rows), kTol, "all_gather_seq backward");
    });
}

// Rank r keeps rows r of sum_r x_r; with the replicated W, sum_r W's rows r . y_r is
// W . sum_r x_r, whose gradient with respect to every x_r is W.
TEST(TpRegions, ReduceScatterSeqGathersTheGradient) {
  for (int n : {2, 4})
    comm::run_local(n, [n](comm::ProcessGroup& tp) {
      const Shape s{3, 2 * n, 4};
      const int64_t rows = 2;
      Tensor x = leaf(rnd(s, 50 + uint64_t(tp.rank()))), w = rnd(s, 6);
      Tensor total = rnd(s, 50);
      for (int r = 1; r < n; ++r) total = total + rnd(s, 50 + uint64_t(r));
      Tensor y = reduce_scatter_seq(x, tp);
      expect_close(y, ops::narrow(total, 1, tp.rank() * rows, rows), kTol, "reduce_scatter_seq forward");
      backward(sum(y * ops::contiguous(ops::narrow(w, 1, tp.rank() * rows, rows))));
      expect_close(x.grad(), w, kTol, "reduce_scatter_seq backward");
    });
}

// The replicated x enters the sequence-parallel region: rank r keeps rows r, and the
// single-process loss sum_r W_r . x[rows r] has gradient W (rows r from rank r), which
// the backward's gather gives every rank.
TEST(TpRegions, ScatterToSeqGathersTheGradient) {
  for (int n : {2, 4})
    comm::run_local(n, [n](comm::ProcessGroup& tp) {
      const Shape s{2, 2 * n, 3};
      const int64_t rows = 2;
      Tensor x = leaf(rnd(s, 70)), w = rnd(s, 80);
      Tensor y = scatter_to_seq(x, tp);
      expect_close(y, ops::narrow(rnd(s, 70), 1, tp.rank() * rows, rows), 0, "scatter_to_seq forward");
      backward(sum(y * ops::contiguous(ops::narrow(w, 1, tp.rank() * rows, rows))));
      expect_close(x.grad(), w, kTol, "scatter_to_seq backward");
    });
}

TEST(TpRegions, ShardAndUnshardAreInverse) {
  comm::run_local(4, [](comm::ProcessGroup& tp) {
    const Tensor t = rnd({24, 8}, 11);
    for (TpSplit s : {TpSplit{0, 1}, TpSplit{0, 3}, TpSplit{1, 1}}) {
      Tensor shard = tp_shard(t, s, tp.rank(), 4);
      EXPECT_EQ(shard.size(s.dim), t.size(s.dim) / 4);
      expect_close(tp_unshard(shard, s, tp), t, 0, "tp_unshard(tp_shard)");
    }
    // parts = 3: rank r holds rows [2r, 2r+2) of each third (whole heads of q, k and v).
    Tensor q = tp_shard(t, {0, 3}, tp.rank(), 4);
    expect_close(ops::narrow(q, 0, 2, 2), ops::narrow(t, 0, 8 + 2 * tp.rank(), 2), 0, "the k part");
    EXPECT_THROW(tp_shard(rnd({24, 6}, 1), {1, 1}, 0, 4), Error);  // 6 columns do not split into 4
  });
}

}  // namespace
}  // namespace strata::parallel
