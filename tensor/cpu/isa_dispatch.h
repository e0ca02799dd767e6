// Runtime ISA dispatch for the vectorisable CPU loops.
//
// The default build is portable (no -march=native, STRATA_NATIVE=OFF), so without help its
// loops would be SSE2 only. Each hot loop body is instead compiled three times, for
// x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA) and the baseline, and the variant is picked
// per call from the CPU's capability, detected once at load time.
//
// Why not GCC's target_clones: an ifunc resolver cannot be overridden, so one binary could
// not run (and test, and measure) every variant. Here `simd_call` switches on a level that
// defaults to the best the CPU supports and that STRATA_CPU_CAPABILITY (default | x86-64-v3
// | x86-64-v4, also avx2 / avx512, as PyTorch's ATEN_CPU_CAPABILITY) or set_simd_level can
// lower. The mechanism is the same: a function with a target attribute that inlines the body
// (flatten) and so compiles it for that ISA. The dispatch sits inside each parallel_for
// chunk, because OpenMP outlines a parallel region into a separate default-target function.
//
// Compiled out (plain calls) when the translation unit is built for a fixed ISA already
// (-march=native: __AVX2__ defined), with a compiler other than GCC, off x86-64, or with
// -DSTRATA_CPU_DISPATCH=OFF (STRATA_NO_CPU_DISPATCH).
#pragma once
#include <cstdint>
#include <utility>

#include <strata/tensor/cpu/parallel_for.h>
#include <strata/tensor/cpu/simd_level.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__AVX2__) && \
    !defined(STRATA_NO_CPU_DISPATCH)
#define STRATA_CPU_DISPATCH 1
#else
#define STRATA_CPU_DISPATCH 0
#endif

namespace strata::cpu {

namespace detail {
extern int g_simd_level;  // SimdLevel as int; read per parallel chunk

#if STRATA_CPU_DISPATCH
template <class F, class... A>
[[gnu::target("arch=x86-64-v4"), gnu::flatten]] void call_v4(F& f, A... a) {
  f(a...);
}
template <class F, class... A>
[[gnu::target("arch=x86-64-v3"), gnu::flatten]] void call_v3(F& f, A... a) {
  f(a...);
}
template <class F, class... A>
[[gnu::flatten]] void call_baseline(F& f, A... a) {
  f(a...);
}
#endif
}  // namespace detail

/// f(a...) with f's body compiled for the current SIMD level. f is a lambda (or functor)
/// whose loops should vectorise; its callees are inlined into each variant. Arguments are
/// passed by value (indices, pointers).
template <class F, class... A>
inline void simd_call(F& f, A... a) {
#if STRATA_CPU_DISPATCH
  switch (detail::g_simd_level) {
    case int(SimdLevel::v4): return detail::call_v4(f, a...);
    case int(SimdLevel::v3): return detail::call_v3(f, a...);
    default: return detail::call_baseline(f, a...);
  }
#else
  f(a...);
#endif
}

/// parallel_for whose chunks run fn(begin, end) through simd_call.
template <class F>
void parallel_for_simd(int64_t n, int64_t grain, F&& fn) {
  parallel_for(n, grain, [&](int64_t b, int64_t e) { simd_call(fn, b, e); });
}

}  // namespace strata::cpu
