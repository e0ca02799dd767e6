// CPU kernel for rotary position embeddings (RoPE) in the rotate-half layout.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <strata/tensor/tensor.h>

namespace strata::cpu {

/// The rotation table of T positions: cos and sin (T, hd/2) row-major, in A, of the angles
/// positions[t] * inv_freq[i] taken in f64 (angles of positions up to 10^5 and more keep
/// their digits); sin negated for the inverse rotation. One table for the rotary kernel and
/// the attention kernel that rotates q and k itself, so the two agree bit for bit.
template <class A>
struct RopeTable {
  std::vector<int64_t> pos;  // what it was made of
  std::vector<double> inv_freq;
  bool inverse = false;
  std::vector<A> cos, sin;

  bool made_of(const int64_t* p, const double* f, int64_t T, int64_t half, bool inv) const {
    return inv == inverse && int64_t(pos.size()) == T && int64_t(inv_freq.size()) == half &&
           std::equal(pos.begin(), pos.end(), p) && std::equal(inv_freq.begin(), inv_freq.end(), f);
  }
  void make(const int64_t* p, const double* f, int64_t T, int64_t half, bool inv) {
    pos.assign(p, p + T);
    inv_freq.assign(f, f + half);
    inverse = inv;
    cos.resize(size_t(T * half));
    sin.resize(size_t(T * half));
    const double sign = inv ? -1.0 : 1.0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < half; ++i) {
        const double a = double(p[t]) * f[i];
        cos[size_t(t * half + i)] = A(std::cos(a));
        sin[size_t(t * half + i)] = A(sign * std::sin(a));
      }
  }
};

/// One pair (a, b) = (x[i], x[i + hd/2]) turned by (c, s) = (cos, sin): the arithmetic of
/// every rotary rotation on the CPU (the rotary kernel, and the attention kernel turning q
/// and k as it packs them and their gradients back with -s), written once so that the
/// compiler forms the same products and sums (and FMA contractions) everywhere.
template <class A>
[[gnu::always_inline]] inline void rope_turn(A a, A b, A c, A s, A& y1, A& y2) {
  y1 = a * c - b * s;
  y2 = b * c + a * s;
}

/// The table of these positions and frequencies: the calling thread's last one when it was
/// made of the same values, else made anew (2 T hd/2 f64 cos/sin calls, ~50 us at T 64,
/// hd 32: every layer's forward and backward asks for the same table). Valid until this
/// thread's next call.
template <class A>
const RopeTable<A>& rope_table(const int64_t* pos, const double* inv_freq, int64_t T, int64_t half,
                               bool inverse = false) {
  thread_local RopeTable<A> last;
  if (!last.made_of(pos, inv_freq, T, half, inverse)) last.make(pos, inv_freq, T, half, inverse);
  return last;
}

/// x (B, T, H, hd) contiguous, positions (T) i64, inv_freq (hd/2) f64 -> y (B, T, H, hd).
/// Rotate-half (split halves) layout, as Hugging Face's LlamaForCausalLM: for i < hd/2 the
/// pair (x[i], x[i + hd/2]) turns by the angle a = positions[t] * inv_freq[i]:
///   y[i]        = x[i] cos a - x[i + hd/2] sin a
///   y[i + hd/2] = x[i + hd/2] cos a + x[i] sin a
/// (Meta's reference code pairs interleaved elements (x[2i], x[2i+1]) instead.) With
/// `inverse` the angle is -a: the rotation's transpose, which is its backward. Only heads
/// h < rotated turn; the others are copied (the v heads of a packed q|k|v).
void rotary_kernel(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, Tensor& y, int64_t B, int64_t T,
                   int64_t H, int64_t hd, bool inverse, int64_t rotated);

}  // namespace strata::cpu
