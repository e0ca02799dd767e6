// Counter-based random numbers (Philox-4x32-10). Element i of a draw depends only on
// (seed, offset, i), never on the thread that computes it, so results do not
// change with the thread count and a generator's state is two integers.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>

namespace strata {

/// One Philox-4x32-10 block: 4 random words for counter `ctr` under `key`.
inline std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = uint64_t(kM0) * ctr[0];
    const uint64_t p1 = uint64_t(kM1) * ctr[2];
    ctr = {uint32_t(p1 >> 32) ^ ctr[1] ^ key[0], uint32_t(p1), uint32_t(p0 >> 32) ^ ctr[3] ^ key[1],
           uint32_t(p0)};
    key[0] += kW0;
    key[1] += kW1;
  }
  return ctr;
}

/// A seed plus a running offset. Each draw of n numbers consumes ceil(n/4) counters.
/// Copyable state: {seed, offset} is all a checkpoint stores.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }
  /// Reserves `n` numbers and returns the counter base for them.
  uint64_t reserve(uint64_t n) {
    const uint64_t base = offset_;
    offset_ += (n + 3) / 4;
    return base;
  }
  /// Four uniform 32-bit words for counter `c`.
  std::array<uint32_t, 4> block(uint64_t c) const {
    return philox4x32({uint32_t(c), uint32_t(c >> 32), 0, 0}, {uint32_t(seed_), uint32_t(seed_ >> 32)});
  }
  /// Uniform [0,1) float for element i of a draw starting at `base`.
  float uniform(uint64_t base, uint64_t i) const { return to_unit(block(base + i / 4)[i % 4]); }
  /// Standard normal for element i (Box-Muller over the block's word pairs).
  float normal(uint64_t base, uint64_t i) const {
    const auto w = block(base + i / 4);
    const int pair = int(i % 4) / 2;
    const float u1 = to_unit(w[pair * 2]) + 0x1p-25f;  // (0,1]
    const float u2 = to_unit(w[pair * 2 + 1]);
    const float r = std::sqrt(-2.0f * std::log(u1));
    const float th = 6.283185307179586f * u2;
    return (i % 2 == 0) ? r * std::cos(th) : r * std::sin(th);
  }
  /// Uniform integer in [0, n).
  uint64_t next_below(uint64_t n) {
    const auto w = block(reserve(4));
    const uint64_t x = (uint64_t(w[0]) << 32) | w[1];
    return x % n;
  }
  static float to_unit(uint32_t x) { return float(x >> 8) * 0x1p-24f; }

 private:
  uint64_t seed_ = 0;
  uint64_t offset_ = 0;
};

/// The process-wide default generator used by init and dropout unless one is passed.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace strata
