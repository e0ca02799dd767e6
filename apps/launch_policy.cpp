// The pure decisions of `strata launch` (apps/launch_policy.h).
#include "apps/launch_policy.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <regex>

#include <strata/core/error.h>

namespace strata::apps::launch {

namespace {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

int positive_int(const std::string& text, const std::string& where) {
  size_t used = 0;
  long v = 0;
  try {
    v = std::stol(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || v < 1 || v > 1 << 20)
    STRATA_THROW(ConfigError, where, ": slots '", text, "' is not a positive integer");
  return int(v);
}

void add_host(std::vector<Host>& hosts, Host h, const std::string& where) {
  if (h.name.empty()) STRATA_THROW(ConfigError, where, ": empty host name");
  for (const Host& o : hosts)
    if (o.name == h.name) STRATA_THROW(ConfigError, where, ": host '", h.name, "' given twice");
  hosts.push_back(std::move(h));
}

// A notice as one clause of launch's own line: without its blanks and final period.
std::string clause(const std::string& s) {
  std::string t = trim(s);
  while (!t.empty() && t.back() == '.') t.pop_back();
  return t;
}

}  // namespace

std::vector<Host> parse_hosts(const std::string& list, const std::string& option) {
  std::vector<Host> hosts;
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    const std::string item = trim(list.substr(pos, comma - pos));
    const size_t colon = item.rfind(':');
    Host h{item, 1};
    if (colon != std::string::npos) {
      h.name = item.substr(0, colon);
      h.slots = positive_int(item.substr(colon + 1), option + " '" + item + "'");
    }
    add_host(hosts, std::move(h), option + " '" + list + "'");
    pos = comma + 1;
  }
  return hosts;
}

std::vector<Host> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) STRATA_THROW(ConfigError, "--hostfile: cannot read '", path, "'");
  std::vector<Host> hosts;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const std::string where = "--hostfile " + path + ":" + std::to_string(n);
    static const std::regex re(R"(^(\S+)(\s+slots\s*=\s*(\S+))?(\s+max[-_]slots\s*=\s*\S+)?$)");
    std::smatch m;
    if (!std::regex_match(line, m, re)) STRATA_THROW(ConfigError, where, ": expected 'NAME [slots=N]', got '", line, "'");
    add_host(hosts, Host{m[1].str(), m[3].matched ? positive_int(m[3].str(), where) : 1}, where);
  }
  if (hosts.empty()) STRATA_THROW(ConfigError, "--hostfile ", path, ": names no host");
  return hosts;
}

std::string host_list(const std::vector<Host>& hosts) {
  std::string s;
  for (const Host& h : hosts) s += (s.empty() ? "" : ",") + h.name + ":" + std::to_string(h.slots);
  return s;
}

int total_slots(const std::vector<Host>& hosts) {
  int n = 0;
  for (const Host& h : hosts) n += h.slots;
  return n;
}

std::string host_of_rank(const std::vector<Host>& hosts, int rank) {
  for (const Host& h : hosts) {
    if (rank < h.slots) return rank >= 0 ? h.name : "";
    rank -= h.slots;
  }
  return "";
}

std::vector<std::string> mpi_fault_flags(double timeout_s) {
  // scripts/mpi_fault_flags.sh, line for line.
  const long t = std::max(1L, long(std::isfinite(timeout_s) ? std::min(timeout_s, 1e9) : 300.0));
  const long margin = t / 2 < 10 ? t / 2 : 10;
  const long detect = t - margin > 2 ? t - margin : 2;
  const long intvl = (detect + 119) / 120;  // at most 120 probes (TCP_KEEPCNT <= 127)
  long probes = (detect + intvl - 1) / intvl;
  probes = probes < 2 ? 2 : probes;
  return {"--mca", "oob_tcp_keepalive_time",   "1", "--mca", "oob_tcp_keepalive_intvl", std::to_string(intvl),
          "--mca", "oob_tcp_keepalive_probes", std::to_string(probes)};
}

std::vector<std::string> split_words(const std::string& text, const std::string& option) {
  std::vector<std::string> words;
  std::string cur;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote) {
      if (c == quote) {
        quote = 0;
      } else if (c == '\\' && quote == '"' && i + 1 < text.size()) {
        cur += text[++i];
      } else {
        cur += c;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == '\\' && i + 1 < text.size()) {
      cur += text[++i];
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(cur);
      cur.clear();
      in_word = false;
    } else {
      cur += c;
      in_word = true;
    }
  }
  if (quote) STRATA_THROW(ConfigError, option, ": unterminated ", quote, " quote in '", text, "'");
  if (in_word) words.push_back(cur);
  return words;
}

