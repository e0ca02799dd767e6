// batch_isend_irecv on the local backend: ring exchanges that plain send-then-recv
// deadlocks on, mixed batches, argument checks, and a peer that never posts its half;
// and the missing-rank report of a collective that one rank never joins.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "p2p_checks.h"
#include <strata/comm/local.h>

using namespace strata;
using namespace strata::comm;
using namespace strata::comm::testing;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Rank 0's batch (send 16 f32 to rank 1 tag 7, recv 8 i64 from rank 2 tag 9, "pp stage 0
// mb 3") that nobody matches, under comm.timeout_s 0.5: when it failed, what it says, and
// that the group is unusable afterwards (a p2p timeout fails the group like any other).
void expect_pp_timeout_report(double took, const std::string& msg, const std::string& later) {
  EXPECT_GE(took, 0.5);
  EXPECT_LT(took, 0.5 + 3.0);
  EXPECT_TRUE(contains(msg, "[batch_isend_irecv] timed out after 0.5 s (comm.timeout_s)")) << msg;
  EXPECT_TRUE(contains(msg, "batch_isend_irecv p2p seq 0 in group 'world' (local, 3 ranks) on rank 0 "
                            "[pp stage 0 mb 3]")) << msg;
  EXPECT_TRUE(contains(msg, "still pending: send f32 x 16 to rank 1 tag 7; recv i64 x 8 from rank 2 tag 9")) << msg;
  EXPECT_TRUE(contains(msg, "waiting for rank 1, rank 2")) << msg;
  EXPECT_TRUE(contains(later, "unusable after an earlier failure")) << later;
}

TEST(BatchP2P, RingExchange) {
  for (int n : {2, 4}) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    run_local(n, [](ProcessGroup& g) {
      check_ring_exchange(g, 1000);
      check_ring_exchange(g, 0);  // empty tensors still match
    });
  }
}

// The same ring as plain send then recv: every send waits for a receive that its
// receiver posts only after its own send, so all ranks time out. This is what the
// batch above avoids.
TEST(BatchP2P, PlainSendThenRecvRingDeadlocks) {
  CommOptions o;
  o.timeout_s = 0.3;
  std::vector<std::string> msgs(3);
  run_local(3, [&](ProcessGroup& g) {
    const int n = g.size(), r = g.rank();
    Tensor out = ops::ones({10}, DType::f32), in = ops::zeros({10}, DType::f32);
    try {
      g.send(out, (r + 1) % n).wait();
      g.recv(in, (r + n - 1) % n).wait();
    } catch (const CommError& e) {
      msgs[size_t(r)] = e.what();
    }
  }, o);
  for (const std::string& m : msgs) EXPECT_TRUE(contains(m, "[send]")) << m;
}

TEST(BatchP2P, MixedSizesDtypesTagsAndLayouts) {
  for (int n : {2, 3, 4}) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    run_local(n, [](ProcessGroup& g) { check_mixed_batch(g); });
  }
}

TEST(BatchP2P, ChecksArgumentsOnTheCallersThread) {
  run_local(2, [](ProcessGroup& g) {
    const int other = 1 - g.rank();
    Tensor t = ops::zeros({4}, DType::f32);
    EXPECT_TRUE(g.batch_isend_irecv({}, "nothing").is_completed());
    auto error_of = [&](std::vector<P2POp> ops) -> std::string {
      try {
        g.batch_isend_irecv(std::move(ops), "pp stage 0 mb 1");
      } catch (const Error& e) {
        return e.what();
      }
      return "(no error)";
    };
    std::string m = error_of({{P2POp::Kind::send, t, other}, {P2POp::Kind::recv, t, g.rank()}});
    EXPECT_TRUE(contains(m, "batch_isend_irecv op 1 (recv, pp stage 0 mb 1)")) << m;
    EXPECT_TRUE(contains(m, "is not another rank")) << m;
    m = error_of({{P2POp::Kind::send, t, 2}});
    EXPECT_TRUE(contains(m, "peer rank 2 is not another rank")) << m;
    m = error_of({{P2POp::Kind::send, t, other, ProcessGroup::kMaxUserTag}});
    EXPECT_TRUE(contains(m, "tag 30000 out of range")) << m;
    m = error_of({{P2POp::Kind::recv, ops::expand(ops::zeros({1}, DType::f32), {4}), other}});
    EXPECT_TRUE(contains(m, "expanded view")) << m;
    m = error_of({{P2POp::Kind::send, Tensor(), other}});
    EXPECT_TRUE(contains(m, "undefined")) << m;
    // Nothing was queued by the refused calls: the group still works.
    check_ring_exchange(g, 8);
  });
}

