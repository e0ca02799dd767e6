// Pooling kernels: one (H,W) plane per iteration, planes in parallel. Windows are
// clipped to the input, so padding is never read. The f32 2x2 stride-2 max pool of planes
// up to 32 wide runs pool_avx512.h's rows at x86-64-v4.
#include <strata/tensor/cpu/pool.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include <strata/tensor/cpu/act_avx512.h>
#include <strata/tensor/cpu/isa_dispatch.h>
#include <strata/tensor/cpu/pool_rows.h>
#include <strata/tensor/cpu/widen.h>
#include <strata/tensor/dispatch.h>

namespace strata::cpu {
namespace {

struct PlaneGeom {
  int64_t planes, H, W, Ho, Wo;
};

PlaneGeom plane_geom(const Tensor& x, const Tensor& y) {
  return {x.size(0) * x.size(1), x.size(2), x.size(3), y.size(2), y.size(3)};
}

template <class F>
void for_planes(const PlaneGeom& g, F&& fn) {
  const int64_t work = std::max<int64_t>(1, g.H * g.W + g.Ho * g.Wo);
  parallel_for_simd(g.planes, std::max<int64_t>(1, 16384 / work), [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; ++pl) fn(pl);
  });
}

}  // namespace

void max_pool2d_kernel(const Tensor& x, Tensor& y, Tensor& idx, const ops::Pool2dParams& p) {
  if (y.numel() == 0) return;
  const PlaneGeom g = plane_geom(x, y);
  STRATA_DISPATCH_FLOAT16(x.dtype(), "max_pool2d", [&] {
    const scalar_t* xp = x.data<scalar_t>();
    scalar_t* yp = y.data<scalar_t>();
    int64_t* ip = idx.data<int64_t>();
    // 16-bit elements take the general loop, comparing widened values (exact: widening
    // preserves order and NaN)
    const bool k2s2 = !kIs16<scalar_t> && p.kernel_h == 2 && p.kernel_w == 2 && p.stride_h == 2 && p.stride_w == 2 && p.pad_h == 0 &&
                      p.pad_w == 0;
    for_planes(g, [&](int64_t pl) {
      const scalar_t* xs = xp + pl * g.H * g.W;
      scalar_t* ys = yp + pl * g.Ho * g.Wo;
      int64_t* is = ip + pl * g.Ho * g.Wo;
      if constexpr (!kIs16<scalar_t>) {
        if (k2s2) return max2x2_plane(xs, g.H, g.W, ys, is);
      }
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        const int64_t h0 = std::max<int64_t>(oh * p.stride_h - p.pad_h, 0);
        const int64_t h1 = std::min<int64_t>(oh * p.stride_h - p.pad_h + p.kernel_h, g.H);
        for (int64_t ow = 0; ow < g.Wo; ++ow) {
          const int64_t w0 = std::max<int64_t>(ow * p.stride_w - p.pad_w, 0);
          const int64_t w1 = std::min<int64_t>(ow * p.stride_w - p.pad_w + p.kernel_w, g.W);
          int64_t best = h0 * g.W + w0;
          acc_t<scalar_t> m = ld(xs[best]);
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) {
              const acc_t<scalar_t> v = ld(xs[h * g.W + w]);
              if (v > m || (std::isnan(v) && !std::isnan(m))) {
                m = v;
                best = h * g.W + w;
              }
            }
          ys[oh * g.Wo + ow] = xs[best];
          is[oh * g.Wo + ow] = best;
        }
      }
    });
  });
}

