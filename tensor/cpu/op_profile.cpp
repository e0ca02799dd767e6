#include <strata/tensor/cpu/op_profile.h>

#include <time.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

namespace strata::cpu::op_profile {
namespace {
using Clock = std::chrono::steady_clock;

struct Frame {
  Clock::time_point t0;
  double c0;
  double child = 0, child_cpu = 0;  // seconds spent in nested scopes
  const char* name;
  std::string owned;
  int sub;
  double flops;
};

// (phase, name, sub) -> stat. Only the recording thread writes while recording.
using Key = std::tuple<std::string, std::string, int>;
std::mutex g_mu;
std::map<Key, Stat> g_table;
std::thread::id g_owner;
thread_local std::vector<Frame> t_stack;
thread_local const char* t_phase = nullptr;
}  // namespace

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

bool detail::on_this_thread() { return enabled() && std::this_thread::get_id() == g_owner; }

void start() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_table.clear();
  g_owner = std::this_thread::get_id();
  t_stack.clear();
  detail::g_on.store(true);
}

void stop() { detail::g_on.store(false); }

std::vector<Stat> results() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<Stat> out;
  out.reserve(g_table.size());
  for (const auto& [k, s] : g_table) out.push_back(s);
  return out;
}

void Scope::begin(const char* name, int sub, double flops, std::string owned) {
  if (active_ || !detail::on_this_thread()) return;
  active_ = true;
  t_stack.push_back(Frame{Clock::now(), thread_cpu_seconds(), 0.0, 0.0, name, std::move(owned), sub, flops});
}

void Scope::end() {
  if (!active_) return;
  active_ = false;
  if (t_stack.empty()) return;  // start() cleared the stack meanwhile
  Frame f = std::move(t_stack.back());
  t_stack.pop_back();
  const double cpu = thread_cpu_seconds() - f.c0;
  const double total = std::chrono::duration<double>(Clock::now() - f.t0).count();
  if (!t_stack.empty()) {
    t_stack.back().child += total;
    t_stack.back().child_cpu += cpu;
  }
  std::string name = f.owned.empty() ? std::string(f.name) : std::move(f.owned);
  const std::string phase = t_phase ? t_phase : "forward";
  std::lock_guard<std::mutex> lock(g_mu);
  Stat& s = g_table[Key{phase, name, f.sub}];
  if (s.calls == 0) {
    s.phase = phase;
    s.name = name;
    s.sub = f.sub;
  }
  ++s.calls;
  s.total_s += total;
  s.self_s += total - f.child;
  s.self_cpu_s += cpu - f.child_cpu;
  s.flops += f.flops;
}

Phase::Phase(const char* phase) {
  if (!enabled()) return;
  active_ = true;
  prev_ = t_phase;
  t_phase = phase;
}

Phase::~Phase() {
  if (active_) t_phase = prev_;
}

std::string gemm_key(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, bool ta, bool tb, bool accumulate) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "gemm %lld x %lld x %lld, lda %lld, ldb %lld, %c%c, beta %d", (long long)m,
                (long long)n, (long long)k, (long long)lda, (long long)ldb, ta ? 'T' : 'N', tb ? 'T' : 'N',
                accumulate ? 1 : 0);
  return buf;
}

}  // namespace strata::cpu::op_profile
