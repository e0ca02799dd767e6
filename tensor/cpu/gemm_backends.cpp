#include <strata/tensor/cpu/gemm_backends.h>

#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <dnnl.hpp>
#ifdef STRATA_HAVE_BLIS
#include <blis.h>
#endif
#ifdef STRATA_HAVE_LIBXSMM
#include <libxsmm.h>
#endif

#include <strata/tensor/cpu/omp_threads.h>

namespace strata::cpu::gemm_backends {
namespace {


// ------------------------------------------------------------------ BLIS
// libblis exports cblas_sgemm, sgemm_ and the rest of the BLAS under the same names as
// OpenBLAS. Linked normally, whichever library the loader meets first would serve every
// cblas call of the process. So it is opened privately (RTLD_LOCAL: its symbols stay
// out of the global scope; RTLD_DEEPBIND: its own calls bind inside it) and only its
// native API is looked up.
#ifdef STRATA_HAVE_BLIS
struct Blis {
  decltype(&bli_sgemm_ex) sgemm = nullptr;
  decltype(&bli_arch_query_id) arch_id = nullptr;
  decltype(&bli_arch_string) arch_string = nullptr;
};
const Blis* blis() {
  static const Blis* lib = [] () -> const Blis* {
    // BLIS 0.9 knows no CPU newer than Zen 3 / Skylake-X and runs its generic C kernels on
    // them; unless the user chose (BLIS_ARCH_TYPE), use the kernel family for the ISA the CPU
    // runs, as tune_environment_and_reexec does for OpenBLAS.
    if (!std::getenv("BLIS_ARCH_TYPE")) {
      if (__builtin_cpu_supports("x86-64-v4")) setenv("BLIS_ARCH_TYPE", std::to_string(int(BLIS_ARCH_SKX)).c_str(), 0);
      else if (__builtin_cpu_supports("x86-64-v3"))
        setenv("BLIS_ARCH_TYPE", std::to_string(int(BLIS_ARCH_HASWELL)).c_str(), 0);
    }
    void* h = dlopen(STRATA_BLIS_LIBRARY, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!h) return nullptr;
    static Blis b;
    b.sgemm = reinterpret_cast<decltype(b.sgemm)>(dlsym(h, "bli_sgemm_ex"));
    b.arch_id = reinterpret_cast<decltype(b.arch_id)>(dlsym(h, "bli_arch_query_id"));
    b.arch_string = reinterpret_cast<decltype(b.arch_string)>(dlsym(h, "bli_arch_string"));
    auto init = reinterpret_cast<decltype(&bli_init)>(dlsym(h, "bli_init"));
    if (!b.sgemm || !b.arch_id || !b.arch_string || !init) return nullptr;
    init();  // before bli_arch_query_id, which checks BLIS_ARCH_TYPE against the initialised contexts
    return &b;
  }();
  return lib;
}

bool run_blis(const Sgemm& g, int threads) {
  const Blis* lib = blis();
  if (!lib) return false;
  // The stored matrices are row-major: row stride ld, column stride 1; BLIS applies op().
  rntm_t rntm;
  bli_rntm_init(&rntm);
  bli_rntm_set_num_threads(call_threads(threads), &rntm);
  float alpha = g.alpha, beta = g.beta;
  lib->sgemm(g.ta ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, g.tb ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, g.m, g.n, g.k,
             &alpha, const_cast<float*>(g.a), g.lda, 1, const_cast<float*>(g.b), g.ldb, 1, &beta, g.c, g.ldc, 1,
             nullptr, &rntm);
  return true;
}
#else
bool run_blis(const Sgemm&, int) { return false; }
#endif

// ------------------------------------------------------------------ oneDNN

bool run_onednn_sgemm(const Sgemm& g, int threads) {
  const OmpThreads omp(threads);
  return dnnl_sgemm(g.ta ? 'T' : 'N', g.tb ? 'T' : 'N', g.m, g.n, g.k, g.alpha, g.a, g.lda, g.b, g.ldb, g.beta, g.c,
                    g.ldc) == dnnl_success;
}

// One matmul primitive per (shape, transposes, leading dimensions, alpha, beta, threads):
// oneDNN picks and JITs its kernel for exactly that. Null: only a reference
// implementation exists (slower than any BLAS), so the call goes to OpenBLAS.
using MatmulKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, float, float, bool, int>;
struct Matmul {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, c, bias;  // bias: zero-sized without one
  dnnl::memory::desc scratchpad;     // the caller's (user mode)
};

const dnnl::engine& engine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

std::shared_ptr<const Matmul> make_matmul(const Sgemm& g) {
  using dnnl::memory;
  auto desc = [](int64_t rows, int64_t cols, int64_t ld, bool trans) {
    // Row-major X stored (rows x cols); op(X) = X^T is (cols x rows) with strides (1, ld).
    return trans ? memory::desc({cols, rows}, memory::data_type::f32, memory::dims{1, ld})
                 : memory::desc({rows, cols}, memory::data_type::f32, memory::dims{ld, 1});
  };
  auto m = std::make_shared<Matmul>();
  m->a = g.ta ? desc(g.k, g.m, g.lda, true) : desc(g.m, g.k, g.lda, false);
  m->b = g.tb ? desc(g.n, g.k, g.ldb, true) : desc(g.k, g.n, g.ldb, false);
  m->c = desc(g.m, g.n, g.ldc, false);
  if (g.bias) m->bias = memory::desc({1, g.n}, memory::data_type::f32, memory::dims{g.n, 1});
  dnnl::primitive_attr attr;
  // A scratchpad of the caller's (each thread's own): in oneDNN's default (library) mode
  // the primitives share theirs, and GEMMs run at once from a team's threads (the
  // convolution's im2col kernel, replicas on threads) got wrong results
  // (ConvThreads.* and TrainerDpTest.GptMatchesModeNone fail without this).
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (g.alpha != 1.0f) attr.set_output_scales(0, {g.alpha});
  if (g.beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(g.beta);
    attr.set_post_ops(po);
  }
  try {
    const dnnl::matmul::primitive_desc pd(
        g.bias ? dnnl::matmul::desc(m->a, m->b, m->bias, m->c) : dnnl::matmul::desc(m->a, m->b, m->c), attr, engine());
    if (std::strstr(pd.impl_info_str(), "ref")) return nullptr;
    m->prim = dnnl::matmul(pd);
    m->scratchpad = pd.scratchpad_desc();
  } catch (const dnnl::error&) {
    return nullptr;
  }
  return m;
}

bool run_onednn_matmul(const Sgemm& g, int threads) {
  const OmpThreads omp(threads);
  const MatmulKey key{g.m,  g.n,    g.k,    g.lda, g.ldb, g.ldc, g.ta, g.tb, g.alpha,
                      g.beta, g.bias != nullptr, call_threads(threads)};
  // Per thread first (no lock on the hot path), then the shared table.
  thread_local std::map<MatmulKey, std::shared_ptr<const Matmul>> local;
  auto it = local.find(key);
  if (it == local.end()) {
    static std::mutex mu;
    static std::map<MatmulKey, std::shared_ptr<const Matmul>> shared;
    std::lock_guard<std::mutex> lock(mu);
    auto s = shared.find(key);
    if (s == shared.end()) s = shared.emplace(key, make_matmul(g)).first;
    it = local.emplace(key, s->second).first;
  }
  const Matmul* mm = it->second.get();
  if (!mm) return false;
  thread_local dnnl::stream stream(engine());
  const dnnl::engine& e = engine();
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, dnnl::memory(mm->a, e, const_cast<float*>(g.a))},
                                             {DNNL_ARG_WEIGHTS, dnnl::memory(mm->b, e, const_cast<float*>(g.b))},
                                             {DNNL_ARG_DST, dnnl::memory(mm->c, e, g.c)}};
  if (g.bias) args.emplace(DNNL_ARG_BIAS, dnnl::memory(mm->bias, e, const_cast<float*>(g.bias)));
  if (const size_t bytes = mm->scratchpad.get_size()) {  // this thread's, grown to the largest
    thread_local std::vector<std::byte> scratch;
    if (scratch.size() < bytes) scratch.resize(bytes);
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(mm->scratchpad, e, scratch.data()));
  }
  mm->prim.execute(stream, args);
  return true;
}

