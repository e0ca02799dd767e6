// `strata launch`: runs `strata train` under mpirun and, when the job ends with a
// communication failure, restarts it from the run's LATEST checkpoint on the hosts that
// still answer, at the world size they hold (TorchElastic's restart loop; any checkpoint
// loads at any layout). docs/launch.md describes the contract; the decisions are the pure
// functions of apps/launch_policy.h, this file runs the processes.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "apps/commands.h"
#include "apps/config.h"
#include "apps/launch_policy.h"
#include <strata/comm/mpi.h>
#include <strata/core/error.h>

namespace strata::apps {
namespace fs = std::filesystem;
using namespace launch;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// SIGINT / SIGTERM / SIGHUP to launch: forwarded to the job, which then ends without a
// restart. SIGPIPE is ignored meanwhile (a closed terminal or `| head` must not end launch
// and orphan the job: writes fail instead, and the job runs on).
volatile sig_atomic_t g_interrupt = 0;
extern "C" void on_interrupt(int sig) { g_interrupt = sig; }

class InterruptHandlers {
 public:
  InterruptHandlers() {
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &sa, &old_[i]);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, &old_pipe_);
  }
  ~InterruptHandlers() {
    for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &old_[i], nullptr);
    sigaction(SIGPIPE, &old_pipe_, nullptr);
  }
  InterruptHandlers(const InterruptHandlers&) = delete;
  InterruptHandlers& operator=(const InterruptHandlers&) = delete;

 private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction old_[3] {};
  struct sigaction old_pipe_ {};
};

// A pipe's two ends, closed on scope exit.
struct Pipe {
  int fd[2] = {-1, -1};
  Pipe() {
    if (pipe2(fd, O_CLOEXEC) != 0) STRATA_THROW(DataError, "strata launch: pipe: ", std::strerror(errno));
  }
  ~Pipe() {
    for (int f : fd)
      if (f >= 0) close(f);
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  void close_end(int i) {
    if (fd[i] >= 0) close(fd[i]);
    fd[i] = -1;
  }
};

// A child process in its own process group (so that it, and what it starts on this host,
// can be signalled as one), reaped and its group killed on scope exit whatever happened.
class Child {
 public:
  /// Starts argv[0] (PATH search) with stdin from /dev/null and stdout / stderr to the given
  /// descriptors (-1: /dev/null).
  Child(const std::vector<std::string>& argv, int out_fd, int err_fd) {
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    // Built before fork: the child only calls async-signal-safe functions.
    const std::string exec_failed = "strata launch: cannot run '" + argv[0] + "' (not found or not executable)\n";
    pid_ = fork();
    if (pid_ < 0) STRATA_THROW(DataError, "strata launch: fork: ", std::strerror(errno));
    if (pid_ == 0) {
      setpgid(0, 0);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      ::signal(SIGPIPE, SIG_DFL);  // an ignored signal stays ignored across exec
      const int null_fd = open("/dev/null", O_RDWR);
      dup2(null_fd, 0);
      dup2(out_fd >= 0 ? out_fd : null_fd, 1);
      dup2(err_fd >= 0 ? err_fd : null_fd, 2);
      execvp(args[0], args.data());
      [[maybe_unused]] const ssize_t w = write(2, exec_failed.data(), exec_failed.size());
      _exit(127);
    }
    setpgid(pid_, pid_);  // also here: whichever runs first
  }
  ~Child() {
    if (pid_ <= 0) return;
    if (!reaped_) {
      kill(-pid_, SIGKILL);
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);  // bounded: SIGKILL cannot be caught
    }
    kill(-pid_, SIGKILL);  // anything it left in its group on this host
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  /// Non-blocking: true once the child has ended (its status recorded).
  bool poll_exit() {
    if (reaped_) return true;
    int st = 0;
    const pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      if (WIFEXITED(st)) status_ = WEXITSTATUS(st);
      if (WIFSIGNALED(st)) signal_ = WTERMSIG(st);
    } else if (r < 0 && errno != EINTR) {
      reaped_ = true;  // not ours any more (cannot happen): do not wait forever
      status_ = 255;
    }
    return reaped_;
  }
  /// Signals the child's whole process group.
  void signal_group(int sig) const {
    kill(-pid_, sig);
    kill(pid_, sig);
  }
  pid_t pid() const { return pid_; }
  int status() const { return status_; }
  int signal() const { return signal_; }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0, signal_ = 0;
};

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;  // the user's terminal went away: keep running the job
    }
    p += w;
    n -= size_t(w);
  }
}

