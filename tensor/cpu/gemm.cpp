#include <strata/tensor/cpu/gemm.h>

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include <strata/core/error.h>
#include <strata/core/threads.h>
#include <strata/tensor/cpu/gemm_backends.h>
#include <strata/tensor/cpu/op_profile.h>
#include <strata/tensor/cpu/widen.h>

namespace strata::cpu {
namespace {
// Route set_num_threads to OpenBLAS as soon as the tensor library is loaded.
const bool kHookInstalled = [] {
  set_blas_threads_hook([](int n) { openblas_set_num_threads(n); });
  return true;
}();
std::atomic<GemmObserver> g_observer{nullptr};
// 16-bit GEMM on f32 BLAS: C is computed in tiles of kTileM x kTileN, each an f32
// accumulator fed by sgemm over K panels of kTileK; every panel of op(A) and op(B) is
// widened into a small f32 scratch just before its sgemm, and the tile is rounded into C
// once (so the result is the 16-bit op with f32 accumulation, as cuBLAS GemmEx). The
// scratch is (kTileM + kTileN) * kTileK + kTileM * kTileN floats per thread (~0.9 MB),
// whatever the operands' size; op(B) panels are re-widened once per row tile of C.
constexpr int64_t kTileM = 256, kTileN = 256, kTileK = 256;

// dst (rows x cols, row-major, ld cols) = op(X)[r0:r0+rows, c0:c0+cols] widened to f32.
template <class T>
void widen_panel(const T* x, int64_t ldx, bool trans, int64_t r0, int64_t c0, int64_t rows, int64_t cols,
                 float* dst) {
  if (!trans) {
    for (int64_t r = 0; r < rows; ++r) {
      const T* src = x + (r0 + r) * ldx + c0;
      float* d = dst + r * cols;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) d[c] = ld(src[c]);
    }
  } else {  // op(X)(r, c) = X(c, r): read X's rows contiguously
    for (int64_t c = 0; c < cols; ++c) {
      const T* src = x + (c0 + c) * ldx + r0;
      for (int64_t r = 0; r < rows; ++r) dst[r * cols + c] = ld(src[r]);
    }
  }
}

template <class T>
void gemm_widened(int64_t m, int64_t n, int64_t k, float alpha, MatRef a, MatRef b, float beta, T* c, int64_t ldc) {
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
  thread_local std::vector<float> scratch;
  scratch.resize(size_t((kTileM + kTileN) * kTileK + kTileM * kTileN));
  float* ap = scratch.data();
  float* bp = ap + kTileM * kTileK;
  float* acc = bp + kTileK * kTileN;
  for (int64_t i0 = 0; i0 < m; i0 += kTileM) {
    const int64_t mb = std::min(kTileM, m - i0);
    for (int64_t j0 = 0; j0 < n; j0 += kTileN) {
      const int64_t nb = std::min(kTileN, n - j0);
      if (k == 0) std::fill(acc, acc + mb * nb, 0.0f);
      for (int64_t p0 = 0; p0 < k; p0 += kTileK) {
        const int64_t kb = std::min(kTileK, k - p0);
        widen_panel(pa, a.ld, a.trans, i0, p0, mb, kb, ap);  // (mb, kb)
        widen_panel(pb, b.ld, b.trans, p0, j0, kb, nb, bp);  // (kb, nb)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(mb), int(nb), int(kb), 1.0f, ap, int(kb), bp,
                    int(nb), p0 == 0 ? 0.0f : 1.0f, acc, int(nb));
      }
      for (int64_t i = 0; i < mb; ++i) {
        T* cr = c + (i0 + i) * ldc + j0;
        const float* ar = acc + i * nb;
        if (beta == 0.0f) {
#pragma omp simd
          for (int64_t j = 0; j < nb; ++j) cr[j] = st<T>(alpha * ar[j]);
        } else {
#pragma omp simd
          for (int64_t j = 0; j < nb; ++j) cr[j] = st<T>(alpha * ar[j] + beta * ld(cr[j]));
        }
      }
    }
  }
}

}  // namespace

void set_gemm_observer(GemmObserver observer) { g_observer.store(observer); }

