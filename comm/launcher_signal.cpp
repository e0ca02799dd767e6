// SIGTERM during a communication wait: see launcher_signal.h. The handler touches only
// lock-free atomics, signal() and raise(), which are async-signal-safe.
#include <strata/comm/launcher_signal.h>

#include <atomic>
#include <csignal>
#include <ctime>
#include <mutex>

namespace strata::comm::detail {
namespace {

std::atomic<int> g_waiting{0};            // threads inside a WaitingScope
std::atomic<bool> g_pending{false};       // a SIGTERM no wait has taken yet
std::atomic<int64_t> g_term_ns{-1};       // CLOCK_MONOTONIC of that SIGTERM
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free &&
              std::atomic<int64_t>::is_always_lock_free);

int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

extern "C" void on_sigterm(int sig) {
  if (g_waiting.load() > 0) {
    int64_t unset = -1;
    g_term_ns.compare_exchange_strong(unset, monotonic_ns());
    g_pending.store(true);
    return;
  }
  // Not waiting on a peer: the default action, as without the handler (the signal stays
  // blocked until this handler returns, then terminates the process).
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

void install_launcher_signal_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old{};
    if (sigaction(SIGTERM, nullptr, &old) != 0 || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO)) return;
    struct sigaction sa{};
    sa.sa_handler = on_sigterm;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, nullptr);
  });
}

WaitingScope::WaitingScope() { g_waiting.fetch_add(1); }
WaitingScope::~WaitingScope() { g_waiting.fetch_sub(1); }

bool take_termination_request() { return g_pending.load(std::memory_order_relaxed) && g_pending.exchange(false); }

std::optional<double> seconds_since_termination() {
  const int64_t t = g_term_ns.load();
  if (t < 0) return std::nullopt;
  return double(monotonic_ns() - t) * 1e-9;
}

}  // namespace strata::comm::detail