void max_pool2d_backward_kernel(const Tensor& dy, const Tensor& idx, Tensor& dx) {
  if (dx.numel() == 0) return;
  const PlaneGeom g = plane_geom(dx, dy);
  STRATA_DISPATCH_FLOAT16(dy.dtype(), "max_pool2d_backward", [&] {
    const scalar_t* gp = dy.data<scalar_t>();
    const int64_t* ip = idx.data<int64_t>();
    scalar_t* dp = dx.data<scalar_t>();
    for_planes(g, [&](int64_t pl) {
      scalar_t* ds = dp + pl * g.H * g.W;
      const scalar_t* gs = gp + pl * g.Ho * g.Wo;
      const int64_t* is = ip + pl * g.Ho * g.Wo;
      std::fill(ds, ds + g.H * g.W, scalar_t(0));
      for (int64_t i = 0; i < g.Ho * g.Wo; ++i) ds[is[i]] = st<scalar_t>(ld(ds[is[i]]) + ld(gs[i]));
    });
  });
}

namespace {

// One axis of an average-pool window at output position o: the input range [lo, hi) it
// covers and PyTorch's divisor extent (the window clipped to the padded input only).
struct AvgWindow {
  int64_t lo, hi, divisor;
};
AvgWindow avg_window(int64_t o, int64_t stride, int64_t pad, int64_t kernel, int64_t n) {
  const int64_t start = o * stride - pad;
  return {std::max<int64_t>(start, 0), std::min<int64_t>(start + kernel, n),
          std::min<int64_t>(start + kernel, n + pad) - start};
}

}  // namespace

void avg_pool2d_kernel(const Tensor& x, Tensor& y, const ops::Pool2dParams& p) {
  if (y.numel() == 0) return;
  const PlaneGeom g = plane_geom(x, y);
  STRATA_DISPATCH_FLOAT16(x.dtype(), "avg_pool2d", [&] {
    const scalar_t* xp = x.data<scalar_t>();
    scalar_t* yp = y.data<scalar_t>();
    for_planes(g, [&](int64_t pl) {
      const scalar_t* xs = xp + pl * g.H * g.W;
      scalar_t* ys = yp + pl * g.Ho * g.Wo;
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        const AvgWindow wh = avg_window(oh, p.stride_h, p.pad_h, p.kernel_h, g.H);
        for (int64_t ow = 0; ow < g.Wo; ++ow) {
          const AvgWindow ww = avg_window(ow, p.stride_w, p.pad_w, p.kernel_w, g.W);
          acc_t<scalar_t> s = 0;
          for (int64_t h = wh.lo; h < wh.hi; ++h)
            for (int64_t w = ww.lo; w < ww.hi; ++w) s += ld(xs[h * g.W + w]);
          ys[oh * g.Wo + ow] = st<scalar_t>(s / acc_t<scalar_t>(wh.divisor * ww.divisor));
        }
      }
    });
  });
}

void avg_pool2d_backward_kernel(const Tensor& dy, Tensor& dx, const ops::Pool2dParams& p) {
  if (dx.numel() == 0) return;
  const PlaneGeom g = plane_geom(dx, dy);
  STRATA_DISPATCH_FLOAT16(dy.dtype(), "avg_pool2d_backward", [&] {
    const scalar_t* gp = dy.data<scalar_t>();
    scalar_t* dp = dx.data<scalar_t>();
    for_planes(g, [&](int64_t pl) {
      scalar_t* ds = dp + pl * g.H * g.W;
      const scalar_t* gs = gp + pl * g.Ho * g.Wo;
      std::fill(ds, ds + g.H * g.W, scalar_t(0));
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        const AvgWindow wh = avg_window(oh, p.stride_h, p.pad_h, p.kernel_h, g.H);
        for (int64_t ow = 0; ow < g.Wo; ++ow) {
          const AvgWindow ww = avg_window(ow, p.stride_w, p.pad_w, p.kernel_w, g.W);
          const acc_t<scalar_t> v = ld(gs[oh * g.Wo + ow]) / acc_t<scalar_t>(wh.divisor * ww.divisor);
          for (int64_t h = wh.lo; h < wh.hi; ++h)
            for (int64_t w = ww.lo; w < ww.hi; ++w) ds[h * g.W + w] = st<scalar_t>(ld(ds[h * g.W + w]) + v);
        }
      }
    });
  });
}

}  // namespace strata::cpu
