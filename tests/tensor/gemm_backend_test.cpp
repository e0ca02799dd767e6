// The f32 GEMM backends of cpu::gemm (tensor/cpu/gemm_backends.h) against an f64
// reference loop: tiny, odd and model shapes, all four transpose combinations, leading
// dimensions wider than the matrices, alpha != 1, beta 0 and 1, at 1 and 2 threads. The
// ctest cases gemm_backend_isa_* rerun these with each library capped to a lower ISA
// (tests/CMakeLists.txt); IsaCapsAreApplied checks that the cap took effect.
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <strata/core/threads.h>
#include <strata/tensor/cpu/gemm.h>
#include <strata/tensor/cpu/gemm_backends.h>

using namespace strata;
namespace gb = strata::cpu::gemm_backends;

namespace {

struct Case {
  int64_t m, n, k;
};
// Tiny, odd, and the shapes the GPT and CNN steps run (bench gemm --shapes model).
const Case kCases[] = {{1, 1, 1},   {1, 7, 3},    {5, 1, 9},     {3, 5, 7},     {17, 33, 29},
                       {64, 64, 32}, {64, 128, 128}, {128, 64, 64}, {96, 384, 128}, {200, 72, 150}};

// Row-major operand stored (rows x ld), values in [-1, 1).
std::vector<float> operand(int64_t rows, int64_t ld, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(size_t(rows * ld));
  for (float& x : v) x = u(gen);
  return v;
}

struct Problem {
  gb::Sgemm g;
  std::vector<float> a, b, c0;
  int64_t ldc;
};

// op(A) (m x k) and op(B) (k x n) stored with 3 and 5 extra columns; C with 2.
Problem make(const Case& s, bool ta, bool tb, float alpha, float beta) {
  Problem p;
  const int64_t lda = (ta ? s.m : s.k) + 3, ldb = (tb ? s.k : s.n) + 5;
  p.ldc = s.n + 2;
  p.a = operand(ta ? s.k : s.m, lda, 1);
  p.b = operand(tb ? s.n : s.k, ldb, 2);
  p.c0 = operand(s.m, p.ldc, 3);
  p.g = {s.m, s.n, s.k, alpha, p.a.data(), lda, ta, p.b.data(), ldb, tb, beta, nullptr, p.ldc};
  return p;
}

// Checks c against alpha * op(A) op(B) + beta * c0 in f64, to a bound on f32 rounding of
// the k products; the padding columns of C must be untouched.
void expect_matches(const Problem& p, const std::vector<float>& c, const std::string& what) {
  const gb::Sgemm& g = p.g;
  auto at = [](const std::vector<float>& x, int64_t ld, bool t, int64_t r, int64_t col) {
    return double(t ? x[size_t(col * ld + r)] : x[size_t(r * ld + col)]);
  };
  int bad = 0;
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < p.ldc; ++j) {
      const double got = c[size_t(i * p.ldc + j)], c0 = p.c0[size_t(i * p.ldc + j)];
      if (j >= g.n) {
        if (got != c0 && ++bad <= 3) ADD_FAILURE() << what << ": padding C(" << i << "," << j << ") written";
        continue;
      }
      double ref = 0, mag = 0;
      for (int64_t q = 0; q < g.k; ++q) {
        const double x = at(p.a, g.lda, g.ta, i, q) * at(p.b, g.ldb, g.tb, q, j);
        ref += x;
        mag += std::abs(x);
      }
      ref = double(g.alpha) * ref + double(g.beta) * c0;
      const double tol = 4e-7 * double(g.k + 2) * (std::abs(double(g.alpha)) * mag + std::abs(double(g.beta) * c0)) + 1e-6;
      if (std::abs(got - ref) > tol && ++bad <= 3)
        ADD_FAILURE() << what << ": C(" << i << "," << j << ") = " << got << ", reference " << ref;
    }
}

std::string label(gb::Backend b, const Case& s, bool ta, bool tb, float alpha, float beta, int threads) {
  return std::string(gb::name(b)) + " " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
         std::to_string(s.k) + " " + (ta ? "T" : "N") + (tb ? "T" : "N") + " alpha " + std::to_string(alpha) +
         " beta " + std::to_string(beta) + " threads " + std::to_string(threads);
}

// Under a gemm_backend_isa_* case, skips when the CPU lacks the level it caps to.
bool level_unsupported() {
  const char* cap = std::getenv("STRATA_CPU_CAPABILITY");
  if (!cap) return false;
  const std::string c = cap;
  return (c == "x86-64-v4" && !__builtin_cpu_supports("x86-64-v4")) ||
         (c == "x86-64-v3" && !__builtin_cpu_supports("x86-64-v3"));
}
#define STRATA_SKIP_UNSUPPORTED_LEVEL() \
  if (level_unsupported()) GTEST_SKIP() << "the CPU lacks " << std::getenv("STRATA_CPU_CAPABILITY")

