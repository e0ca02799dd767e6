// The comm benchmark's pure parts (size parsing, bus factors) and a tiny local run, whose
// times fit in the wall time it ran and whose bandwidths follow from bytes and time.
#include <gtest/gtest.h>

#include <chrono>

#include "bench/comm_bench.h"

using namespace strata;
using namespace strata::comm;
using namespace strata::bench;

TEST(CommBench, ParsesSizesAndRanges) {
  EXPECT_EQ(parse_size("512"), 512);
  EXPECT_EQ(parse_size("4K"), 4096);
  EXPECT_EQ(parse_size("256M"), int64_t(256) << 20);
  EXPECT_EQ(parse_size("1G"), int64_t(1) << 30);
  EXPECT_THROW(parse_size("12Q"), ConfigError);
  EXPECT_THROW(parse_size("abc"), ConfigError);
  EXPECT_EQ(parse_size_range("1K:256M"), std::make_pair(int64_t(1024), int64_t(256) << 20));
  EXPECT_EQ(parse_size_range("1M"), std::make_pair(int64_t(1) << 20, int64_t(1) << 20));
  EXPECT_THROW(parse_size_range("4M:1M"), ConfigError);
}

TEST(CommBench, BusFactorsFollowNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor(OpKind::all_reduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor(OpKind::all_gather, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor(OpKind::reduce_scatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor(OpKind::broadcast, 8), 1.0);
}

TEST(CommBench, LocalRunProducesOneRowPerSize) {
  for (OpKind op : {OpKind::all_reduce, OpKind::all_gather, OpKind::reduce_scatter, OpKind::broadcast}) {
    CommBenchOptions o;
    o.op = op;
    o.ranks = 3;
    o.algorithm = Algorithm::ring;
    o.min_bytes = 3 << 10;
    o.max_bytes = 24 << 10;
    o.iters = 3;
    o.with_memcpy = false;
    const auto t0 = std::chrono::steady_clock::now();
    const auto rows = run_local_comm_bench(o);
    const double wall_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(rows.size(), 4u) << op_kind_name(op);
    // The timed ops ran inside this call: iters x the mean time per op, over the sizes,
    // fits in its wall time (a unit slip in time_us would not).
    double timed_us = 0;
    for (const auto& row : rows) timed_us += double(row.iters) * row.time_us;
    EXPECT_LE(timed_us, wall_us) << op_kind_name(op);
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_EQ(rows[i].bytes, int64_t(3 << 10) << i);  // divisible by 3 ranks x 4 bytes
      EXPECT_GT(rows[i].time_us, 0);
      EXPECT_EQ(rows[i].iters, 3);
      // GB/s from the row's bytes and time; the bus factor of 3 ranks as nccl-tests has it.
      const double algbw = double(rows[i].bytes) / (rows[i].time_us * 1e-6) / 1e9;
      const double factor = op == OpKind::all_reduce ? 4.0 / 3.0 : op == OpKind::broadcast ? 1.0 : 2.0 / 3.0;
      EXPECT_NEAR(rows[i].algbw, algbw, 1e-9 * algbw);
      EXPECT_NEAR(rows[i].busbw, algbw * factor, 1e-9 * algbw);
      EXPECT_STREQ(rows[i].bytes_kind(), "counted");  // ring (broadcast: tree) on send/recv
      if (op == OpKind::all_reduce) {  // rank 0 of a 3-rank ring sends 2 x (its 2 segments of a third)
        EXPECT_EQ(rows[i].bytes_sent, 2 * (2 * rows[i].bytes / 3));
      }
    }
    const std::string table = format_comm_bench(o, 3, rows);
    EXPECT_NE(table.find("busbw(GB/s)"), std::string::npos);
    EXPECT_NE(table.find("algorithm ring, 3 ranks"), std::string::npos) << table;
    EXPECT_NE(table.find("bytes rank 0 sent per op, counted"), std::string::npos) << table;
  }
  CommBenchOptions o;
  o.ranks = 2;
  o.min_bytes = o.max_bytes = 4 << 10;
  o.iters = 2;
  o.with_memcpy = false;
  const auto rows = run_local_comm_bench(o);  // native: the bus model
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_STREQ(rows[0].bytes_kind(), "modelled");
  EXPECT_EQ(rows[0].bytes_sent, 4 << 10);  // 2(N-1)/N x K with N = 2
  EXPECT_NE(format_comm_bench(o, 2, rows).find("modelled (native collective"), std::string::npos);
}