const char* onednn_isa() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

// ------------------------------------------------------------------ libxsmm
#ifdef STRATA_HAVE_LIBXSMM
// libxsmm is column-major. Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T,
// and a row-major matrix with leading dimension ld is its transpose, column-major, with
// the same ld: so the kernel is (M, N, K) = (n, m, k) with libxsmm's A = our B (its
// transpose flag = tb) and libxsmm's B = our A (flag = ta).
using XsmmKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, bool>;
struct XsmmKeyHash {
  size_t operator()(const XsmmKey& k) const {
    size_t h = 0;
    std::apply([&](const auto&... v) { ((h = h * 1000003u ^ std::hash<int64_t>()(int64_t(v))), ...); }, k);
    return h;
  }
};

bool run_libxsmm(const Sgemm& g) {
  if (g.alpha != 1.0f || (g.beta != 0.0f && g.beta != 1.0f)) return false;
  static const bool init = [] {
    libxsmm_init();
    return true;
  }();
  (void)init;
  const XsmmKey key{g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.ta, g.tb, g.beta == 0.0f};
  thread_local std::unordered_map<XsmmKey, libxsmm_smmfunction, XsmmKeyHash> cache;
  auto it = cache.find(key);
  if (it == cache.end()) {
    const libxsmm_blasint lda = g.ldb, ldb = g.lda, ldc = g.ldc;
    const float alpha = 1.0f, beta = g.beta;
    const int flags = (g.tb ? LIBXSMM_GEMM_FLAG_TRANS_A : 0) | (g.ta ? LIBXSMM_GEMM_FLAG_TRANS_B : 0) |
                      (g.beta == 0.0f ? LIBXSMM_GEMM_FLAG_BETA_0 : 0);
    it = cache.emplace(key, libxsmm_smmdispatch(libxsmm_blasint(g.n), libxsmm_blasint(g.m), libxsmm_blasint(g.k),
                                                &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr))
             .first;
  }
  if (!it->second) return false;
  it->second(g.b, g.a, g.c);
  return true;
}
#else
bool run_libxsmm(const Sgemm&) { return false; }
#endif

}  // namespace