TEST(BatchP2P, SendOverlappingARecvSendsTheOldValues) {
  run_local(2, [](ProcessGroup& g) {
    const int other = 1 - g.rank();
    Tensor t = make_tensor(DType::f32, {double(g.rank()), 5.0});
    g.batch_isend_irecv({{P2POp::Kind::recv, t, other}, {P2POp::Kind::send, t, other}}).wait();
    expect_values(read_tensor(t), {double(other), 5.0}, 0, "swap in place");
  });
}

TEST(BatchP2P, PeerThatNeverPostsTimesOutNamingPeerLabelAndTag) {
  CommOptions o;
  o.timeout_s = 0.5;
  std::string msg, later;
  double took = 0;
  run_local(3, [&](ProcessGroup& g) {
    if (g.rank() != 0) return;  // ranks 1 and 2 never post their halves
    Tensor a = ops::ones({16}, DType::f32), b = ops::zeros({8}, DType::i64);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      g.batch_isend_irecv({{P2POp::Kind::send, a, 1, 7}, {P2POp::Kind::recv, b, 2, 9}}, "pp stage 0 mb 3").wait();
    } catch (const CommError& e) {
      msg = e.what();
    }
    took = seconds_since(t0);
    try {
      g.barrier().wait();
    } catch (const CommError& e) {
      later = e.what();
    }
  }, o);
  expect_pp_timeout_report(took, msg, later);
}

TEST(BatchP2P, CollectivesAndP2PAreNumberedApart) {
  // Ranks issue different p2p ops (rank 0 one batch, rank 1 two recvs), then the same
  // collective: its seq must agree, or debug mode would call the calls mismatched.
  CommOptions o;
  o.debug = true;
  o.timeout_s = 20;
  run_local(2, [](ProcessGroup& g) {
    Tensor a = ops::ones({3}, DType::f32), b = ops::ones({3}, DType::f32);
    if (g.rank() == 0) {
      g.batch_isend_irecv({{P2POp::Kind::send, a, 1}, {P2POp::Kind::send, b, 1}}).wait();
    } else {
      g.recv(a, 0).wait();
      g.recv(b, 0).wait();
    }
    Tensor t = ops::ones({4}, DType::f32);
    g.all_reduce(t).wait();
    expect_values(read_tensor(t), std::vector<double>(4, 2.0), 0, "all_reduce after p2p");
  }, o);
}

// Local ranks are threads of one process: a sub-group's host_ranks() is its world's size.
TEST(LocalGroups, HostRanksIsTheWorldSize) {
  run_local(3, [](ProcessGroup& g) {
    EXPECT_EQ(g.host_ranks(), 3);
    auto sub = g.split(g.rank() == 2 ? 1 : 0, 0, "sub");
    ASSERT_NE(sub, nullptr);
    EXPECT_EQ(sub->host_ranks(), 3);
  });
}

// set_inline_p2p: the caller posts and the waiter progresses; no comm thread is started.
TEST(InlineP2P, RingAndMixedBatchesWithoutACommThread) {
  for (int n : {2, 3}) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    run_local(n, [](ProcessGroup& g) {
      g.set_inline_p2p(true);
      EXPECT_TRUE(g.inline_p2p());
      check_ring_exchange(g, 1000);
      check_ring_exchange(g, 0);
      check_mixed_batch(g);  // also counts the bytes in stats()
      EXPECT_EQ(g.comm_thread_cpu_s(), 0.0) << "an inline batch went through the comm thread";
      g.set_inline_p2p(false);
      check_ring_exchange(g, 10);  // queued again: the comm thread starts
      EXPECT_GT(g.comm_thread_cpu_s(), 0.0);
    });
  }
}