// How one mpirun ended.
struct JobEnd {
  int status = 0, signal = 0;
  int interrupted_by = 0;     // a signal launch received and forwarded
  bool stopped_by_launch = false;  // mpirun outlived the grace after a failure
  double failure_to_end_s = -1;    // from the first failure line to mpirun's end
};

// One mpirun: its output streamed through to this process's stdout / stderr as it comes and
// fed, line by line, to the scan.
JobEnd run_job(const std::vector<std::string>& argv, double grace_s, OutputScan& scan) {
  Pipe out, err;
  Child child(argv, out.fd[1], err.fd[1]);
  out.close_end(1);
  err.close_end(1);
  std::string partial[2];
  pollfd fds[2] = {{out.fd[0], POLLIN, 0}, {err.fd[0], POLLIN, 0}};
  bool open_[2] = {true, true};
  JobEnd end;
  std::optional<Clock::time_point> failed_at, term_at, exited_at;
  int forwarded = 0;
  char buf[65536];
  auto feed = [&](int i, const char* p, size_t n) {
    write_all(i == 0 ? 1 : 2, p, n);
    partial[i].append(p, n);
    size_t nl;
    while ((nl = partial[i].find('\n')) != std::string::npos) {
      scan.line(partial[i].substr(0, nl));
      partial[i].erase(0, nl + 1);
    }
    if (partial[i].size() > (1 << 16)) {  // a line that never ends: scan what is there
      scan.line(partial[i]);
      partial[i].clear();
    }
    if (!failed_at && (!scan.comm_failure().empty() || !scan.launcher_notice().empty())) failed_at = Clock::now();
  };
  for (;;) {
    const bool exited = child.poll_exit();
    if (exited && !exited_at) exited_at = Clock::now();
    // After mpirun has ended, what it started may still hold the pipes: drain for 2 s at most.
    if ((!open_[0] && !open_[1]) || (exited_at && seconds_since(*exited_at) > 2.0)) break;
    if (g_interrupt && forwarded != g_interrupt && !exited) {
      forwarded = g_interrupt;
      end.interrupted_by = g_interrupt;
      child.signal_group(g_interrupt);
      term_at = Clock::now();
    }
    // Bounded: mpirun must end within the grace after the first failure line (its teardown
    // flags end it within comm.timeout_s), and within 10 s of a forwarded signal or a SIGTERM.
    if (!exited) {
      if (failed_at && !term_at && seconds_since(*failed_at) > grace_s) {
        std::fprintf(stderr, "strata launch: mpirun still running %.0f s after the failure: stopping it\n", grace_s);
        end.stopped_by_launch = true;
        child.signal_group(SIGTERM);
        term_at = Clock::now();
      } else if (term_at && seconds_since(*term_at) > 10.0) {
        child.signal_group(SIGKILL);
      }
    }
    fds[0].fd = open_[0] ? out.fd[0] : -1;
    fds[1].fd = open_[1] ? err.fd[0] : -1;
    const int n = ::poll(fds, 2, 100);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2 && n > 0; ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t r = read(fds[i].fd, buf, sizeof buf);
      if (r > 0) {
        feed(i, buf, size_t(r));
      } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
        open_[i] = false;
      }
    }
  }
  for (int i = 0; i < 2; ++i)
    if (!partial[i].empty()) scan.line(partial[i]);
  // mpirun has closed its output; reap it (bounded: SIGKILL after 10 s).
  const auto wait_from = Clock::now();
  while (!child.poll_exit()) {
    if (seconds_since(wait_from) > 10.0) child.signal_group(SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!exited_at) exited_at = Clock::now();
  end.status = child.status();
  end.signal = child.signal();
  if (failed_at) end.failure_to_end_s = std::chrono::duration<double>(*exited_at - *failed_at).count();
  return end;
}