class GemmBackend : public ::testing::TestWithParam<gb::Backend> {};

TEST_P(GemmBackend, MatchesF64Reference) {
  STRATA_SKIP_UNSUPPORTED_LEVEL();
  const gb::Backend backend = GetParam();
  if (!gb::available(backend)) GTEST_SKIP() << gb::name(backend) << " is not in this build";
  int taken = 0;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Case& s : kCases)
      for (int t = 0; t < 4; ++t)
        for (float alpha : {1.0f, 0.5f})
          for (float beta : {0.0f, 1.0f}) {
            const bool ta = t & 1, tb = t & 2;
            Problem p = make(s, ta, tb, alpha, beta);
            std::vector<float> c = p.c0;
            p.g.c = c.data();
            const std::string what = label(backend, s, ta, tb, alpha, beta, threads);
            if (!gb::run(backend, p.g, threads)) {
              // Declining is allowed for libxsmm and oneDNN's matmul only, and leaves C alone.
              EXPECT_TRUE(backend == gb::Backend::libxsmm || backend == gb::Backend::onednn_matmul) << what;
              EXPECT_EQ(c, p.c0) << what;
              continue;
            }
            ++taken;
            expect_matches(p, c, what);
          }
  }
  set_num_threads(1);
  // libxsmm takes at least alpha = 1 with beta 0 and 1 without transposes.
  EXPECT_GE(taken, 2 * int(std::size(kCases)) * 2);
}

INSTANTIATE_TEST_SUITE_P(All, GemmBackend, ::testing::ValuesIn(gb::kAll),
                         [](const auto& info) { return std::string(gb::name(info.param)); });

// cpu::gemm through the auto rule (or STRATA_GEMM): the same bits twice at a fixed
// thread count, and the f64 reference; every transpose pair, beta 1 and beta 0 (the rule
// routes A @ B^T with beta 0 apart).
TEST(GemmBackendRule, SameBitsTwiceAtFixedThreads) {
  STRATA_SKIP_UNSUPPORTED_LEVEL();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Case& s : kCases)
      for (int t = 0; t < 8; ++t) {
        const float beta = t & 4 ? 0.0f : 1.0f;
        Problem p = make(s, t & 1, t & 2, 1.0f, beta);
        std::vector<float> c1 = p.c0, c2 = p.c0;
        for (std::vector<float>* c : {&c1, &c2})
          cpu::gemm(DType::f32, s.m, s.n, s.k, 1.0, {p.a.data(), p.g.lda, p.g.ta}, {p.b.data(), p.g.ldb, p.g.tb},
                    beta, c->data(), p.ldc);
        EXPECT_EQ(0, std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(float)))
            << s.m << "x" << s.n << "x" << s.k << " threads " << threads;
        expect_matches(p, c1, "cpu::gemm");
        // The same bits from the chosen backend called directly, on operands one float off
        // their previous alignment (the choice and the result depend on the values only).
        const gb::Backend chosen = gb::forced().value_or(gb::choose(p.g, threads));
        std::vector<float> a1(p.a.size() + 1), b1(p.b.size() + 1), c3(p.c0.size() + 1);
        std::copy(p.a.begin(), p.a.end(), a1.begin() + 1);
        std::copy(p.b.begin(), p.b.end(), b1.begin() + 1);
        std::copy(p.c0.begin(), p.c0.end(), c3.begin() + 1);
        gb::Sgemm g = p.g;
        g.a = a1.data() + 1;
        g.b = b1.data() + 1;
        g.c = c3.data() + 1;
        if (!gb::run(chosen, g, threads)) gb::run(gb::Backend::openblas, g, threads);
        EXPECT_EQ(0, std::memcmp(c1.data(), c3.data() + 1, c1.size() * sizeof(float)))
            << gb::name(chosen) << " " << s.m << "x" << s.n << "x" << s.k << " threads " << threads;
      }
  }
  set_num_threads(1);
}

// The rule is a function of its arguments only: the same answer on every call, whatever
// the operands' addresses.
TEST(GemmBackendRule, ChoiceIsPure) {
  for (int threads : {1, 2})
    for (const Case& s : kCases)
      for (int t = 0; t < 8; ++t) {
        Problem p = make(s, t & 1, t & 2, 1.0f, t & 4 ? 0.0f : 1.0f);
        const gb::Backend b = gb::choose(p.g, threads);
        gb::Sgemm moved = p.g;
        moved.a += 1;
        moved.b += 1;
        EXPECT_EQ(b, gb::choose(moved, threads));
        EXPECT_TRUE(gb::available(b));
      }
}

