#include <strata/core/threads.h>
#include <strata/core/threads_default.h>

#include <omp.h>

#include <unistd.h>

#include <cstdlib>

#include <atomic>
#include <thread>

namespace strata {
namespace {
std::atomic<int> g_threads{0};
void (*g_blas_hook)(int) = nullptr;
}  // namespace

void set_num_threads(int n) {
  if (n <= 0) n = int(std::thread::hardware_concurrency());
  if (n <= 0) n = 1;
  g_threads = n;
  omp_set_num_threads(n);
  if (g_blas_hook) g_blas_hook(n);
}

int default_num_threads() {
  // Honour the OpenMP variable the way libgomp and PyTorch do: a process started with
  // OMP_NUM_THREADS=1 (the tests' and mpirun users' one compute thread per rank) must not
  // open 2+ thread teams because strata's own count defaulted to the core count.
  if (const char* e = std::getenv("OMP_NUM_THREADS")) {
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    if (end != e && (*end == '\0' || *end == ',') && v > 0 && v <= 4096) return int(v);
  }
  const int hw = int(std::thread::hardware_concurrency());
  return hw > 0 ? hw : 1;
}

int get_num_threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n == 0) {
    set_num_threads(default_num_threads());
    n = g_threads.load();
  }
  return n;
}

void set_blas_threads_hook(void (*hook)(int)) {
  g_blas_hook = hook;
  if (hook && g_threads.load() > 0) hook(g_threads.load());
}

bool tune_environment_and_reexec(char** argv) {
  if (std::getenv("STRATA_NO_REEXEC")) return false;
  bool changed = false;
  if (!std::getenv("OPENBLAS_CORETYPE")) {
    __builtin_cpu_init();
    const char* core = nullptr;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
      core = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
      core = "Haswell";
    if (core) changed |= setenv("OPENBLAS_CORETYPE", core, 0) == 0;
  }
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT"))
    changed |= setenv("GOMP_SPINCOUNT", "10000", 0) == 0;
  if (!changed) return false;
  setenv("STRATA_NO_REEXEC", "1", 1);  // exactly one re-exec, even if exec'd from elsewhere
  execv("/proc/self/exe", argv);
  return false;  // exec failed: carry on with the libraries' defaults
}

}  // namespace strata
