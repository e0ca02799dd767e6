// Every collective x algorithm x dtype x size on the local backend (1, 2, 3, 4, 8 ranks
// as threads) against a sequential reference; plus non-contiguous and aliased tensors.
#include <gtest/gtest.h>

#include "collective_checks.h"
#include <strata/comm/local.h>
#include <strata/core/threads.h>

using namespace strata;
using namespace strata::comm;
using namespace strata::comm::testing;

namespace {

CommOptions small_chunks() {
  CommOptions o;
  o.timeout_s = 60;
  o.chunk_bytes = 1024;          // several pipeline chunks even for 1003 elements
  o.small_message_bytes = 512;   // recursive exercises both recursive doubling and halving
  return o;
}

class LocalCollectives : public ::testing::TestWithParam<int> {};

TEST_P(LocalCollectives, MatchSequentialReference) {
  set_num_threads(1);
  run_local(GetParam(), [](ProcessGroup& g) { check_all_collectives(g); }, small_chunks());
}

INSTANTIATE_TEST_SUITE_P(Ranks, LocalCollectives, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

TEST(LocalCollectives, LargeRingWithManyChunksMatchesNative) {
  // 100003 elements over 3 ranks with 4 KiB chunks: ~33 pipelined chunks per segment.
  CommOptions o = small_chunks();
  o.chunk_bytes = 4096;
  run_local(3, [](ProcessGroup& g) {
    const int64_t n = 100003;
    for (Algorithm a : {Algorithm::native, Algorithm::ring, Algorithm::tree, Algorithm::recursive}) {
      g.set_algorithm(a);
      Tensor t = make_tensor(DType::f32, inputs(g.rank(), n, ReduceOp::sum));
      g.all_reduce(t).wait();
      expect_values(read_tensor(t), reference(3, 0, n, ReduceOp::sum), 0, std::string("all_reduce ") + algorithm_name(a));
      Tensor in = make_tensor(DType::f32, inputs(g.rank(), 3 * n, ReduceOp::max));
      Tensor out = ops::zeros({n}, DType::f32);
      g.reduce_scatter(in, out, ReduceOp::max).wait();
      expect_values(read_tensor(out), reference(3, g.rank() * n, n, ReduceOp::max), 0,
                    std::string("reduce_scatter ") + algorithm_name(a));
      Tensor b = make_tensor(DType::f64, moves(g.rank(), n));
      g.broadcast(b, 2).wait();
      expect_values(read_tensor(b), moves(2, n), 0, std::string("broadcast ") + algorithm_name(a));
    }
  }, o);
}

TEST(LocalCollectives, LargeNativeAllReduceOnUnalignedBuffers) {
  // 8 MiB+ buffers; a 1-element offset misaligns every slice.
  run_local(3, [](ProcessGroup& g) {
    const int64_t n = 2'100'001;
    for (DType dt : {DType::f32, DType::bf16}) {
      Tensor base = make_tensor(dt, inputs(g.rank(), n + 1, ReduceOp::sum));
      Tensor t = ops::narrow(base, 0, 1, n);
      g.all_reduce(t).wait();
      std::vector<double> want = reference(3, 0, n + 1, ReduceOp::sum);
      want[0] = input_value(g.rank(), 0, ReduceOp::sum);  // outside the view: untouched
      expect_values(read_tensor(base), want, 0, std::string("large all_reduce ") + dtype_name(dt));
    }
  });
}

// comm.reduce_dtype on 16-bit sums of 256 + 1 + 1: f32 accumulation rounds once (258);
// `param` rounds at every hop on the host algorithms, so 256 + 1 = 257 ties to 256 and
// an element whose chain adds 256 first stays 256 (the ring starts segment k at rank
// k + 1: some segments add 1 + 1 first and reach 258). The local backend's native
// all-reduce sums in f32 either way. f32 moves twice the bytes of `param`.
TEST(LocalCollectives, HalfPrecisionReduceDtype) {
  for (Algorithm a : {Algorithm::native, Algorithm::ring, Algorithm::tree, Algorithm::recursive})
    for (ReduceDtype rd : {ReduceDtype::param, ReduceDtype::f32}) {
      CommOptions o;
      o.algorithm = a;
      o.reduce_dtype = rd;
      run_local(3, [a, rd](ProcessGroup& g) {
        for (DType dt : {DType::bf16, DType::f16}) {
          const std::string what =
              std::string("bf16/f16 sum, ") + algorithm_name(a) + " " + dtype_name(dt) + " reduce_dtype " + reduce_dtype_name(rd);
          const double v = g.rank() == 0 ? 256.0 : 1.0;
          Tensor t = make_tensor(dt, std::vector<double>(37, v));
          g.all_reduce(t).wait();
          const std::vector<double> got = read_tensor(t);
          if (rd == ReduceDtype::f32 || a == Algorithm::native || dt == DType::f16) {
            // f16 holds 257 exactly (11 significant bits): no rounding to see
            expect_values(got, std::vector<double>(37, 258.0), 0, what);
          } else {
            int rounded = 0;
            for (double x : got) {
              EXPECT_TRUE(x == 256.0 || x == 258.0) << what << ": " << x;
              rounded += x == 256.0;
            }
            EXPECT_GT(rounded, 0) << what << ": no element shows per-hop rounding";
            // every rank ends with the same bits
            Tensor all = ops::zeros({3 * 37}, dt);
            g.all_gather(t, all).wait();
            const std::vector<double> a3 = read_tensor(all);
            for (int r = 0; r < 3; ++r)
              for (int i = 0; i < 37; ++i) EXPECT_EQ(a3[size_t(r * 37 + i)], got[size_t(i)]) << what << " rank " << r;
          }
        }
        // bytes: 16 bits on the wire with `param`, f32's bytes with `f32`
        const int64_t before = g.stats()[OpKind::all_reduce].bytes_sent;
        Tensor t = make_tensor(DType::bf16, inputs(g.rank(), 3000, ReduceOp::sum));
        g.all_reduce(t).wait();
        const int64_t sent = g.stats()[OpKind::all_reduce].bytes_sent - before;
        Tensor f = make_tensor(DType::f32, inputs(g.rank(), 3000, ReduceOp::sum));
        const int64_t before32 = g.stats()[OpKind::all_reduce].bytes_sent;
        g.all_reduce(f).wait();
        const int64_t sent32 = g.stats()[OpKind::all_reduce].bytes_sent - before32;
        EXPECT_GT(sent, 0) << algorithm_name(a);
        EXPECT_EQ(rd == ReduceDtype::param ? 2 * sent : sent, sent32) << algorithm_name(a);
      }, o);
    }
}

TEST(LocalCollectives, NonContiguousTensorsAreHandled) {
  run_local(3, [](ProcessGroup& g) {
    const int r = g.rank();
    for (Algorithm a : {Algorithm::native, Algorithm::ring}) {
      g.set_algorithm(a);
      // all_reduce on a transposed view writes the right elements of the base tensor.
      Tensor base = make_tensor(DType::f32, inputs(r, 12, ReduceOp::sum));
      Tensor m = ops::view(base, {3, 4});
      Tensor t = ops::transpose(m, 0, 1);  // (4,3), non-contiguous
      ASSERT_FALSE(t.is_contiguous());
      g.all_reduce(t).wait();
      expect_values(read_tensor(base), reference(3, 0, 12, ReduceOp::sum), 0, "all_reduce transposed");

      // all_gather from a strided input into a column of a matrix.
      Tensor src = ops::slice(make_tensor(DType::f64, moves(r, 8)), 0, 0, 8, 2);  // elements 0,2,4,6
      Tensor mat = ops::zeros({12, 2}, DType::f64);
      Tensor col = ops::select(mat, 1, 1);  // (12), stride 2
      g.all_gather(src, col).wait();
      std::vector<double> want;
      for (int j = 0; j < 3; ++j)
        for (int i = 0; i < 8; i += 2) want.push_back(move_value(j, i));
      expect_values(read_tensor(col), want, 0, "all_gather strided");
      expect_values(read_tensor(ops::select(mat, 1, 0)), std::vector<double>(12, 0.0), 0, "untouched column");

      // broadcast into a strided view.
      Tensor bbase = make_tensor(DType::i32, moves(r, 10));
      Tensor bv = ops::slice(bbase, 0, 1, 10, 3);  // elements 1,4,7
      g.broadcast(bv, 1).wait();
      std::vector<double> bwant = moves(r, 10);
      for (int i = 1; i < 10; i += 3) bwant[size_t(i)] = move_value(1, i);
      expect_values(read_tensor(bbase), bwant, 0, "broadcast strided");
    }
  });
}

TEST(LocalCollectives, ExpandedOutputIsAnError) {
  run_local(1, [](ProcessGroup& g) {
    Tensor e = ops::expand(ops::zeros({1}, DType::f32), {4});
    EXPECT_THROW(g.all_reduce(e), Error);
  });
}

TEST(LocalCollectives, OverlappingInputAndOutputUseACopy) {
  run_local(2, [](ProcessGroup& g) {
    const int r = g.rank();
    // reduce_scatter whose output is the first block of its own input.
    Tensor in = make_tensor(DType::f32, inputs(r, 8, ReduceOp::sum));
    Tensor out = ops::narrow(in, 0, 0, 4);
    g.reduce_scatter(in, out).wait();
    expect_values(read_tensor(out), reference(2, r * 4, 4, ReduceOp::sum), 0, "reduce_scatter aliased");
  });
}

TEST(LocalCollectives, BadArgumentsThrowOnTheCallingThread) {
  run_local(2, [](ProcessGroup& g) {
    Tensor i = ops::zeros({4}, DType::i32);
    EXPECT_THROW(g.all_reduce(i, ReduceOp::avg), Error);
    EXPECT_THROW(g.all_gather(ops::zeros({3}), ops::zeros({5})), Error);
    EXPECT_THROW(g.reduce_scatter(ops::zeros({5}), ops::zeros({2})), Error);
    EXPECT_THROW(g.all_gather(ops::zeros({3}), ops::zeros({6}, DType::f64)), Error);
    EXPECT_THROW(g.broadcast(ops::zeros({3}), 2), Error);
    EXPECT_THROW(g.send(ops::zeros({3}), g.rank()), Error);
    EXPECT_THROW(g.send(ops::zeros({3}), 1 - g.rank(), ProcessGroup::kMaxUserTag), Error);
    EXPECT_THROW(g.all_reduce(Tensor()), Error);
  });
}

TEST(LocalCollectives, AsyncOpsRunInIssueOrderAndOverlapTheCaller) {
  run_local(4, [](ProcessGroup& g) {
    std::vector<Tensor> ts;
    std::vector<Work> ws;
    for (int k = 0; k < 20; ++k) {
      ts.push_back(ops::full({257}, double(g.rank() + k), DType::f32));
      ws.push_back(g.all_reduce(ts.back()));
    }
    // A broadcast of the first result, issued after: sees the reduced value.
    ws.push_back(g.broadcast(ts[0], 3));
    for (auto& w : ws) w.wait();
    for (int k = 0; k < 20; ++k) {
      const double want = 0 + 1 + 2 + 3 + 4.0 * k;
      expect_values(read_tensor(ts[size_t(k)]), std::vector<double>(257, want), 0, "async all_reduce " + std::to_string(k));
      EXPECT_TRUE(ws[size_t(k)].is_completed());
    }
  });
}

}  // namespace
