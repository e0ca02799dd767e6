// The `tree` all-reduce (binomial-tree reduce to rank 0, then binomial-tree broadcast, on
// send/recv) against the native all-reduce on 1..5 local ranks, odd sizes and every
// reduce op; its counted bytes against the tree's formula; counted vs modelled labels.
#include <gtest/gtest.h>

#include "collective_checks.h"
#include <strata/comm/local.h>
#include <strata/core/threads.h>

using namespace strata;
using namespace strata::comm;
using namespace strata::comm::testing;

namespace {

// Children of rank r in the binomial tree rooted at 0: r + m for every power of two m
// below r's lowest set bit (every power of two below n for the root) with r + m < n.
int binomial_children(int r, int n) {
  int k = 0;
  for (int m = 1; m < n; m <<= 1) {
    if (r != 0 && m >= (r & -r)) break;
    k += r + m < n;
  }
  return k;
}

TEST(TreeAllReduce, MatchesNativeOnOneToFiveRanks) {
  set_num_threads(1);
  for (int n = 1; n <= 5; ++n) {
    CommOptions o;
    o.timeout_s = 60;
    o.chunk_bytes = 1024;  // several pipelined chunks for the larger sizes
    run_local(n, [n](ProcessGroup& g) {
      const int r = g.rank();
      for (DType dt : {DType::f32, DType::f64, DType::i32, DType::bf16}) {
        std::vector<ReduceOp> ops{ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max};
        if (is_floating(dt)) ops.push_back(ReduceOp::avg);
        for (int64_t count : {1, 3, 257, 1001, 4099}) {
          for (ReduceOp op : ops) {
            const std::string ctx = std::string(dtype_name(dt)) + " " + reduce_op_name(op) + " count " +
                                    std::to_string(count) + " rank " + std::to_string(r) + "/" + std::to_string(n);
            Tensor native = make_tensor(dt, inputs(r, count, op));
            Tensor tree = make_tensor(dt, inputs(r, count, op));
            g.set_algorithm(Algorithm::native);
            g.all_reduce(native, op).wait();
            g.set_algorithm(Algorithm::tree);
            g.all_reduce(tree, op).wait();
            expect_values(read_tensor(tree), read_tensor(native), tolerance(dt, op), "tree vs native " + ctx);
            expect_values(read_tensor(tree), reference(n, 0, count, op), tolerance(dt, op), "tree vs reference " + ctx);
            // Rank 0's result is broadcast: every rank holds the same bits.
            g.set_algorithm(Algorithm::native);
            const Tensor all = all_gather_host(g, tree);
            const auto v = read_tensor(all);
            for (int j = 1; j < n; ++j)
              for (int64_t i = 0; i < count; ++i)
                ASSERT_EQ(v[size_t(j * count + i)], v[size_t(i)]) << "rank " << j << " element " << i << " " << ctx;
          }
        }
      }
    }, o);
  }
}

TEST(TreeAllReduce, CountsTheBytesOfTheBinomialTree) {
  for (int n : {1, 2, 3, 4, 5, 8}) {
    CommOptions o;
    o.algorithm = Algorithm::tree;
    o.chunk_bytes = 1024;
    run_local(n, [n](ProcessGroup& g) {
      const int r = g.rank();
      const int64_t count = 1001, k = count * 4;
      Tensor t = ops::ones({count}, DType::f32);
      g.all_reduce(t).wait();
      expect_values(read_tensor(t), std::vector<double>(size_t(count), double(n)), 0, "tree sum of ones");
      const OpStats s = g.stats()[OpKind::all_reduce];
      // K up to the parent in the reduce, K to each child in the broadcast.
      const int64_t want = n == 1 ? 0 : ((r > 0 ? 1 : 0) + binomial_children(r, n)) * k;
      EXPECT_EQ(s.bytes_sent, want) << "rank " << r << " of " << n;
      EXPECT_EQ(s.bytes_modelled, 0) << "tree bytes are counted message by message";
      EXPECT_STREQ(bytes_kind(s.bytes_sent, s.bytes_modelled), n == 1 ? "none" : "counted");
      // Over all ranks: every rank but the root sends K in each phase, 2(N-1)K.
      g.set_algorithm(Algorithm::native);
      const double total =
          all_reduce_host(g, ops::full({1}, double(s.bytes_sent), DType::f64), ReduceOp::sum).item<double>();
      EXPECT_EQ(int64_t(total), 2 * (n - 1) * k);
    }, o);
  }
}

TEST(TreeAllReduce, ParsesAndNamesTheAlgorithms) {
  EXPECT_EQ(parse_algorithm("tree"), Algorithm::tree);
  EXPECT_EQ(parse_algorithm("recursive"), Algorithm::recursive);
  EXPECT_STREQ(algorithm_name(Algorithm::recursive), "recursive");
  EXPECT_STREQ(bytes_kind(0, 0), "none");
  EXPECT_STREQ(bytes_kind(10, 0), "counted");
  EXPECT_STREQ(bytes_kind(10, 10), "modelled");
  EXPECT_STREQ(bytes_kind(10, 4), "counted+modelled");
}

}  // namespace
