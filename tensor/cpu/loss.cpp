// Cross-entropy fused with its softmax: one pass computes the probabilities that
// backward needs and the per-row losses (max-shifted, so exp never overflows). Row
// losses are summed serially in double, so the loss does not depend on the thread count.
#include <strata/tensor/cpu/loss.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <strata/tensor/cpu/act_avx512.h>
#include <strata/tensor/cpu/isa_dispatch.h>
#include <strata/tensor/cpu/prefetch.h>
#include <strata/tensor/cpu/softmax.h>
#include <strata/tensor/cpu/widen.h>
#include <strata/tensor/dispatch.h>

namespace strata::cpu {
namespace {

// Targets as i64 (copied when i32), validated: count of non-ignored rows.
std::vector<int64_t> read_targets(const Tensor& target, int64_t C, int64_t ignore_index, int64_t* count) {
  const int64_t n = target.numel();
  std::vector<int64_t> t(size_t(n), 0);
  if (target.dtype() == DType::i64) {
    std::copy(target.data<int64_t>(), target.data<int64_t>() + n, t.begin());
  } else if (target.dtype() == DType::i32) {
    std::copy(target.data<int32_t>(), target.data<int32_t>() + n, t.begin());
  } else {
    STRATA_THROW(Error, "[cross_entropy] targets must be i64 or i32, got ", dtype_name(target.dtype()));
  }
  *count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (t[size_t(i)] == ignore_index) continue;
    STRATA_CHECK(t[size_t(i)] >= 0 && t[size_t(i)] < C, "[cross_entropy] target ", t[size_t(i)], " at row ", i,
                 " is out of range for ", C, " classes (ignore_index ", ignore_index, ")");
    ++*count;
  }
  return t;
}

// Logits T (f16/bf16 widened per element), probabilities and loss in A = acc_t<T>.
template <class T, class A = acc_t<T>>
double cross_entropy_impl(const T* xp, const int64_t* t, A* pp, int64_t N, int64_t C, int64_t ignore_index) {
  std::vector<double> row_loss(size_t(N), 0.0);
  // loss_r = logsumexp(x) - x[t] = log(s) + mx - x[t], from the row's max and sum of exp
  const auto row_done = [&](int64_t r, double mx, double s) {
    if (t[r] != ignore_index) row_loss[size_t(r)] = std::log(s) + mx - double(ld(xp[r * C + t[r]]));
  };
  bool rows_done = false;
  if constexpr (std::is_same_v<T, float>) {
    // f32 at x86-64-v4: the softmax rows in AVX-512 intrinsics (act_avx512.h)
    if (avx512_rows() && C > 0) {
      parallel_for(N, std::max<int64_t>(1, 16384 / C), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          prefetch_row_ahead(xp, r, e, C);
          prefetch_row_ahead<true>(pp, r, e, C);
          float mx, s;
          softmax_row_avx512(xp + r * C, pp + r * C, C, &mx, &s);
          row_done(r, mx, s);
        }
      });
      rows_done = true;
    }
  }
  if (!rows_done)
    parallel_for_simd(N, std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const auto [mx, s] = softmax_row(xp + r * C, pp + r * C, C, /*log=*/false);
        row_done(r, double(mx), double(s));
      }
    });
  double total = 0;
  for (double l : row_loss) total += l;
  return total;
}

// Probabilities A (f32 or f64), gradient T (= A, or f16/bf16 rounded once per element).
template <class T, class A>
void cross_entropy_backward_impl(const A* pp, const int64_t* t, T* dp, int64_t N, int64_t C, int64_t ignore_index,
                                 A scale) {
  parallel_for_simd(N, std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      T* d = dp + r * C;
      if (t[r] == ignore_index) {
        std::fill(d, d + C, st<T>(A(0)));
        continue;
      }
      const A* p = pp + r * C;
#pragma omp simd
      for (int64_t i = 0; i < C; ++i) d[i] = st<T>(scale * p[i]);
      if constexpr (kIs16<T>)
        d[t[r]] = st<T>(scale * p[t[r]] - scale);
      else
        d[t[r]] -= scale;
    }
  });
}

}  // namespace

void cross_entropy_kernel(const Tensor& logits, const Tensor& target, int64_t ignore_index, Tensor& loss,
                          Tensor& probs) {
  const int64_t N = logits.size(0), C = logits.size(1);
  int64_t count = 0;
  const std::vector<int64_t> t = read_targets(target, C, ignore_index, &count);
  STRATA_DISPATCH_FLOAT16(logits.dtype(), "cross_entropy", [&] {
    using A = acc_t<scalar_t>;
    const double total =
        cross_entropy_impl<scalar_t>(logits.data<scalar_t>(), t.data(), probs.data<A>(), N, C, ignore_index);
    *loss.data<A>() = A(count > 0 ? total / double(count) : 0.0);
  });
}

void cross_entropy_backward_kernel(const Tensor& dloss, const Tensor& probs, const Tensor& target,
                                   int64_t ignore_index, Tensor& dlogits) {
  const int64_t N = probs.size(0), C = probs.size(1);
  int64_t count = 0;
  const std::vector<int64_t> t = read_targets(target, C, ignore_index, &count);
  const double scale = count > 0 ? dloss.item<double>() / double(count) : 0.0;
  STRATA_DISPATCH_FLOAT16(dlogits.dtype(), "cross_entropy_backward", [&] {
    using A = acc_t<scalar_t>;
    cross_entropy_backward_impl<scalar_t, A>(probs.data<A>(), t.data(), dlogits.data<scalar_t>(), N, C,
                                             ignore_index, A(scale));
  });
}

}  // namespace strata::cpu
