// CPU reductions. sum has fast paths for the layouts training hits (all
// elements, last dims = row sums, leading dims = column sums as in bias grads,
// middle dims = batched column sums) and a strided general path. f32 sums
// accumulate in f64, and work is split in fixed blocks so results do not depend
// on the thread count.
#include <strata/tensor/cpu/reduce.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include <strata/tensor/cpu/loops.h>
#include <strata/tensor/cpu/widen.h>
#include <strata/tensor/dispatch.h>
#include <strata/tensor/ops.h>

namespace strata::cpu {
namespace {

constexpr int64_t kBlock = 8192;     // elements per partial sum of a full reduction
constexpr int64_t kColBlock = 256;   // columns per unit of a column reduction
constexpr int64_t kRowBlock = 512;   // rows per unit of a column reduction

template <class T>
double sum_run(const T* p, int64_t n) {
  double acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += double(ld(p[i]));
  return acc;
}

// Sum of n contiguous elements, deterministic: fixed blocks, partials summed in order.
template <class T>
double sum_all(const T* p, int64_t n) {
  if (n <= kBlock) return sum_run(p, n);
  const int64_t nb = (n + kBlock - 1) / kBlock;
  std::vector<double> part(size_t(nb), 0.0);
  parallel_for_simd(nb, 4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) part[size_t(i)] = sum_run(p + i * kBlock, std::min(kBlock, n - i * kBlock));
  });
  double acc = 0;
  for (double v : part) acc += v;
  return acc;
}

constexpr int64_t kStrip = 64;  // columns summed in registers at once (8 f64 vectors at AVX-512)

// acc[c] = sum of rows [r0, r1) of the kStrip columns at p (row stride `stride`), each column
// added in row order. The sums stay in registers over the whole row loop (the loop over an
// acc array in memory loaded and stored it for every row); the order, and so each bit, is
// that of one accumulator per column.
template <class T>
inline void column_strip(const T* p, int64_t stride, int64_t r0, int64_t r1, double* acc) {
  double s[kStrip] = {};
  for (int64_t r = r0; r < r1; ++r) {
    const T* row = p + r * stride;
    for (int64_t c = 0; c < kStrip; ++c) s[c] += double(ld(row[c]));
  }
  for (int64_t c = 0; c < kStrip; ++c) acc[c] = s[c];
}

// out[a, c] = scale * sum_r in[a, r, c] for contiguous in (A, R, C). Work units are
// (a, block of kRowBlock rows, block of kColBlock columns), so tall inputs (bias
// gradients of (B*T, C)) spread over all threads; row-block partials are added in
// a fixed order.
template <class T>
void sum_columns(T* out, const T* in, int64_t A, int64_t R, int64_t C, double scale) {
  const int64_t cb = (C + kColBlock - 1) / kColBlock;
  const int64_t rb = (R + kRowBlock - 1) / kRowBlock;
  std::vector<double> part(rb > 1 ? size_t(A * rb * C) : 0);
  const int64_t units = A * rb * cb;
  const int64_t work = std::min(R, kRowBlock) * std::min(C, kColBlock);
  parallel_for_simd(units, std::max<int64_t>(1, 32768 / std::max<int64_t>(work, 1)), [&](int64_t b, int64_t e) {
    double acc[kColBlock];
    for (int64_t u = b; u < e; ++u) {
      const int64_t a = u / (rb * cb), r_blk = (u / cb) % rb, c0 = (u % cb) * kColBlock;
      const int64_t w = std::min(kColBlock, C - c0);
      const int64_t r0 = r_blk * kRowBlock, r1 = std::min(R, r0 + kRowBlock);
      const T* base = in + a * R * C + c0;
      int64_t c = 0;
      for (; c + kStrip <= w; c += kStrip) column_strip(base + c, C, r0, r1, acc + c);
      for (int64_t j = c; j < w; ++j) acc[j] = 0;
      for (int64_t r = r0; r < r1; ++r) {
        const T* row = base + r * C;
        for (int64_t j = c; j < w; ++j) acc[j] += double(ld(row[j]));
      }
      if (rb == 1) {
        T* o = out + a * C + c0;
        for (int64_t c = 0; c < w; ++c) o[c] = st<T>(acc[c] * scale);
      } else {
        double* p = part.data() + (a * rb + r_blk) * C + c0;
        for (int64_t c = 0; c < w; ++c) p[c] = acc[c];
      }
    }
  });
  if (rb == 1) return;
  parallel_for_simd(A * C, 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t a = i / C, c = i % C;
      double s = 0;
      for (int64_t k = 0; k < rb; ++k) s += part[size_t((a * rb + k) * C + c)];
      out[i] = st<T>(s * scale);
    }
  });
}

