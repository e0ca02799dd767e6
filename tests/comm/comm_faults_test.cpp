// Never hang silently (local backend): timeouts name op/group/rank/seq/size, a failing
// rank aborts its peers, debug mode catches mismatched calls on every rank.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <stdexcept>

#include "collective_checks.h"
#include <strata/comm/local.h>

using namespace strata;
using namespace strata::comm;
using namespace strata::comm::testing;

namespace {

TEST(CommFaults, TimeoutNamesOpGroupRankSeqAndSize) {
  CommOptions o;
  o.timeout_s = 0.3;
  std::string msg0, later;
  const auto t0 = std::chrono::steady_clock::now();
  run_local(2, [&](ProcessGroup& g) {
    g.barrier().wait();  // seq 0
    if (g.rank() == 1) return;  // rank 1 never joins the all_reduce
    Tensor t = ops::zeros({100}, DType::f32);
    try {
      g.all_reduce(t).wait();  // seq 1
    } catch (const CommError& e) {
      msg0 = e.what();
    }
    try {
      g.all_reduce(t).wait();
    } catch (const CommError& e) {
      later = e.what();
    }
  }, o);
  EXPECT_LT(seconds_since(t0), 5.0);
  EXPECT_NE(msg0.find("[all_reduce] timed out after 0.3 s"), std::string::npos) << msg0;
  EXPECT_NE(msg0.find("seq 1"), std::string::npos) << msg0;
  EXPECT_NE(msg0.find("group 'world'"), std::string::npos) << msg0;
  EXPECT_NE(msg0.find("on rank 0"), std::string::npos) << msg0;
  EXPECT_NE(msg0.find("f32 x 100 (400 B)"), std::string::npos) << msg0;
  // The group is failed: later ops error at once instead of waiting again.
  EXPECT_NE(later.find("unusable after an earlier failure"), std::string::npos) << later;
}

TEST(CommFaults, RingTimeoutNamesThePeerWaitedFor) {
  CommOptions o;
  o.timeout_s = 0.3;
  o.algorithm = Algorithm::ring;
  std::string msg;
  run_local(3, [&](ProcessGroup& g) {
    if (g.rank() == 2) return;
    Tensor t = ops::zeros({3000}, DType::f32);
    try {
      g.all_reduce(t).wait();
    } catch (const CommError& e) {
      if (g.rank() == 0) msg = e.what();
    }
  }, o);
  EXPECT_NE(msg.find("timed out"), std::string::npos) << msg;
  EXPECT_NE(msg.find("algorithm ring"), std::string::npos) << msg;
  EXPECT_NE(msg.find("waiting for rank 2"), std::string::npos) << msg;
}

TEST(CommFaults, AFailingRankAbortsItsPeersQuickly) {
  // Default timeout (300 s): the peers must not wait it out.
  std::vector<std::string> msgs(3);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    run_local(3, [&](ProcessGroup& g) {
      auto sub = g.split(0, g.rank());  // aborting the world reaches groups split from it
      if (g.rank() == 2) throw std::runtime_error("boom");
      Tensor t = ops::zeros({10}, DType::f32);
      try {
        sub->all_reduce(t).wait();
      } catch (const CommError& e) {
        msgs[size_t(g.rank())] = e.what();
      }
    });
    ADD_FAILURE() << "run_local should rethrow the rank's exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "boom");
  }
  EXPECT_LT(seconds_since(t0), 10.0);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(msgs[size_t(r)].find("aborted"), std::string::npos) << msgs[size_t(r)];
    EXPECT_NE(msgs[size_t(r)].find("rank 2 failed: boom"), std::string::npos) << msgs[size_t(r)];
  }
}