const char* name(Backend b) {
  switch (b) {
    case Backend::openblas: return "openblas";
    case Backend::blis: return "blis";
    case Backend::onednn_sgemm: return "onednn_sgemm";
    case Backend::onednn_matmul: return "onednn_matmul";
    case Backend::libxsmm: return "libxsmm";
  }
  return "?";
}

std::optional<Backend> parse(std::string_view s) {
  if (s == "onednn") return Backend::onednn_matmul;
  for (Backend b : kAll)
    if (s == name(b)) return b;
  return std::nullopt;
}

bool available(Backend b) {
  switch (b) {
    case Backend::openblas:
    case Backend::onednn_sgemm:
    case Backend::onednn_matmul: return true;
    case Backend::blis:
#ifdef STRATA_HAVE_BLIS
      return blis() != nullptr;
#else
      return false;
#endif
    case Backend::libxsmm:
#ifdef STRATA_HAVE_LIBXSMM
      return true;
#else
      return false;
#endif
  }
  return false;
}

bool run(Backend b, const Sgemm& g, int threads) {
  if (g.bias && b != Backend::onednn_matmul) return false;
  switch (b) {
    case Backend::openblas:
      cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans, int(g.m),
                  int(g.n), int(g.k), g.alpha, g.a, int(g.lda), g.b, int(g.ldb), g.beta, g.c, int(g.ldc));
      return true;
    case Backend::blis: return run_blis(g, threads);
    case Backend::onednn_sgemm: return run_onednn_sgemm(g, threads);
    case Backend::onednn_matmul: return run_onednn_matmul(g, threads);
    case Backend::libxsmm: return run_libxsmm(g);
  }
  return false;
}