template <class T>
void sum_typed(Tensor& out, const Tensor& in, double scale) {
  T* o = out.data<T>();
  const int64_t on = out.numel();
  if (in.numel() == 0) {
    for (int64_t i = 0; i < on; ++i) o[i] = st<T>(0.0 * scale);  // mean of nothing is NaN
    return;
  }
  const T* p = in.data<T>();
  if (in.is_contiguous()) {
    // coalesce into groups of adjacent kept / reduced dims
    std::vector<std::pair<int64_t, bool>> g;
    for (int64_t d = 0; d < in.dim(); ++d) {
      const int64_t s = in.shape()[d];
      if (s == 1) continue;
      const bool red = out.shape()[d] == 1;
      if (!g.empty() && g.back().second == red)
        g.back().first *= s;
      else
        g.emplace_back(s, red);
    }
    if (g.empty() || (g.size() == 1 && !g[0].second)) {  // nothing to reduce
      const int64_t n = in.numel();
      for (int64_t i = 0; i < n; ++i) o[i] = st<T>(double(ld(p[i])) * scale);
      return;
    }
    if (g.size() == 1) {  // everything
      o[0] = st<T>(sum_all(p, g[0].first) * scale);
      return;
    }
    if (g.size() == 2 && g[1].second) {  // (M, K) -> (M): row sums
      const int64_t M = g[0].first, K = g[1].first;
      parallel_for_simd(M, std::max<int64_t>(1, 32768 / K), [&](int64_t b, int64_t e) {
        for (int64_t m = b; m < e; ++m) o[m] = st<T>(sum_run(p + m * K, K) * scale);
      });
      return;
    }
    if (g.size() == 2) {  // (R, C) -> (C): column sums
      sum_columns(o, p, 1, g[0].first, g[1].first, scale);
      return;
    }
    if (g.size() == 3 && !g[0].second) {  // (A, R, C) -> (A, C)
      sum_columns(o, p, g[0].first, g[1].first, g[2].first, scale);
      return;
    }
  }
  // General strided path: accumulate into an f64 buffer laid out like out.
  std::vector<double> acc(size_t(on), 0.0);
  const Shape ostr = contiguous_strides(out.shape());
  // walk the input in memory order (largest stride outermost): any order sums the same
  std::vector<int64_t> order(size_t(in.dim()));
  for (int64_t d = 0; d < in.dim(); ++d) order[size_t(d)] = d;
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
    return std::abs(in.strides()[size_t(x)]) > std::abs(in.strides()[size_t(y)]);
  });
  Shape shape(order.size()), astr(order.size()), istr(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t d = size_t(order[i]);
    shape[i] = in.shape()[d];
    astr[i] = out.shape()[d] == 1 ? 0 : ostr[d];
    istr[i] = in.strides()[d];
  }
  const auto plan = make_plan<2>(shape, {astr, istr});
  double* ap = acc.data();
  constexpr int64_t kSerial = int64_t(1) << 40;  // runs may hit the same output: no threads
  for_each_run<2>(
      plan,
      [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& sd) {
        double* a = ap + off[0];
        const T* x = p + off[1];
        if (sd[0] == 0) {
          double s = 0;
#pragma omp simd reduction(+ : s)
          for (int64_t i = 0; i < n; ++i) s += double(ld(x[i * sd[1]]));
          *a += s;
        } else {
          for (int64_t i = 0; i < n; ++i) a[i * sd[0]] += double(ld(x[i * sd[1]]));
        }
      },
      kSerial);
  for (int64_t i = 0; i < on; ++i) o[i] = st<T>(acc[size_t(i)] * scale);
}