// Issue order holds: a batch issued while a collective is queued or running waits behind
// it (on the comm thread); is_completed() polls an inline batch to completion.
TEST(InlineP2P, QueuedBehindCollectivesAndPolledByIsCompleted) {
  run_local(2, [](ProcessGroup& g) {
    g.set_inline_p2p(true);
    const int other = 1 - g.rank();
    Tensor t = ops::ones({64}, DType::f32);
    Work ar = g.all_reduce(t);  // may still be queued when the batch comes
    Tensor out = make_tensor(DType::f32, {double(g.rank()), 1.0}), in = ops::zeros({2}, DType::f32);
    Work w = g.batch_isend_irecv({{P2POp::Kind::send, out, other, 4}, {P2POp::Kind::recv, in, other, 4}}, "after");
    ar.wait();
    const auto t0 = std::chrono::steady_clock::now();
    while (!w.is_completed()) ASSERT_LT(seconds_since(t0), 20.0) << "is_completed never saw the batch complete";
    w.wait();
    expect_values(read_tensor(in), {double(other), 1.0}, 0, "swapped");
    expect_values(read_tensor(t), std::vector<double>(64, 2.0), 0, "all_reduce before it");
  });
}

// Two threads wait on one inline batch while a third polls it: one progresses it, the
// others wait for its lock (a polled lock, visible to ThreadSanitizer, which a timed lock
// was not), and all see it complete with the data in place.
TEST(InlineP2P, SeveralWaitersOnOneBatch) {
  run_local(2, [](ProcessGroup& g) {
    g.set_inline_p2p(true);
    const int other = 1 - g.rank();
    if (g.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 0's waiters meet
    Tensor out = make_tensor(DType::f32, {double(g.rank()), 2.0}), in = ops::zeros({2}, DType::f32);
    Work w = g.batch_isend_irecv({{P2POp::Kind::send, out, other, 5}, {P2POp::Kind::recv, in, other, 5}}, "shared");
    std::atomic<int> done{0};
    std::thread waiter([&] {
      w.wait();
      done.fetch_add(1);
    });
    std::thread poller([&] {
      const auto t0 = std::chrono::steady_clock::now();
      while (!w.is_completed()) ASSERT_LT(seconds_since(t0), 20.0) << "is_completed never saw the batch complete";
      done.fetch_add(1);
    });
    w.wait();
    waiter.join();
    poller.join();
    EXPECT_EQ(done.load(), 2);
    expect_values(read_tensor(in), {double(other), 2.0}, 0, "swapped");
  });
}

TEST(InlineP2P, PeerThatNeverPostsTimesOutAndFailsTheGroup) {
  CommOptions o;
  o.timeout_s = 0.5;
  std::string msg, later, polled;
  double took = 0;
  run_local(3, [&](ProcessGroup& g) {
    if (g.rank() != 0) return;  // ranks 1 and 2 never post their halves
    g.set_inline_p2p(true);
    Tensor a = ops::ones({16}, DType::f32), b = ops::zeros({8}, DType::i64);
    const auto t0 = std::chrono::steady_clock::now();
    Work w = g.batch_isend_irecv({{P2POp::Kind::send, a, 1, 7}, {P2POp::Kind::recv, b, 2, 9}}, "pp stage 0 mb 3");
    // A wait shorter than the op's own limit gives up without failing the op.
    try {
      w.wait(std::chrono::duration<double>(0.05));
    } catch (const CommError& e) {
      polled = e.what();
    }
    try {
      w.wait();
    } catch (const CommError& e) {
      msg = e.what();
    }
    took = seconds_since(t0);
    try {
      g.batch_isend_irecv({{P2POp::Kind::send, a, 1, 7}}).wait();
    } catch (const CommError& e) {
      later = e.what();
    }
  }, o);
  EXPECT_TRUE(contains(polled, "wait timed out after 0.05 s")) << polled;
  EXPECT_TRUE(contains(polled, "still in flight")) << polled;
  expect_pp_timeout_report(took, msg, later);
}

// A peer that aborts the group fails an inline wait at once, not at the timeout.
TEST(InlineP2P, PeerAbortFailsTheWaitAtOnce) {
  CommOptions o;
  o.timeout_s = 30;
  std::string msg;
  double took = 0;
  run_local(2, [&](ProcessGroup& g) {
    g.set_inline_p2p(true);
    if (g.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      g.abort("rank 1 gives up");
      return;
    }
    Tensor b = ops::zeros({8}, DType::f32);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      g.batch_isend_irecv({{P2POp::Kind::recv, b, 1, 0}}, "waiting").wait();
    } catch (const CommError& e) {
      msg = e.what();
    }
    took = seconds_since(t0);
  }, o);
  EXPECT_LT(took, 5.0);
  EXPECT_TRUE(contains(msg, "rank 1 gives up")) << msg;
  EXPECT_TRUE(contains(msg, "[waiting]")) << msg;
}

