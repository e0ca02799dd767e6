// strata launch's decisions (apps/launch_policy.h): host lists, the teardown flags, reading
// how a job ended from the lines strata's ranks and Open MPI 4.1's mpirun print (lines
// copied from real runs of tests/launch.sh), and which hosts and layout a restart uses.
#include "apps/launch_policy.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <strata/core/error.h>
#include "tests/temp_dir_fixture.h"

namespace strata::apps::launch {
namespace {

std::string config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(LaunchHosts, ParsesNamesAndSlots) {
  const std::vector<Host> h = parse_hosts("node1:4, node2,node3:2");
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0].name, "node1");
  EXPECT_EQ(h[0].slots, 4);
  EXPECT_EQ(h[1].name, "node2");
  EXPECT_EQ(h[1].slots, 1);
  EXPECT_EQ(host_list(h), "node1:4,node2:1,node3:2");
  EXPECT_EQ(total_slots(h), 7);
  // Ranks fill the slots in order (--map-by slot).
  EXPECT_EQ(host_of_rank(h, 0), "node1");
  EXPECT_EQ(host_of_rank(h, 3), "node1");
  EXPECT_EQ(host_of_rank(h, 4), "node2");
  EXPECT_EQ(host_of_rank(h, 6), "node3");
  EXPECT_EQ(host_of_rank(h, 7), "");
}

TEST(LaunchHosts, RefusesBadListsNamingTheOption) {
  EXPECT_NE(config_error([] { parse_hosts("a:0"); }).find("--hosts 'a:0': slots '0' is not a positive integer"),
            std::string::npos);
  EXPECT_NE(config_error([] { parse_hosts("a:x"); }).find("slots 'x'"), std::string::npos);
  EXPECT_NE(config_error([] { parse_hosts("a,b,a:2"); }).find("host 'a' given twice"), std::string::npos);
  EXPECT_NE(config_error([] { parse_hosts("a,,b"); }).find("empty host name"), std::string::npos);
}

class LaunchHostfile : public strata::testing::TempDirTest {};

TEST_F(LaunchHostfile, ReadsOpenMpiHostfilesAndNamesTheBadLine) {
  const std::string f = path("hosts");
  std::ofstream(f) << "# cluster\nnode1 slots=4\n\nnode2   slots = 2 max_slots=8  # big\nnode3\n";
  const std::vector<Host> h = read_hostfile(f);
  EXPECT_EQ(host_list(h), "node1:4,node2:2,node3:1");
  std::ofstream(f) << "node1 slots=4\nnode2 cpus=2\n";
  EXPECT_NE(config_error([&] { read_hostfile(f); }).find(f + ":2: expected 'NAME [slots=N]'"), std::string::npos);
  EXPECT_NE(config_error([&] { read_hostfile(path("none")); }).find("cannot read"), std::string::npos);
}

TEST(LaunchFlags, TeardownFlagsFollowTheScriptsFormula) {
  auto flags = [](double t) {
    std::string s;
    for (const std::string& w : mpi_fault_flags(t)) s += (s.empty() ? "" : " ") + w;
    return s;
  };
  // D = t - min(10, t/2) (at least 2 s), probed every ceil(D/120) s.
  EXPECT_EQ(flags(10), "--mca oob_tcp_keepalive_time 1 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 5");
  EXPECT_EQ(flags(300), "--mca oob_tcp_keepalive_time 1 --mca oob_tcp_keepalive_intvl 3 --mca oob_tcp_keepalive_probes 97");
  EXPECT_EQ(flags(10.9), flags(10));  // truncated, as the script does
  EXPECT_EQ(flags(0.5), flags(1));    // at least 1 s
  EXPECT_EQ(flags(1), "--mca oob_tcp_keepalive_time 1 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 2");
}

TEST(LaunchWords, SplitsLikeAShell) {
  EXPECT_EQ(split_words("  --mca btl tcp,self -x 'A=b c' \"q\\\"x\" e\\ f", "--mpirun-args"),
            (std::vector<std::string>{"--mca", "btl", "tcp,self", "-x", "A=b c", "q\"x", "e f"}));
  EXPECT_TRUE(split_words("", "--mpirun-args").empty());
  EXPECT_NE(config_error([] { split_words("-x 'A=b", "--mpirun-args"); }).find("--mpirun-args: unterminated ' quote"),
            std::string::npos);
}

OutputScan scan_of(const std::vector<std::string>& lines) {
  OutputScan s;
  for (const std::string& l : lines) s.line(l);
  return s;
}

TEST(LaunchScan, AKilledRankIsACommunicationFailureNamingIt) {
  const OutputScan s = scan_of({
      "step 9/300 | epoch 0.23 | loss 1.0123",
      "strata: error: rank 0: communication failed: [all_reduce] all_reduce seq 49 in group 'world' (mpi, 2 ranks) on "
      "rank 0: f64 x 1 (8 B), op max, algorithm auto: lost peer: rank 1 (pid 19232 on vm) was killed or exited (zombie)",
      "mpirun noticed that process rank 1 with PID 0 on node h2 exited on signal 9 (Killed).",
  });
  const Verdict v = classify(137, 0, s);  // mpirun returns the killed rank's status
  EXPECT_EQ(v.outcome, Outcome::transient);
  EXPECT_EQ(v.reason.rfind("rank 0: communication failed: [all_reduce]", 0), 0u) << v.reason;
  EXPECT_EQ(s.named_ranks(), (std::set<int>{1}));
  EXPECT_EQ(s.named_nodes(), (std::set<std::string>{"h2"}));
  EXPECT_TRUE(s.rank_signalled());
}

