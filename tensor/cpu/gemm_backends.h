// The f32 GEMM libraries cpu::gemm can call (OpenBLAS, BLIS, oneDNN, libxsmm) behind one
// call, and the fixed rule that picks one per call (docs/gemm.md).
// f64 and the 16-bit GEMMs stay on OpenBLAS.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace strata::cpu::gemm_backends {

enum class Backend {
  openblas,       // cblas_sgemm (the fallback: takes every call)
  blis,           // bli_sgemm_ex with row/column strides (libblis dlopen'ed privately)
  onednn_sgemm,   // dnnl_sgemm, row-major
  onednn_matmul,  // the matmul primitive, created once per exact shape
  libxsmm,        // JIT kernel per exact shape (single-threaded per call)
};
inline constexpr Backend kAll[] = {Backend::openblas, Backend::blis, Backend::onednn_sgemm, Backend::onednn_matmul,
                                   Backend::libxsmm};

/// One row-major f32 GEMM: C(m,n) = alpha * op(A)(m,k) @ op(B)(k,n) + beta * C.
struct Sgemm {
  int64_t m, n, k;
  float alpha;
  const float* a;
  int64_t lda;
  bool ta;
  const float* b;
  int64_t ldb;
  bool tb;
  float beta;
  float* c;
  int64_t ldc;
  /// (n) added to every row of C (a linear layer's bias), or null. Only the matmul
  /// primitive takes it (in its kernel); run() on any other backend declines such a call.
  const float* bias = nullptr;
};

/// "openblas", "blis", "onednn_sgemm", "onednn_matmul", "libxsmm".
const char* name(Backend b);
/// The backend of a name (also "onednn" for onednn_matmul); nullopt for others.
std::optional<Backend> parse(std::string_view s);
/// Whether the library is in this build and loads (BLIS is opened on first use).
bool available(Backend b);

/// Runs `g` on backend `b` with `threads` threads (1 inside an OpenMP team). Returns false,
/// touching nothing, when the backend is unavailable or cannot take this call (libxsmm:
/// alpha != 1, beta not 0 or 1, or no kernel; oneDNN's matmul: only a reference
/// implementation; every backend but oneDNN's matmul: a bias); the caller then runs
/// OpenBLAS (without the bias). Thread-safe.
bool run(Backend b, const Sgemm& g, int threads);

/// The backend the auto rule gives this call: a pure function of the shape, the
/// transposes, whether beta is 0 and the thread count (docs/gemm.md), so a given
/// call at a given thread count always runs the same kernel.
Backend choose(const Sgemm& g, int threads);
/// The backend cpu::gemm uses: STRATA_GEMM=openblas|blis|onednn_sgemm|onednn_matmul|libxsmm
/// forces one (read once; unavailable -> OpenBLAS), unset or "auto" -> choose().
std::optional<Backend> forced();
/// The instruction set the library's kernels run at ("avx512_core", "skx", "hsw", ...;
/// lowered by DNNL_MAX_CPU_ISA, BLIS_ARCH_TYPE, LIBXSMM_TARGET, OPENBLAS_CORETYPE), "" when
/// unavailable.
std::string isa(Backend b);
/// One paragraph for `strata info`: the rule, what STRATA_GEMM forces, the libraries
/// available and the ISA each one runs.
std::string describe();

}  // namespace strata::cpu::gemm_backends