// Each host runs `mpirun --host H:1 -np 1 true` through the job's own mpirun options (its
// remote shell, its networks), all at once; true for those that answer within timeout_s.
std::vector<bool> probe_hosts(const std::string& mpirun, const std::vector<std::string>& mpirun_args,
                              const std::vector<Host>& hosts, double timeout_s) {
  std::vector<std::unique_ptr<Child>> probes;
  for (const Host& h : hosts) {
    std::vector<std::string> argv = {mpirun};
    argv.insert(argv.end(), mpirun_args.begin(), mpirun_args.end());
    argv.insert(argv.end(), {"--host", h.name + ":1", "-np", "1", "true"});
    probes.push_back(std::make_unique<Child>(argv, -1, -1));
  }
  // A probe answers when `true` ran there and mpirun returned 0 before the timeout.
  std::vector<bool> answered(probes.size(), false), done(probes.size(), false);
  const auto t0 = Clock::now();
  for (;;) {
    const bool late = seconds_since(t0) > timeout_s;
    bool all = true;
    for (size_t i = 0; i < probes.size(); ++i) {
      if (done[i]) continue;
      if (probes[i]->poll_exit()) {
        done[i] = true;
        answered[i] = !late && probes[i]->signal() == 0 && probes[i]->status() == 0;
        continue;
      }
      all = false;
      if (late) probes[i]->signal_group(seconds_since(t0) > timeout_s + 3 ? SIGKILL : SIGTERM);
    }
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return answered;
}

// <run.dir>/launch.jsonl: one JSON object per event, appended.
class LaunchLog {
 public:
  explicit LaunchLog(std::string path) : path_(std::move(path)) {}
  void write(nlohmann::json j) const {
    j["time"] = double(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
    std::ofstream f(path_, std::ios::app);
    f << j.dump() << "\n";
    if (!f) std::fprintf(stderr, "strata launch: warning: cannot write %s\n", path_.c_str());
  }

 private:
  std::string path_;
};

// What `strata launch` passes to `strata train`: the user's words, with --resume auto.
struct TrainArgs {
  std::string config;
  std::vector<std::string> sets;
  std::vector<std::string> words;  // as given, less --resume / --overwrite
  std::string resume;              // the user's own --resume, for the first start
  bool overwrite = false;
};

TrainArgs parse_train_args(const std::vector<std::string>& args) {
  if (args.empty() || args[0] != "train")
    STRATA_THROW(ConfigError, "strata launch: give the job after '--' as 'train --config C [--set K=V ...]'",
                 args.empty() ? std::string() : ", got '" + args[0] + "'");
  TrainArgs t;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto next = [&]() -> const std::string& {
      if (i + 1 >= args.size()) STRATA_THROW(ConfigError, "strata launch: train ", a, " needs a value");
      return args[++i];
    };
    auto after = [&](const char* prefix) { return a.substr(std::strlen(prefix)); };
    if (a == "--resume") {
      t.resume = next();
    } else if (a.rfind("--resume=", 0) == 0) {
      t.resume = after("--resume=");
    } else if (a == "--overwrite") {
      t.overwrite = true;
    } else if (a == "--config" || a == "-c" || a == "--set") {
      t.words.push_back(a);
      const std::string& v = next();
      t.words.push_back(v);
      (a == "--set" ? t.sets.push_back(v) : void(t.config = v));
    } else {
      t.words.push_back(a);
      if (a.rfind("--config=", 0) == 0) t.config = after("--config=");
      if (a.rfind("--set=", 0) == 0) t.sets.push_back(after("--set="));
    }
  }
  if (t.config.empty()) STRATA_THROW(ConfigError, "strata launch: the train command needs --config");
  return t;
}

std::string latest_checkpoint(const std::string& run_dir) {
  std::ifstream f(run_dir + "/checkpoints/LATEST");
  std::string s;
  std::getline(f, s);
  return s.empty() ? "none (a fresh start)" : s;
}

std::string self_exe() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("strata") : p.string();
}

