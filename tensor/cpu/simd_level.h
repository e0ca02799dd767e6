// The SIMD level of the CPU loops (tensor/cpu/isa_dispatch.h): query and override, for
// `strata info`, tests and benchmarks. No OpenMP here, so any strata target may include it.
#pragma once

namespace strata::cpu {

/// The instruction-set levels a dispatched loop is compiled for (x86-64 psABI levels).
enum class SimdLevel : int { baseline = 0, v3 = 1, v4 = 2 };

/// The level the dispatched loops run at now.
SimdLevel simd_level();
/// The best level this CPU supports (what simd_level starts at, unless the env lowers it).
SimdLevel simd_level_supported();
/// Sets the level (capped at simd_level_supported); returns the level in effect. For tests
/// and benchmarks: call it between ops, not while one runs.
SimdLevel set_simd_level(SimdLevel level);
/// "x86-64-v4 (AVX-512)" etc.
const char* simd_level_name(SimdLevel level);
/// Whether this build dispatches at all (false: the loops are compiled for one ISA).
bool simd_dispatch_compiled();
/// One line for `strata info`: the level in use and how it was chosen.
const char* cpu_kernels_info();

}  // namespace strata::cpu
