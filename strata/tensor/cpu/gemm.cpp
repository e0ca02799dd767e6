#include <strata/tensor/cpu/gemm.h>

#include <cblas.h>

#include <atomic>

#include <strata/core/error.h>
#include <strata/core/threads.h>

namespace strata::cpu {
namespace {
// Route set_num_threads to OpenBLAS as soon as the tensor library is loaded.
const bool kHookInstalled = [] {
  set_blas_threads_hook([](int n) { openblas_set_num_threads(n); });
  return true;
}();
std::atomic<GemmObserver> g_observer{nullptr};
}  // namespace

void set_gemm_observer(GemmObserver observer) { g_observer.store(observer); }

void gemm(DType dt, int64_t m, int64_t n, int64_t k, double alpha, MatRef a, MatRef b, double beta, void* c,
          int64_t ldc) {
  (void)kHookInstalled;
  if (m == 0 || n == 0) return;
  if (GemmObserver obs = g_observer.load(std::memory_order_relaxed)) obs(dt, m, n, k, a, b, beta);
  const auto ta = a.trans ? CblasTrans : CblasNoTrans;
  const auto tb = b.trans ? CblasTrans : CblasNoTrans;
  if (dt == DType::f32) {
    cblas_sgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), float(alpha), static_cast<const float*>(a.data),
                int(a.ld), static_cast<const float*>(b.data), int(b.ld), float(beta), static_cast<float*>(c),
                int(ldc));
  } else if (dt == DType::f64) {
    cblas_dgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), alpha, static_cast<const double*>(a.data),
                int(a.ld), static_cast<const double*>(b.data), int(b.ld), beta, static_cast<double*>(c),
                int(ldc));
  } else {
    STRATA_THROW(Error, "[gemm] unsupported dtype ", dtype_name(dt), " on cpu (expected f32 or f64)");
  }
}

const char* blas_info() {
  static std::string s = std::string(openblas_get_config()) + " (kernels: " + openblas_get_corename() + ")";
  return s.c_str();
}

}  // namespace strata::cpu