std::string join(const std::vector<std::string>& v, const char* sep = " ") {
  std::string s;
  for (const std::string& w : v) s += (s.empty() ? "" : sep) + w;
  return s;
}

}  // namespace

Command add_launch_command(CLI::App& parent) {
  struct Opts {
    std::string hosts, hostfile, mpirun = "mpirun", mpirun_args;
    int np = 0, max_restarts = 3, min_np = 1;
    double backoff = 1.0, probe_timeout = 10.0;
    bool dry_run = false;
    std::vector<std::string> job;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = parent.add_subcommand(
      "launch",
      "Run `strata train` under mpirun and restart it from LATEST after a communication failure, on the hosts "
      "that still answer (elastic restart)");
  cmd->add_option("--hosts", o->hosts, "Hosts and their slots (ranks): h1:4,h2:4");
  cmd->add_option("--hostfile", o->hostfile, "Open MPI hostfile ('NAME slots=N' per line)");
  cmd->add_option("-n,--np", o->np, "Ranks (default: every slot of the hosts; required without hosts)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-restarts", o->max_restarts, "Restarts after communication failures before giving up (exit 3)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--backoff", o->backoff, "Seconds before the first restart, doubling with each further one")
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--min-np", o->min_np, "Give up (exit 3) rather than restart on fewer ranks")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--mpirun", o->mpirun, "The mpirun to run");
  cmd->add_option("--mpirun-args", o->mpirun_args,
                  "More mpirun options, one string: \"--mca btl tcp,self -x OMP_NUM_THREADS=1\"");
  cmd->add_option("--probe-timeout", o->probe_timeout,
                  "Seconds a host has to answer `mpirun --host H -np 1 true` after a failure before it is dropped")
      ->check(CLI::Range(0.5, 600.0));
  cmd->add_flag("--dry-run", o->dry_run, "Print the first mpirun command line and exit");
  cmd->add_option("job", o->job, "After '--': train --config C [--set K=V ...]")->required();
  cmd->footer(
      "Example:\n"
      "  strata launch --hosts node1:4,node2:4 --max-restarts 3 -- train --config configs/gpt_char_ddp.yaml\n"
      "Every start passes --resume auto (run.dir's LATEST, if any); a restart drops the hosts named in the\n"
      "failure that do not answer, and dp shrinks to the ranks left. Exit: 0 done; 1 or 2 the job's data or\n"
      "config error (never restarted); 3 restarts exhausted. Each restart is logged to <run.dir>/launch.jsonl.");
  return {cmd, [o] {
            const TrainArgs targs = parse_train_args(o->job);
            const TrainConfig cfg = TrainConfig::load(targs.config, targs.sets);  // exit 2 before any start
            if (!o->hosts.empty() && !o->hostfile.empty())
              STRATA_THROW(ConfigError, "strata launch: give --hosts or --hostfile, not both");
            std::vector<Host> hosts = !o->hosts.empty()      ? parse_hosts(o->hosts)
                                      : !o->hostfile.empty() ? read_hostfile(o->hostfile)
                                                             : std::vector<Host>{};
            const std::vector<std::string> user_args = split_words(o->mpirun_args, "--mpirun-args");
            for (const std::string& a : user_args)
              for (const char* owned : {"-np", "-n", "--np", "-H", "--host", "--hostfile", "-hostfile",
                                        "--machinefile", "--map-by", "-map-by"})
                if (a == owned || a.rfind(std::string(owned) + "=", 0) == 0)
                  STRATA_THROW(ConfigError, "--mpirun-args: '", a,
                               "' is launch's to set (use --hosts / --hostfile and -np; ranks fill hosts in order)");
            int np = o->np;
            if (!hosts.empty()) {
              if (np == 0) np = total_slots(hosts);
              if (np > total_slots(hosts))
                STRATA_THROW(ConfigError, "-np ", np, " exceeds the ", total_slots(hosts), " slots of the hosts (",
                             host_list(hosts), ")");
            } else if (np == 0) {
              STRATA_THROW(ConfigError, "strata launch: give -np N (or --hosts / --hostfile)");
            }
            if (np < o->min_np) STRATA_THROW(ConfigError, "--min-np ", o->min_np, " exceeds -np ", np);
            const Degrees degrees{cfg.parallel.dims.tp, cfg.parallel.dims.pp, cfg.parallel.dims.cp};
            const bool fixed_dp = cfg.parallel.dims.dp != parallel::ParallelDims::kAuto;
            const int first_np = np;
            const std::string exe = self_exe();
            // mpirun's teardown bounds for this run's comm.timeout_s; after a failure line,
            // mpirun has that long (and 30 s) to end before launch stops it.
            const std::vector<std::string> teardown = mpi_fault_flags(cfg.comm.timeout_s);
            const double grace_s = cfg.comm.timeout_s + 30.0;

            auto command = [&](int attempt) {
              std::vector<std::string> argv = {o->mpirun};
              argv.insert(argv.end(), user_args.begin(), user_args.end());
              argv.insert(argv.end(), teardown.begin(), teardown.end());
              if (!hosts.empty()) argv.insert(argv.end(), {"--host", host_list(hosts), "--map-by", "slot"});
              argv.insert(argv.end(), {"-np", std::to_string(np), exe, "train"});
              argv.insert(argv.end(), targs.words.begin(), targs.words.end());
              if (attempt == 0 && targs.overwrite && targs.resume.empty()) {
                argv.push_back("--overwrite");  // the user's fresh start; restarts resume what it wrote
              } else {
                argv.insert(argv.end(), {"--resume", attempt == 0 && !targs.resume.empty() ? targs.resume : "auto"});
              }
              if (fixed_dp && np != first_np) argv.insert(argv.end(), {"--set", "parallel.dp=auto"});
              return argv;
            };
            if (o->dry_run) {
              std::printf("%s\n", join(command(0)).c_str());
              return 0;
            }
            std::error_code ec;
            fs::create_directories(cfg.run.dir, ec);
            const LaunchLog log(cfg.run.dir + "/launch.jsonl");
            const InterruptHandlers handlers;
            const auto t_launch = Clock::now();
            for (int attempt = 0;; ++attempt) {
              const std::vector<std::string> argv = command(attempt);
              log.write({{"event", "start"}, {"attempt", attempt}, {"hosts", host_list(hosts)}, {"world_size", np},
                         {"resume", latest_checkpoint(cfg.run.dir)}, {"command", join(argv)}});
              OutputScan scan;
              const JobEnd end = run_job(argv, grace_s, scan);
              const Verdict v = classify(end.status, end.signal, scan);
              nlohmann::json ended = {{"event", "end"},       {"attempt", attempt},     {"status", end.status},
                                      {"signal", end.signal}, {"reason", v.reason},
                                      {"elapsed_s", seconds_since(t_launch)}};
              if (end.failure_to_end_s >= 0) ended["failure_to_end_s"] = end.failure_to_end_s;
              if (end.stopped_by_launch) ended["stopped_by_launch"] = true;  // mpirun outlived the grace
              if (end.interrupted_by) {
                ended["outcome"] = "interrupted";
                log.write(ended);
                std::fprintf(stderr, "strata launch: interrupted (signal %d): not restarting\n", end.interrupted_by);
                return 128 + end.interrupted_by;
              }
              if (v.outcome == Outcome::success) {
                ended["outcome"] = "success";
                log.write(ended);
                if (attempt > 0) std::fprintf(stderr, "strata launch: finished after %d restart(s)\n", attempt);
                return 0;
              }
              if (v.outcome == Outcome::fatal) {
                ended["outcome"] = "fatal";
                log.write(ended);
                std::fprintf(stderr, "strata launch: not restarting (exit %d is not a communication failure): %s\n",
                             v.exit_code, v.reason.c_str());
                return v.exit_code == 0 ? 1 : v.exit_code;
              }
              ended["outcome"] = "communication failure";
              if (attempt >= o->max_restarts) {
                ended["outcome"] = "gave up";
                log.write(ended);
                std::fprintf(stderr, "strata launch: giving up after %d restart(s) (--max-restarts %d): %s\n", attempt,
                             o->max_restarts, v.reason.c_str());
                return comm::kCommFailureExitCode;
              }
              log.write(ended);
              // The hosts that remain: a host whose rank the failure names and that does
              // not answer a probe is dropped.
              std::vector<std::string> dropped;
              double probe_s = 0;
              nlohmann::json probed = nlohmann::json::object();  // host -> answered
              if (!hosts.empty()) {
                const auto t_probe = Clock::now();
                const std::set<std::string> suspects = suspect_hosts(hosts, scan);
                const std::vector<bool> answered = probe_hosts(o->mpirun, user_args, hosts, o->probe_timeout);
                probe_s = seconds_since(t_probe);
                for (size_t i = 0; i < hosts.size(); ++i) probed[hosts[i].name] = bool(answered[i]);
                hosts = surviving_hosts(hosts, answered, suspects, dropped);
              }
              const int prev_np = np;
              if (!hosts.empty()) np = std::min(np, total_slots(hosts));
              auto give_up = [&](const std::string& why, int code) {
                log.write({{"event", "give_up"}, {"attempt", attempt + 1}, {"reason", why}, {"dropped", dropped}});
                std::fprintf(stderr, "strata launch: cannot restart: %s (after: %s)\n", why.c_str(), v.reason.c_str());
                return code;
              };
              if (!dropped.empty() && hosts.empty())
                return give_up("no host answers (" + join(dropped, ", ") + " dropped)", comm::kCommFailureExitCode);
              if (np < o->min_np)
                return give_up(std::to_string(np) + " rank(s) left on " + host_list(hosts) + ", fewer than --min-np " +
                                   std::to_string(o->min_np),
                               comm::kCommFailureExitCode);
              try {
                check_world(degrees, np, "on " + host_list(hosts) + " after dropping " + join(dropped, ", "));
              } catch (const ConfigError& e) {
                return give_up(e.what(), 2);
              }
              const double wait_s = o->backoff * std::pow(2.0, attempt);
              char probe_limit[32];
              std::snprintf(probe_limit, sizeof probe_limit, "%g", o->probe_timeout);
              const std::string line =
                  "restart " + std::to_string(attempt + 1) + "/" + std::to_string(o->max_restarts) + ": " + v.reason +
                  "; " +
                  (dropped.empty() ? std::string("no host dropped")
                                   : "dropped " + join(dropped, ", ") + " (named in the failure; its probe failed or " +
                                         "ran past " + probe_limit + " s)") +
                  "; hosts " + (hosts.empty() ? std::string("(mpirun's)") : host_list(hosts)) + "; world size " +
                  std::to_string(prev_np) + " -> " + std::to_string(np) + "; from " + latest_checkpoint(cfg.run.dir) +
                  " in " + std::to_string(wait_s).substr(0, std::to_string(wait_s).find('.') + 2) + " s";
              std::fprintf(stderr, "strata launch: %s\n", line.c_str());
              std::fflush(stderr);
              log.write({{"event", "restart"},
                         {"attempt", attempt + 1},
                         {"max_restarts", o->max_restarts},
                         {"reason", v.reason},
                         {"dropped", dropped},
                         {"hosts", host_list(hosts)},
                         {"world_size", np},
                         {"previous_world_size", prev_np},
                         {"probe_s", probe_s},
                         {"answered", probed},
                         {"backoff_s", wait_s},
                         {"resume", latest_checkpoint(cfg.run.dir)}});
              const auto t_wait = Clock::now();
              while (seconds_since(t_wait) < wait_s && !g_interrupt)
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
              if (g_interrupt) {
                std::fprintf(stderr, "strata launch: interrupted (signal %d): not restarting\n", int(g_interrupt));
                return 128 + int(g_interrupt);
              }
            }
          }};
}

}  // namespace strata::apps