void OutputScan::line(const std::string& text) {
  // Ranks: strata's own report (apps/main.cpp, apps/commands.cpp).
  static const std::string kError = "strata: error: ";
  const size_t at = text.find(kError);
  if (at != std::string::npos) {
    const std::string msg = text.substr(at + kError.size());
    static const std::regex comm_re(R"(^rank \d+: communication failed: )");
    if (std::regex_search(msg, comm_re)) {
      if (comm_failure_.empty()) comm_failure_ = msg;
      // Every "rank N (pid P on H)" (or "rank N (world rank M) (pid P on H)" for a group
      // rank) names a peer that died, was lost, or never joined the op.
      static const std::regex peer_re(R"(rank (\d+) (?:\(world rank (\d+)\) )?\(pid \d+ on [^)]*\))");
      for (std::sregex_iterator it(msg.begin(), msg.end(), peer_re), end; it != end; ++it)
        named_ranks_.insert(std::stoi((*it)[2].matched ? (*it)[2].str() : (*it)[1].str()));
    } else if (strata_error_.empty()) {
      strata_error_ = msg;
    }
    return;
  }
  // mpirun (Open MPI 4.1, ORTE): a rank ended by a signal, a daemon lost or never started.
  static const std::regex signal_re(R"(process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+))");
  std::smatch m;
  if (text.find("exited on signal") != std::string::npos && std::regex_search(text, m, signal_re)) {
    rank_signalled_ = true;
    named_ranks_.insert(std::stoi(m[1].str()));
    named_nodes_.insert(m[2].str());
    if (launcher_notice_.empty()) launcher_notice_ = clause(text);
    return;
  }
  static const char* const kLost[] = {"ORTE has lost communication with a remote daemon",
                                      "An ORTE daemon has unexpectedly failed",
                                      "ORTE was unable to reliably start one or more daemons",
                                      "ORTE does not know how to route a message"};
  for (const char* k : kLost)
    if (text.find(k) != std::string::npos) {
      lost_daemon_ = true;
      if (launcher_notice_.empty()) launcher_notice_ = clause(text);
      return;
    }
  static const std::regex daemon_re(R"(Remote daemon\s*:\s*\S+ on node (\S+))");
  if (lost_daemon_ && std::regex_search(text, m, daemon_re)) named_nodes_.insert(m[1].str());
}

Verdict classify(int status, int signal, const OutputScan& scan) {
  if (signal == 0 && status == 0) return {Outcome::success, 0, "the job finished"};
  // A config or data error: every rank that reports it exits 2 or 1, and mpirun returns
  // the first abnormal status. Such an error repeats on every restart.
  if (signal == 0 && (status == 1 || status == 2) && !scan.strata_error().empty())
    return {Outcome::fatal, status, scan.strata_error()};
  if (!scan.comm_failure().empty()) return {Outcome::transient, 3, scan.comm_failure()};
  if (!scan.launcher_notice().empty()) return {Outcome::transient, 3, "mpirun: " + scan.launcher_notice()};
  if (signal > 0) return {Outcome::transient, 3, "mpirun was ended by signal " + std::to_string(signal)};
  if (status == 3) return {Outcome::transient, 3, "the job exited 3 (a communication failure)"};
  return {Outcome::fatal, status,
          "mpirun exited " + std::to_string(status) + " without a communication failure" +
              (scan.strata_error().empty() ? std::string() : ": " + scan.strata_error())};
}

std::set<std::string> suspect_hosts(const std::vector<Host>& hosts, const OutputScan& scan) {
  std::set<std::string> s;
  for (int r : scan.named_ranks()) {
    const std::string h = host_of_rank(hosts, r);
    if (!h.empty()) s.insert(h);
  }
  for (const std::string& n : scan.named_nodes())
    for (const Host& h : hosts)
      if (h.name == n) s.insert(n);
  return s;
}

std::vector<Host> surviving_hosts(const std::vector<Host>& hosts, const std::vector<bool>& answered,
                                  const std::set<std::string>& suspects, std::vector<std::string>& dropped) {
  std::vector<Host> keep;
  for (size_t i = 0; i < hosts.size(); ++i) {
    const bool suspect = suspects.empty() || suspects.count(hosts[i].name) > 0;
    if (!answered[i] && suspect)
      dropped.push_back(hosts[i].name);
    else
      keep.push_back(hosts[i]);
  }
  return keep;
}

void check_world(const Degrees& d, int world, const std::string& why) {
  const int model = d.tp * d.pp * d.cp;
  if (world >= 1 && world % model == 0) return;
  STRATA_THROW(ConfigError, "parallel.tp (", d.tp, ") x parallel.pp (", d.pp, ") x parallel.cp (", d.cp, ") = ", model,
               " does not divide the ", world, " rank(s) left ", why,
               ": the job cannot restart at this layout; resume it by hand with degrees that divide ", world,
               " (any checkpoint loads at any layout)");
}

}  // namespace strata::apps::launch