namespace {

// C = bias rows (each row of C a copy of the n elements at bias): what a bias GEMM
// accumulates onto where the library cannot add the bias itself.
void bias_rows(DType dt, int64_t m, int64_t n, const void* bias, void* c, int64_t ldc) {
  const size_t es = element_size(dt);
  for (int64_t r = 0; r < m; ++r)
    std::memcpy(static_cast<char*>(c) + size_t(r * ldc) * es, bias, size_t(n) * es);
}

void run_gemm(DType dt, int64_t m, int64_t n, int64_t k, double alpha, MatRef a, MatRef b, double beta, void* c,
              int64_t ldc, const void* bias) {
  (void)kHookInstalled;
  if (m == 0 || n == 0) return;
  namespace gb = gemm_backends;
  const int threads = get_num_threads();
  gb::Sgemm g{m,     n,    k,       float(alpha), static_cast<const float*>(a.data), a.ld, a.trans,
              static_cast<const float*>(b.data), b.ld, b.trans, float(beta), static_cast<float*>(c), ldc,
              dt == DType::f32 ? static_cast<const float*>(bias) : nullptr};
  gb::Backend backend = gb::Backend::openblas;
  if (dt == DType::f32) backend = gb::forced().value_or(gb::choose(g, threads));
  if (bias && (dt != DType::f32 || backend != gb::Backend::onednn_matmul)) {  // bias rows, then C += op(A) op(B)
    bias_rows(dt, m, n, bias, c, ldc);
    beta = 1.0;
    g.beta = 1.0f;
    g.bias = nullptr;
    if (dt == DType::f32) backend = gb::forced().value_or(gb::choose(g, threads));
  }
  if (GemmObserver obs = g_observer.load(std::memory_order_relaxed)) obs(dt, m, n, k, a, b, beta);
  op_profile::Scope prof;
  if (op_profile::enabled())
    prof.begin("gemm", -1, 2.0 * double(m) * double(n) * double(k),
               op_profile::gemm_key(m, n, k, a.ld, b.ld, a.trans, b.trans, beta != 0.0));
  const auto ta = a.trans ? CblasTrans : CblasNoTrans;
  const auto tb = b.trans ? CblasTrans : CblasNoTrans;
  if (dt == DType::f32) {
    if (gb::run(backend, g, threads)) return;
    if (g.bias) {  // the primitive declined: the bias rows and OpenBLAS
      bias_rows(dt, m, n, bias, c, ldc);
      g.beta = 1.0f;
      g.bias = nullptr;
    }
    gb::run(gb::Backend::openblas, g, threads);
  } else if (dt == DType::f64) {
    cblas_dgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), alpha, static_cast<const double*>(a.data),
                int(a.ld), static_cast<const double*>(b.data), int(b.ld), beta, static_cast<double*>(c),
                int(ldc));
  } else if (dt == DType::bf16) {
    gemm_widened(m, n, k, float(alpha), a, b, float(beta), static_cast<BFloat16*>(c), ldc);
  } else if (dt == DType::f16) {
    gemm_widened(m, n, k, float(alpha), a, b, float(beta), static_cast<Half*>(c), ldc);
  } else {
    STRATA_THROW(Error, "[gemm] unsupported dtype ", dtype_name(dt), " on cpu (expected f32, f64, bf16 or f16)");
  }
}

}  // namespace

void gemm(DType dt, int64_t m, int64_t n, int64_t k, double alpha, MatRef a, MatRef b, double beta, void* c,
          int64_t ldc) {
  run_gemm(dt, m, n, k, alpha, a, b, beta, c, ldc, nullptr);
}

void gemm_bias(DType dt, int64_t m, int64_t n, int64_t k, MatRef a, MatRef b, const void* bias, void* c,
               int64_t ldc) {
  run_gemm(dt, m, n, k, 1.0, a, b, 0.0, c, ldc, bias);
}

const char* blas_info() {
  static std::string s = std::string(openblas_get_config()) + " (kernels: " + openblas_get_corename() + ")";
  return s.c_str();
}

std::string gemm_backend_info() { return gemm_backends::describe(); }

}  // namespace strata::cpu