TEST(LaunchScan, AHungOrLostRankIsNamedByTheRankThatNeverJoined) {
  const OutputScan s = scan_of({
      "strata: error: rank 0: communication failed: [all_gather] stopped by the launcher (SIGTERM) after waiting 6.4 s "
      "of comm.timeout_s 10 s: all_gather seq 53 in group 'world' (mpi, 4 ranks) on rank 0: u8 x 128 (128 B), algorithm "
      "auto; rank 3 (pid 29061 on vm) never joined all_gather seq 53 in group 'world' or stopped inside it (no answer "
      "to the timeout status exchange within 0.5 s); rank 0 reached it; rank 2 timed out in all_gather seq 54",
      "strata: error: rank 1: communication failed: [send] ... lost peer: rank 0 (world rank 2) (pid 7 on vm) exited",
  });
  EXPECT_EQ(s.named_ranks(), (std::set<int>{2, 3}));  // a group rank is read as its world rank
  EXPECT_EQ(classify(3, 0, s).outcome, Outcome::transient);
  const std::vector<Host> hosts = parse_hosts("h1:2,h2:2");
  EXPECT_EQ(suspect_hosts(hosts, s), (std::set<std::string>{"h2"}));
}

TEST(LaunchScan, ALostDaemonNamesItsNode) {
  const OutputScan s = scan_of({
      "--------------------------------------------------------------------------",
      "ORTE has lost communication with a remote daemon.",
      "",
      "  HNP daemon   : [[40533,0],0] on node vm",
      "  Remote daemon: [[40533,0],2] on node h3",
  });
  EXPECT_TRUE(s.lost_daemon());
  EXPECT_EQ(s.named_nodes(), (std::set<std::string>{"h3"}));
  const Verdict v = classify(1, 0, s);  // no strata error: mpirun's own status
  EXPECT_EQ(v.outcome, Outcome::transient);
  EXPECT_EQ(v.reason, "mpirun: ORTE has lost communication with a remote daemon");
}

TEST(LaunchScan, ConfigAndDataErrorsAreNeverRestarted) {
  const OutputScan config = scan_of({"strata: error: parallel: dp x tp x pp = 3 x 1 x 1 = 3 rank(s), but the world has 2"});
  Verdict v = classify(2, 0, config);
  EXPECT_EQ(v.outcome, Outcome::fatal);
  EXPECT_EQ(v.exit_code, 2);
  EXPECT_EQ(v.reason.rfind("parallel: dp x tp x pp", 0), 0u);
  // A checkpoint error on one rank that its peer then sees as a lost peer is still the data error.
  const OutputScan data = scan_of({
      "strata: error: checkpoint 'run/checkpoints/step_6/shard_0.safetensors': CRC32 mismatch",
      "strata: error: rank 1: communication failed: ... lost peer: rank 0 (pid 5 on vm) exited",
  });
  v = classify(1, 0, data);
  EXPECT_EQ(v.outcome, Outcome::fatal);
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_NE(v.reason.find("CRC32 mismatch"), std::string::npos);
}

TEST(LaunchScan, OtherEndings) {
  const OutputScan none;
  EXPECT_EQ(classify(0, 0, none).outcome, Outcome::success);
  EXPECT_EQ(classify(0, 11, none).outcome, Outcome::transient);  // mpirun itself crashed
  EXPECT_EQ(classify(3, 0, none).outcome, Outcome::transient);
  const Verdict v = classify(127, 0, none);  // e.g. an executable mpirun cannot find
  EXPECT_EQ(v.outcome, Outcome::fatal);
  EXPECT_EQ(v.exit_code, 127);
}

TEST(LaunchRestart, DropsOnlyNamedHostsThatDoNotAnswer) {
  const std::vector<Host> hosts = parse_hosts("h1:2,h2:2,h3:2");
  std::vector<std::string> dropped;
  // h2 named and silent: dropped; h3 silent but not named: kept (nothing says it failed).
  std::vector<Host> keep = surviving_hosts(hosts, {true, false, false}, {"h2"}, dropped);
  EXPECT_EQ(host_list(keep), "h1:2,h3:2");
  EXPECT_EQ(dropped, (std::vector<std::string>{"h2"}));
  // Named but answering (a killed rank on a healthy host): kept.
  dropped.clear();
  keep = surviving_hosts(hosts, {true, true, true}, {"h2"}, dropped);
  EXPECT_EQ(host_list(keep), "h1:2,h2:2,h3:2");
  EXPECT_TRUE(dropped.empty());
  // Nothing named: every silent host goes.
  keep = surviving_hosts(hosts, {false, true, false}, {}, dropped);
  EXPECT_EQ(host_list(keep), "h2:2");
  EXPECT_EQ(dropped, (std::vector<std::string>{"h1", "h3"}));
}

TEST(LaunchRestart, TheModelDegreesMustDivideTheWorldLeft) {
  EXPECT_NO_THROW(check_world({.tp = 2, .pp = 2}, 8, "on h1:4,h2:4"));
  EXPECT_NO_THROW(check_world({.tp = 2}, 2, "on h1:2"));
  const std::string e = config_error([] { check_world({.tp = 2, .pp = 2}, 6, "on h1:4,h3:2 after dropping h2"); });
  EXPECT_NE(e.find("parallel.tp (2) x parallel.pp (2) x parallel.cp (1) = 4 does not divide the 6 rank(s) left on "
                   "h1:4,h3:2 after dropping h2"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace strata::apps::launch
