// The SIMD levels this CPU can run, and a guard restoring the level a test changed.
#pragma once
#include <vector>

#include <strata/tensor/cpu/simd_level.h>

namespace strata::testing {

struct SimdLevelGuard {
  cpu::SimdLevel saved = cpu::simd_level();
  ~SimdLevelGuard() { cpu::set_simd_level(saved); }
};

/// baseline, then v3 and v4 where this CPU supports them.
inline std::vector<cpu::SimdLevel> runnable_simd_levels() {
  std::vector<cpu::SimdLevel> out{cpu::SimdLevel::baseline};
  if (int(cpu::simd_level_supported()) >= int(cpu::SimdLevel::v3)) out.push_back(cpu::SimdLevel::v3);
  if (int(cpu::simd_level_supported()) >= int(cpu::SimdLevel::v4)) out.push_back(cpu::SimdLevel::v4);
  return out;
}

}  // namespace strata::testing