// The ranks that time out name the one that never arrived.
// A rank counts as having reached the op when its answer to the status exchange (sent
// once its own wait times out) arrives within the grace (max(0.2, timeout/2) s) after
// the first rank's timeout, so the ranks that do join must start the op within the
// grace of each other. Each issues seq 1 right behind seq 0 (no wait between): its comm
// thread starts seq 1 the moment seq 0 completes there, with no rank thread to wake in
// between (waiting for seq 0 first let a loaded host start rank 3's seq 1 more than the
// 0.25 s grace of a 0.5 s timeout late: "rank 2, rank 3 never joined" under ASan). The
// 2 s timeout gives 1 s of grace for the rest (thread wake-ups on a loaded host).
TEST(HangReport, NamesTheRankThatNeverJoined) {
  constexpr double kTimeout = 2.0;
  for (Algorithm algo : {Algorithm::native, Algorithm::ring}) {
    SCOPED_TRACE(algorithm_name(algo));
    CommOptions o;
    o.timeout_s = kTimeout;
    o.algorithm = algo;
    std::vector<std::string> msgs(4);
    std::vector<double> took(4, 0.0);
    run_local(4, [&](ProcessGroup& g) {
      Tensor t = ops::ones({1000}, DType::f32), u = ops::ones({1000}, DType::f32);
      Work seq0 = g.all_reduce(t);  // everyone is up
      if (g.rank() == 2) {  // never joins seq 1
        seq0.wait();
        return;
      }
      const auto t0 = std::chrono::steady_clock::now();
      Work seq1 = g.all_reduce(u);
      seq0.wait();
      try {
        seq1.wait();
      } catch (const CommError& e) {
        msgs[size_t(g.rank())] = e.what();
      }
      took[size_t(g.rank())] = seconds_since(t0);
    }, o);
    for (int r : {0, 1, 3}) {
      const std::string& m = msgs[size_t(r)];
      EXPECT_TRUE(contains(m, "timed out after 2 s")) << m;
      EXPECT_TRUE(contains(m, "rank 2 never joined all_reduce seq 1 in group 'world'")) << m;
      EXPECT_TRUE(contains(m, "ranks 0,1,3 reached it")) << m;
      // seq 0, comm.timeout_s, then at most the grace (1 s) of status exchange: not the
      // Work's own limit (timeout * 1.1 + 2 + grace), whose message differs anyway.
      EXPECT_LT(took[size_t(r)], kTimeout + 1.0 + 1.5) << "rank " << r;
    }
  }
}

TEST(HangReport, EveryRankReachedIt) {
  // A collective that every rank joins but that cannot complete: two ranks use ring,
  // two native, so they wait on different things. No rank is blamed.
  CommOptions o;
  // Long enough that both ranks time out within the status exchange's grace
  // (max(0.2, timeout/2) s) of each other even on a loaded host (0.4 s failed there).
  o.timeout_s = 1.5;
  std::vector<std::string> msgs(2);
  run_local(2, [&](ProcessGroup& g) {
    g.set_algorithm(g.rank() == 0 ? Algorithm::ring : Algorithm::native);
    Tensor t = ops::ones({10}, DType::f32);
    try {
      g.all_reduce(t).wait();
    } catch (const CommError& e) {
      msgs[size_t(g.rank())] = e.what();
    }
  }, o);
  for (const std::string& m : msgs) {
    EXPECT_TRUE(contains(m, "every rank reached all_reduce seq 0 in group 'world'")) << m;
    EXPECT_FALSE(contains(m, "never joined")) << m;
  }
}

}  // namespace