TEST(CommFaults, DebugModeReportsMismatchOnEveryRankAndStaysUsable) {
  CommOptions o;
  o.debug = true;
  o.timeout_s = 20;
  std::vector<std::string> msgs(3);
  run_local(3, [&](ProcessGroup& g) {
    const int r = g.rank();
    Tensor t = ops::ones({r == 1 ? 9 : 10}, DType::f32);
    try {
      g.all_reduce(t).wait();
      ADD_FAILURE() << "rank " << r << ": mismatched all_reduce ran";
    } catch (const CommError& e) {
      msgs[size_t(r)] = e.what();
    }
    // Root mismatch on broadcast, dtype mismatch on all_gather.
    Tensor b = ops::ones({4}, DType::f32);
    EXPECT_THROW(g.broadcast(b, r == 0 ? 1 : 0).wait(), CommError);
    Tensor in = ops::ones({2}, r == 2 ? DType::f64 : DType::f32);
    Tensor out = ops::zeros({6}, in.dtype());
    EXPECT_THROW(g.all_gather(in, out).wait(), CommError);
    // Matching calls still work afterwards.
    Tensor ok = ops::ones({10}, DType::f32);
    g.all_reduce(ok).wait();
    expect_values(read_tensor(ok), std::vector<double>(10, 3.0), 0, "all_reduce after mismatch");
  }, o);
  for (int r = 0; r < 3; ++r) {
    const std::string& m = msgs[size_t(r)];
    EXPECT_NE(m.find("issued different collectives"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 0: all_reduce seq 0, f32 x 10"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1: all_reduce seq 0, f32 x 9"), std::string::npos) << m;
  }
}

TEST(CommFaults, DebugModeFromEnvironment) {
  CommOptions o;
  ::setenv("STRATA_COMM_DEBUG", "1", 1);
  EXPECT_TRUE(o.debug_enabled());
  ::setenv("STRATA_COMM_DEBUG", "0", 1);
  EXPECT_FALSE(o.debug_enabled());
  ::unsetenv("STRATA_COMM_DEBUG");
}

TEST(CommFaults, RecvSizeMismatchIsAnErrorOnBothSides) {
  CommOptions o;
  o.timeout_s = 10;
  std::vector<std::string> msgs(2);
  run_local(2, [&](ProcessGroup& g) {
    try {
      if (g.rank() == 0) g.send(ops::zeros({4}), 1).wait();
      else g.recv(ops::zeros({5}), 0).wait();
    } catch (const CommError& e) {
      msgs[size_t(g.rank())] = e.what();
    }
  }, o);
  for (auto& m : msgs) EXPECT_NE(m.find("size mismatch: rank 0 sent 16 bytes to rank 1, which expected 20"), std::string::npos) << m;
}

TEST(CommFaults, WorkWaitHasItsOwnLimit) {
  CommOptions o;
  o.timeout_s = 1.0;
  run_local(2, [&](ProcessGroup& g) {
    if (g.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      g.barrier().wait();
      return;
    }
    Work w = g.barrier();
    EXPECT_FALSE(w.is_completed());
    try {
      w.wait(std::chrono::milliseconds(20));
      ADD_FAILURE() << "wait should have timed out";
    } catch (const CommError& e) {
      EXPECT_NE(std::string(e.what()).find("wait timed out after 0.02 s on barrier seq 0"), std::string::npos)
          << e.what();
    }
    w.wait();  // completes once rank 1 arrives
    EXPECT_TRUE(w.is_completed());
  }, o);
}

TEST(CommOptionsTest, ParseAndValidate) {
  EXPECT_EQ(parse_algorithm("ring"), Algorithm::ring);
  EXPECT_EQ(parse_algorithm("auto"), Algorithm::automatic);
  EXPECT_THROW(parse_algorithm("butterfly"), ConfigError);
  EXPECT_EQ(parse_reduce_op("max"), ReduceOp::max);
  EXPECT_EQ(parse_op_kind("reduce_scatter"), OpKind::reduce_scatter);
  CommOptions o;
  o.timeout_s = 0;
  try {
    o.validate();
    ADD_FAILURE();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("comm.timeout_s"), std::string::npos);
  }
}

}  // namespace