// v beats best: larger, or NaN over a number (max propagates NaN, as PyTorch).
template <class T>
inline bool beats(T v16, T best16) {
  const auto v = ld(v16), best = ld(best16);  // f16/bf16 compare as f32
  if constexpr (std::is_floating_point_v<decltype(v)>)
    return v > best || (std::isnan(v) && !std::isnan(best));
  else
    return v > best;
}

template <class T>
void max_typed(Tensor& values, Tensor& indices, const Tensor& in_, int64_t dim) {
  const Tensor in = ops::contiguous(in_);
  const int64_t K = in.shape()[dim];
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= in.shape()[d];
  for (int64_t d = dim + 1; d < in.dim(); ++d) inner *= in.shape()[d];
  if (outer * inner == 0) return;
  std::vector<T> tmp;
  T* vo;
  if (values.defined()) {
    vo = values.data<T>();
  } else {
    tmp.resize(size_t(outer * inner));
    vo = tmp.data();
  }
  int64_t* io = indices.data_or_null<int64_t>();
  const T* src = in.data<T>();
  parallel_for_simd(outer, std::max<int64_t>(1, 32768 / std::max<int64_t>(K * inner, 1)), [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      const T* p = src + o * K * inner;
      T* bv = vo + o * inner;
      int64_t* bi = io ? io + o * inner : nullptr;
      if (inner == 1) {
        T best = p[0];
        int64_t arg = 0;
        for (int64_t k = 1; k < K; ++k)
          if (beats(p[k], best)) {
            best = p[k];
            arg = k;
          }
        bv[0] = best;
        if (bi) bi[0] = arg;
        continue;
      }
      for (int64_t i = 0; i < inner; ++i) bv[i] = p[i];
      if (bi)
        for (int64_t i = 0; i < inner; ++i) bi[i] = 0;
      for (int64_t k = 1; k < K; ++k) {
        const T* r = p + k * inner;
        if (bi) {
          for (int64_t i = 0; i < inner; ++i)
            if (beats(r[i], bv[i])) {
              bv[i] = r[i];
              bi[i] = k;
            }
        } else {
          for (int64_t i = 0; i < inner; ++i) bv[i] = beats(r[i], bv[i]) ? r[i] : bv[i];
        }
      }
    }
  });
}

template <class T>
double sum_squares_typed(const T* p, int64_t n) {
  const int64_t nb = (n + kBlock - 1) / kBlock;
  std::vector<double> part(size_t(nb), 0.0);
  parallel_for_simd(nb, 4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const T* q = p + i * kBlock;
      const int64_t m = std::min(kBlock, n - i * kBlock);
      double acc = 0;
#pragma omp simd reduction(+ : acc)
      for (int64_t j = 0; j < m; ++j) acc += double(ld(q[j])) * double(ld(q[j]));
      part[size_t(i)] = acc;
    }
  });
  double acc = 0;
  for (double v : part) acc += v;
  return acc;
}

}  // namespace

void sum_kernel(Tensor& out, const Tensor& in, double scale) {
  STRATA_DISPATCH_FLOAT16(in.dtype(), "sum", [&] { sum_typed<scalar_t>(out, in, scale); });
}

void max_kernel(Tensor& values, Tensor& indices, const Tensor& in, int64_t dim) {
  STRATA_DISPATCH_ALL16(in.dtype(), "amax", [&] { max_typed<scalar_t>(values, indices, in, dim); });
}

double sum_squares_kernel(const Tensor& in_) {
  if (in_.numel() == 0) return 0.0;
  const Tensor in = ops::contiguous(in_);
  return STRATA_DISPATCH_FLOAT16(in.dtype(), "sum_squares", [&] { return sum_squares_typed(in.data<scalar_t>(), in.numel()); });
}

}  // namespace strata::cpu