// C = op(A) op(B) + bias rows (cpu::gemm_bias, a linear layer's forward): against the f64
// reference on every transpose pair at 1 and 2 threads, whichever library the rule picks
// (the matmul primitive adds the bias in its kernel, the others accumulate onto bias rows).
// C starts as NaN: the call must write it, not accumulate onto it.
TEST(GemmBias, MatchesTheReferenceOnEveryPath) {
  STRATA_SKIP_UNSUPPORTED_LEVEL();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Case& s : kCases)
      for (int t = 0; t < 4; ++t) {
        Problem p = make(s, t & 1, t & 2, 1.0f, 1.0f);
        const std::vector<float> bias = operand(1, s.n, 7);
        for (int64_t i = 0; i < s.m; ++i) std::copy(bias.begin(), bias.end(), p.c0.begin() + i * p.ldc);
        std::vector<float> c = p.c0;
        for (int64_t i = 0; i < s.m; ++i) std::fill_n(c.begin() + i * p.ldc, s.n, NAN);
        cpu::gemm_bias(DType::f32, s.m, s.n, s.k, {p.a.data(), p.g.lda, p.g.ta}, {p.b.data(), p.g.ldb, p.g.tb},
                       bias.data(), c.data(), p.ldc);
        expect_matches(p, c, "gemm_bias " + std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                                 std::to_string(s.k) + " t " + std::to_string(t) + " threads " + std::to_string(threads));
      }
  }
  set_num_threads(1);
}

// Only the matmul primitive takes a bias: every other library declines the call, C untouched.
TEST(GemmBias, OtherLibrariesDeclineABias) {
  STRATA_SKIP_UNSUPPORTED_LEVEL();
  Problem p = make({64, 128, 128}, false, true, 1.0f, 0.0f);
  const std::vector<float> bias = operand(1, 128, 7);
  p.g.bias = bias.data();
  for (gb::Backend b : gb::kAll) {
    std::vector<float> c = p.c0;
    p.g.c = c.data();
    const bool ran = gb::run(b, p.g, 1);
    if (b == gb::Backend::onednn_matmul && ran) {
      Problem q = p;
      for (int64_t i = 0; i < 64; ++i) std::copy(bias.begin(), bias.end(), q.c0.begin() + i * q.ldc);
      q.g.beta = 1.0f;
      expect_matches(q, c, "onednn_matmul with a bias");
    } else {
      EXPECT_FALSE(ran) << gb::name(b);
      EXPECT_EQ(c, p.c0) << gb::name(b) << " wrote C";
    }
  }
}

// BLIS exports cblas_sgemm too; it is opened privately, so every cblas call of the
// process still reaches OpenBLAS.
TEST(GemmBackendRule, CblasStaysOpenBlas) {
  STRATA_SKIP_UNSUPPORTED_LEVEL();
  if (gb::available(gb::Backend::blis)) {
    ASSERT_FALSE(gb::isa(gb::Backend::blis).empty());  // BLIS is loaded
  }
  EXPECT_NE(std::string(cpu::blas_info()).find("OpenBLAS"), std::string::npos) << cpu::blas_info();
  void* sym = dlsym(RTLD_DEFAULT, "cblas_sgemm");
  ASSERT_NE(sym, nullptr);
  Dl_info info{};
  ASSERT_NE(dladdr(sym, &info), 0);
  EXPECT_NE(std::string(info.dli_fname).find("openblas"), std::string::npos) << info.dli_fname;
  void* sgemm = dlsym(RTLD_DEFAULT, "sgemm_");
  ASSERT_NE(sgemm, nullptr);
  ASSERT_NE(dladdr(sgemm, &info), 0);
  EXPECT_NE(std::string(info.dli_fname).find("openblas"), std::string::npos) << info.dli_fname;
}

std::string lower(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// Under the gemm_backend_isa_* ctest cases each library runs the ISA its variable names.
TEST(GemmBackendRule, IsaCapsAreApplied) {
  STRATA_SKIP_UNSUPPORTED_LEVEL();
  if (const char* e = std::getenv("DNNL_MAX_CPU_ISA")) {
    EXPECT_EQ(gb::isa(gb::Backend::onednn_sgemm), lower(e));
  }
  if (const char* e = std::getenv("LIBXSMM_TARGET"); e && gb::available(gb::Backend::libxsmm)) {
    EXPECT_EQ(gb::isa(gb::Backend::libxsmm), lower(e));
  }
  if (const char* e = std::getenv("STRATA_TEST_BLIS_ARCH"); e && gb::available(gb::Backend::blis)) {
    EXPECT_EQ(gb::isa(gb::Backend::blis), e);  // BLIS_ARCH_TYPE takes the arch's number
  }
  if (const char* e = std::getenv("OPENBLAS_CORETYPE")) {
    EXPECT_EQ(lower(gb::isa(gb::Backend::openblas)), lower(e));
  }
  std::printf("%s\n", cpu::gemm_backend_info().c_str());
}

}  // namespace
