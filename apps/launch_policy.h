// The decisions of `strata launch` as pure functions, apart from the processes it runs:
// the hosts it may use, Open MPI's teardown flags for a comm.timeout_s, what a finished
// mpirun's output and status say (success, a failure worth a restart, or one that is not),
// and the layout at the world size that remains. apps/launch.cpp runs the processes.
#pragma once
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace strata::apps::launch {

/// One host of the job and the ranks it takes (mpirun's slots).
struct Host {
  std::string name;
  int slots = 1;
};

/// "h1:2,h2,h3:4" (slots default to 1). ConfigError naming `option` for an empty name,
/// a duplicate host or slots that are not a positive integer.
std::vector<Host> parse_hosts(const std::string& list, const std::string& option = "--hosts");
/// An Open MPI hostfile: one "name [slots=N]" per line, '#' comments. ConfigError naming
/// the file and line.
std::vector<Host> read_hostfile(const std::string& path);
/// "h1:2,h2:1", as mpirun's --host takes it.
std::string host_list(const std::vector<Host>& hosts);
int total_slots(const std::vector<Host>& hosts);
/// The host of world rank `rank` when ranks fill the hosts' slots in order (--map-by
/// slot); "" when the hosts hold fewer ranks.
std::string host_of_rank(const std::vector<Host>& hosts, int rank);

/// Open MPI 4.x (ORTE) flags that end a job within comm.timeout_s when a host drops off
/// the network: mpirun's TCP keepalive to each daemon declares a host lost after about
/// timeout - min(10, timeout / 2) s (at least 2 s). The same formula as
/// scripts/mpi_fault_flags.sh (the test launch_fault_flags_agree checks both); a fractional
/// timeout is truncated, at least 1 s.
std::vector<std::string> mpi_fault_flags(double timeout_s);

/// Words of an option value like --mpirun-args "--mca btl tcp,self -x 'A=b c'": split at
/// blanks, single and double quotes group, backslash escapes. ConfigError naming `option`
/// for an unterminated quote.
std::vector<std::string> split_words(const std::string& text, const std::string& option);

/// What one mpirun's output (ranks' and mpirun's own lines, in any interleaving) says
/// about how the job ended. Fed line by line while the job runs.
class OutputScan {
 public:
  void line(const std::string& text);

  /// The first "strata: error: rank R: communication failed: ..." line, or "" (from
  /// "rank R", as are the others).
  const std::string& comm_failure() const { return comm_failure_; }
  /// The first other "strata: error: ..." line (a config or data error), or "".
  const std::string& strata_error() const { return strata_error_; }
  /// mpirun's first notice of a lost daemon or a rank ended by a signal, or "".
  const std::string& launcher_notice() const { return launcher_notice_; }
  /// World ranks the ranks' reports name as dead, lost or never joining, and ranks
  /// mpirun says were ended by a signal.
  const std::set<int>& named_ranks() const { return named_ranks_; }
  /// Nodes mpirun names: a lost remote daemon's, a signalled rank's.
  const std::set<std::string>& named_nodes() const { return named_nodes_; }
  bool lost_daemon() const { return lost_daemon_; }
  bool rank_signalled() const { return rank_signalled_; }

 private:
  std::string comm_failure_, strata_error_, launcher_notice_;
  std::set<int> named_ranks_;
  std::set<std::string> named_nodes_;
  bool lost_daemon_ = false, rank_signalled_ = false;
};

/// How a job ended, and what launch does about it.
enum class Outcome { success, transient, fatal };
struct Verdict {
  Outcome outcome = Outcome::fatal;
  int exit_code = 0;   ///< for fatal: the code launch exits with (the job's own)
  std::string reason;  ///< one line: why
};

/// mpirun's end (`status` its exit status, or `signal` > 0 when a signal ended mpirun
/// itself) and its output. Success: status 0. Transient (restart): any communication
/// failure line, status 3, a lost daemon, a rank or mpirun ended by a signal. Fatal:
/// status 1 or 2 with a strata error that is not a communication failure (a config or data
/// error every restart would repeat), or any other status without a sign of a lost peer.
Verdict classify(int status, int signal, const OutputScan& scan);

/// The hosts to use after a transient failure: those that answered the probe, and of those
/// that did not, the ones no report named (kept: nothing says they are the cause) unless
/// no host was named at all. `answered[i]` is hosts[i]'s probe result. `dropped` receives
/// the names left out.
std::vector<Host> surviving_hosts(const std::vector<Host>& hosts, const std::vector<bool>& answered,
                                  const std::set<std::string>& suspects, std::vector<std::string>& dropped);
/// The hosts a failure points at: those holding a named rank (ranks fill slots in order),
/// and those mpirun named.
std::set<std::string> suspect_hosts(const std::vector<Host>& hosts, const OutputScan& scan);

/// The model-parallel degrees a world size must be a multiple of.
struct Degrees {
  int tp = 1, pp = 1, cp = 1;
};
/// ConfigError naming parallel.tp / parallel.pp / parallel.cp when tp * pp * cp does not
/// divide `world` (the ranks left after a host was dropped).
void check_world(const Degrees& d, int world, const std::string& why);

}  // namespace strata::apps::launch