namespace {
// The auto rule: the first row whose thread count, m*n*k bounds and call class match picks
// the backend; no match, or the backend missing from the build: OpenBLAS. Measured with
// `strata bench gemm --backends all` (docs/gemm.md): oneDNN's sgemm
// is the fastest library on most of the models' shapes, but takes 4-20% longer on
// A @ B^T than on A @ B of the same size, where the matmul primitive (its kernel JIT-built
// for the exact shape and layout) does not: a linear layer's forward, x @ W^T, writing a
// fresh output (beta 0; with beta 1 the primitive's sum post-op costs more than it saves).
struct Rule {
  int threads;      // the thread count the row applies to
  int64_t min_mnk;  // m*n*k > min_mnk
  int64_t max_mnk;  // m*n*k <= max_mnk
  bool nt_only;     // only calls with op(A) = A, op(B) = B^T and beta 0
  Backend backend;
};
constexpr int64_t kMaxMnk = INT64_MAX;
constexpr Rule kRules[] = {
    {1, int64_t(64) * 64 * 64, kMaxMnk, true, Backend::onednn_matmul},
    {2, int64_t(64) * 64 * 64, kMaxMnk, true, Backend::onednn_matmul},
    {1, int64_t(64) * 64 * 64, kMaxMnk, false, Backend::onednn_sgemm},
    {2, int64_t(64) * 64 * 64, kMaxMnk, false, Backend::onednn_sgemm},
};
}  // namespace

Backend choose(const Sgemm& g, int threads) {
  const int64_t mnk = g.m * g.n * g.k;
  const bool nt = !g.ta && g.tb && g.beta == 0.0f;
  for (const Rule& r : kRules)
    if (threads == r.threads && mnk > r.min_mnk && mnk <= r.max_mnk && (nt || !r.nt_only) && available(r.backend))
      return r.backend;
  return Backend::openblas;
}

std::optional<Backend> forced() {
  static const std::optional<Backend> f = []() -> std::optional<Backend> {
    const char* env = std::getenv("STRATA_GEMM");
    if (!env || !*env || std::strcmp(env, "auto") == 0) return std::nullopt;
    const std::optional<Backend> b = parse(env);
    return b && available(*b) ? *b : Backend::openblas;
  }();
  return f;
}

std::string isa(Backend b) {
  if (!available(b)) return "";
  switch (b) {
    case Backend::openblas: return openblas_get_corename();
    case Backend::blis:
#ifdef STRATA_HAVE_BLIS
      return blis()->arch_string(blis()->arch_id());
#else
      return "";
#endif
    case Backend::onednn_sgemm:
    case Backend::onednn_matmul: return onednn_isa();
    case Backend::libxsmm:
#ifdef STRATA_HAVE_LIBXSMM
      libxsmm_init();
      return libxsmm_get_target_arch();
#else
      return "";
#endif
  }
  return "";
}

std::string describe() {
  std::string s = "f32 GEMM: ";
  if (const auto f = forced()) s += std::string("forced to ") + name(*f) + " by STRATA_GEMM";
  else {
    s += "auto rule:";
    auto cube = [](int64_t v) {
      int64_t r = 1;
      while ((r + 1) * (r + 1) * (r + 1) <= v) ++r;
      return std::to_string(r) + "^3";
    };
    for (const Rule& r : kRules) {
      s.append(" m*n*k > ").append(cube(r.min_mnk));
      if (r.max_mnk != kMaxMnk) s.append(" and <= ").append(cube(r.max_mnk));
      s.append(" at ").append(std::to_string(r.threads)).append(" thread(s)");
      if (r.nt_only) s.append(", A @ B^T with beta 0");
      s.append(" -> ").append(name(r.backend));
      s.append(available(r.backend) ? ";" : " (not in this build);");
    }
    s += " otherwise openblas";
  }
  s += " (STRATA_GEMM=openblas|blis|onednn_sgemm|onednn_matmul|libxsmm|auto); available:";
  for (Backend b : kAll)
    if (available(b)) s += std::string(" ") + name(b);
  s += "; kernels:";
  for (Backend b : kAll)
    if (available(b)) s += std::string(" ") + name(b) + "=" + isa(b);
  return s;
}

}  // namespace strata::cpu::gemm_backends
