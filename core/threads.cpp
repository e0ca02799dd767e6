#include "core/threads.h"

#include <omp.h>

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

int get_num_threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n == 0) {
    set_num_threads(0);
    n = g_threads.load();
  }
  return n;
}

void set_blas_threads_hook(void (*hook)(int)) {
  g_blas_hook = hook;
  if (hook && g_threads.load() > 0) hook(g_threads.load());
}

}  // namespace strata
