// SIMD level detection for tensor/cpu/isa_dispatch.h.
#include <strata/tensor/cpu/isa_dispatch.h>

#include <cstdlib>
#include <string>
#include <string_view>


namespace strata::cpu {
namespace {

SimdLevel detect() {
#if STRATA_CPU_DISPATCH
  __builtin_cpu_init();
  // libgcc checks the OS saves the wide registers (XGETBV) before reporting a level
  if (__builtin_cpu_supports("x86-64-v4")) return SimdLevel::v4;
  if (__builtin_cpu_supports("x86-64-v3")) return SimdLevel::v3;
#endif
  return SimdLevel::baseline;
}

const SimdLevel kSupported = detect();
std::string g_source = "detected";

// STRATA_CPU_CAPABILITY lowers the level (never raises it past the CPU's).
int initial_level() {
  SimdLevel lvl = kSupported;
  if (const char* env = std::getenv("STRATA_CPU_CAPABILITY"); env && *env) {
    const std::string_view v(env);
    SimdLevel want = kSupported;
    bool known = true;
    if (v == "default" || v == "baseline" || v == "x86-64") want = SimdLevel::baseline;
    else if (v == "x86-64-v3" || v == "avx2") want = SimdLevel::v3;
    else if (v == "x86-64-v4" || v == "avx512") want = SimdLevel::v4;
    else known = false;
    if (!known) {
      g_source = "STRATA_CPU_CAPABILITY=" + std::string(v) + " not understood (default | x86-64-v3 | x86-64-v4); detected";
    } else {
      lvl = int(want) < int(kSupported) ? want : kSupported;
      g_source = "STRATA_CPU_CAPABILITY=" + std::string(v);
    }
  }
  return int(lvl);
}

}  // namespace

namespace detail {
int g_simd_level = initial_level();
}  // namespace detail

SimdLevel simd_level() { return SimdLevel(detail::g_simd_level); }
SimdLevel simd_level_supported() { return kSupported; }

SimdLevel set_simd_level(SimdLevel level) {
  detail::g_simd_level = int(level) < int(kSupported) ? int(level) : int(kSupported);
  g_source = "set_simd_level";
  return simd_level();
}

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::v4: return "x86-64-v4 (AVX-512)";
    case SimdLevel::v3: return "x86-64-v3 (AVX2, FMA)";
    case SimdLevel::baseline: break;
  }
  return "baseline (x86-64, SSE2)";
}

bool simd_dispatch_compiled() { return STRATA_CPU_DISPATCH != 0; }

const char* cpu_kernels_info() {
  static thread_local std::string s;
  if (!simd_dispatch_compiled())
#if defined(__AVX2__)
    s = "compiled for this ISA (-march=native), no runtime dispatch";
#else
    s = "baseline only, no runtime dispatch";
#endif
  else
    s = std::string(simd_level_name(simd_level())) + ", runtime dispatch (" + g_source + "; CPU supports " +
        simd_level_name(kSupported) + ")";
  return s.c_str();
}

}  // namespace strata::cpu
