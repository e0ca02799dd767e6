// 16-bit (f16/bf16) tensors run the same code on 2-byte im2col buffers: the GEMM widens its
// panels to f32 (gemm.cpp) and the additions here (bias, col2im, partial weight
// gradients, bias gradient) widen, add in f32 and round.
// Convolution as GEMM, parallel over the batch: each thread takes a contiguous block
// of samples and runs im2col, a single-threaded BLAS GEMM and col2im on its own cache-
// sized groups of them (OpenBLAS's own threading gains little on these small GEMMs and
// serialises concurrent callers). The weight gradient is summed per thread, then
// reduced in thread order. 1x1 stride-1 unpadded convolutions skip im2col.
// conv2d_kernel and conv2d_backward_kernel send f32 convolutions to oneDNN instead
// (conv_dnnl.cpp) where STRATA_CONV or the automatic rule (conv_auto_uses_dnnl) says so.
#include <strata/tensor/cpu/conv.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <strata/core/error.h>
#include <strata/core/threads.h>
#include <strata/tensor/cpu/blocks.h>
#include <strata/tensor/cpu/conv_dnnl.h>
#include <strata/tensor/cpu/gemm.h>
#include <strata/tensor/cpu/widen.h>
#include <strata/tensor/dispatch.h>

namespace strata::cpu {
namespace {

constexpr int64_t kColBudget = int64_t(1) << 18;  // elements of one thread's im2col matrix per group

struct Geom {
  int64_t N, C, H, W, O, kh, kw, sh, sw, ph, pw, Ho, Wo;
  int64_t kk() const { return kh * kw; }
  int64_t ckk() const { return C * kh * kw; }
  int64_t P() const { return Ho * Wo; }
  bool pointwise() const { return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
  int64_t group() const { return std::clamp<int64_t>(kColBudget / std::max<int64_t>(ckk() * P(), 1), 1, N); }
};

Geom make_geom(const Tensor& x, const Tensor& w, const ops::Conv2dParams& p) {
  Geom g{x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3), p.stride_h, p.stride_w,
         p.pad_h, p.pad_w, 0, 0};
  g.Ho = (g.H + 2 * g.ph - g.kh) / g.sh + 1;
  g.Wo = (g.W + 2 * g.pw - g.kw) / g.sw + 1;
  return g;
}

// Output columns [lo, hi) whose input column ow*sw - pw + j lies inside [0, W).
inline std::pair<int64_t, int64_t> valid_cols(const Geom& g, int64_t j) {
  const int64_t a = g.pw - j;
  const int64_t lo = a > 0 ? (a + g.sw - 1) / g.sw : 0;
  const int64_t num = g.W - 1 + g.pw - j;
  const int64_t hi = num < 0 ? 0 : std::min(g.Wo, num / g.sw + 1);
  return {std::min(lo, hi), hi};
}

// Rows c*kk .. (c+1)*kk of the im2col matrix for one (H,W) plane; `col` points at
// row c*kk, column offset of this sample; `ld` is the matrix row length.
template <class T>
void im2col_plane(const T* xp, T* col, int64_t ld, const Geom& g) {
  for (int64_t i = 0; i < g.kh; ++i)
    for (int64_t j = 0; j < g.kw; ++j) {
      T* row = col + (i * g.kw + j) * ld;
      const auto [lo, hi] = valid_cols(g, j);
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        T* r = row + oh * g.Wo;
        const int64_t ih = oh * g.sh - g.ph + i;
        if (ih < 0 || ih >= g.H) {
          std::fill(r, r + g.Wo, T(0));
          continue;
        }
        const int64_t base = ih * g.W + j - g.pw;  // + ow*sw: input column ow*sw - pw + j
        std::fill(r, r + lo, T(0));
        if (g.sw == 1) {
          if (hi > lo) std::memcpy(r + lo, xp + base + lo, size_t(hi - lo) * sizeof(T));
        } else {
          for (int64_t ow = lo; ow < hi; ++ow) r[ow] = xp[base + ow * g.sw];
        }
        std::fill(r + hi, r + g.Wo, T(0));
      }
    }
}

// Inverse of im2col_plane: accumulates the rows back into the (H,W) plane dxp.
template <class T>
void col2im_plane(const T* col, T* dxp, int64_t ld, const Geom& g) {
  std::fill(dxp, dxp + g.H * g.W, T(0));
  for (int64_t i = 0; i < g.kh; ++i)
    for (int64_t j = 0; j < g.kw; ++j) {
      const T* row = col + (i * g.kw + j) * ld;
      // Plain variables, not a structured binding: clang 14 cannot capture one in the simd region.
      const std::pair<int64_t, int64_t> cols = valid_cols(g, j);
      const int64_t lo = cols.first, hi = cols.second;
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        const int64_t ih = oh * g.sh - g.ph + i;
        if (ih < 0 || ih >= g.H) continue;
        const T* r = row + oh * g.Wo;
        T* xr = dxp + ih * g.W;
        const int64_t base = j - g.pw;
        if (g.sw == 1) {
#pragma omp simd
          for (int64_t ow = lo; ow < hi; ++ow) xr[base + ow] = st<T>(cpu::ld(xr[base + ow]) + cpu::ld(r[ow]));
        } else {
          for (int64_t ow = lo; ow < hi; ++ow) xr[base + ow * g.sw] = st<T>(cpu::ld(xr[base + ow * g.sw]) + cpu::ld(r[ow]));
        }
      }
    }
}

// im2col of samples [n0, n0+cnt) into col (ckk, cnt*P), on the calling thread.
template <class T>
void im2col_group(const T* x, T* col, int64_t n0, int64_t cnt, const Geom& g) {
  const int64_t ld = cnt * g.P();
  for (int64_t s = 0; s < cnt; ++s)
    for (int64_t c = 0; c < g.C; ++c)
      im2col_plane(x + ((n0 + s) * g.C + c) * g.H * g.W, col + c * g.kk() * ld + s * g.P(), ld, g);
}

// Scratch memory of the calling thread, kept between calls: the im2col buffers are a
// few MB, and allocating them per call costs an mmap and a page fault per 4 KB on
// every step. Grows to the largest request seen; freed when the thread exits.
template <class T>
T* scratch(int64_t n) {
  thread_local std::vector<std::max_align_t> buf;
  const size_t need = (size_t(n) * sizeof(T) + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t);
  if (buf.size() < need) {
    buf.clear();
    buf.shrink_to_fit();
    buf.resize(need);
  }
  return reinterpret_cast<T*>(buf.data());
}

template <class T>
void conv_forward(const T* x, const T* w, const T* b, T* y, const Geom& g, DType dt) {
  const int64_t P = g.P(), ckk = g.ckk();
  const int nt = block_threads(g.N);
  auto fill_bias = [&](T* yn) {
    for (int64_t o = 0; o < g.O; ++o) std::fill(yn + o * P, yn + (o + 1) * P, b ? b[o] : T(0));
  };
  if (g.pointwise()) {  // y_n (O,P) = w (O,C) @ x_n (C,P)
    for_blocks(g.N, nt, [&](int, int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {
        T* yn = y + n * g.O * P;
        if (b) fill_bias(yn);
        gemm(dt, g.O, P, g.C, 1.0, {w, g.C, false}, {x + n * g.C * P, P, false}, b ? 1.0 : 0.0, yn, P);
      }
    });
    return;
  }
  const int64_t G = g.group();
  const int64_t col_len = ckk * G * P, tmp_len = G > 1 ? g.O * G * P : 0;
  T* const buf = scratch<T>(nt * (col_len + tmp_len));
  for_blocks(g.N, nt, [&](int tid, int64_t s0, int64_t s1) {
    T* col = buf + tid * (col_len + tmp_len);
    for (int64_t n0 = s0; n0 < s1; n0 += G) {
      const int64_t cnt = std::min(G, s1 - n0);
      im2col_group(x, col, n0, cnt, g);
      if (cnt == 1) {
        T* yn = y + n0 * g.O * P;
        if (b) fill_bias(yn);
        gemm(dt, g.O, P, ckk, 1.0, {w, ckk, false}, {col, P, false}, b ? 1.0 : 0.0, yn, P);
        continue;
      }
      // tmp (O, cnt*P) = w (O, ckk) @ col (ckk, cnt*P), then scatter to (cnt, O, P) adding the bias
      T* tmp = col + col_len;
      const int64_t ld = cnt * P;
      gemm(dt, g.O, ld, ckk, 1.0, {w, ckk, false}, {col, ld, false}, 0.0, tmp, ld);
      for (int64_t s = 0; s < cnt; ++s)
        for (int64_t o = 0; o < g.O; ++o) {
          const acc_t<T> bias = b ? cpu::ld(b[o]) : acc_t<T>(0);
          const T* src = tmp + o * ld + s * P;
          T* dst = y + ((n0 + s) * g.O + o) * P;
#pragma omp simd
          for (int64_t i = 0; i < P; ++i) dst[i] = st<T>(cpu::ld(src[i]) + bias);
        }
    }
  });
}

// dw = sum of the per-thread partials (thread 0 wrote straight into dw), in thread
// order, split over dw's elements.
template <class T>
void reduce_partials(T* dw, const T* partials, int nt, int64_t len) {
  if (nt <= 1) return;
  parallel_for_simd(len, 4096, [&](int64_t lo, int64_t hi) {
    for (int t = 1; t < nt; ++t) {
      const T* src = partials + (t - 1) * len;
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) dw[i] = st<T>(ld(dw[i]) + ld(src[i]));
    }
  });
}

template <class T>
void conv_backward(const T* dy, const T* x, const T* w, T* dx, T* dw, T* db, const Geom& g, DType dt) {
  const int64_t P = g.P(), ckk = g.ckk();
  if (db) {
    parallel_for_simd(g.O, std::max<int64_t>(1, 16384 / std::max<int64_t>(g.N * P, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t o = lo; o < hi; ++o) {
        double acc = 0;
        for (int64_t n = 0; n < g.N; ++n) {
          const T* r = dy + (n * g.O + o) * P;
          acc_t<T> s = 0;
#pragma omp simd reduction(+ : s)
          for (int64_t i = 0; i < P; ++i) s += cpu::ld(r[i]);
          acc += double(s);
        }
        db[o] = st<T>(acc);
      }
    });
  }
  if (g.N == 0) {
    std::fill(dw, dw + g.O * ckk, T(0));
    return;
  }
  const int nt = block_threads(g.N);
  const int64_t wlen = g.O * ckk;
  const int64_t G = g.pointwise() ? 0 : g.group();
  const int64_t col_len = ckk * G * P, dyg_len = G > 1 ? g.O * G * P : 0;
  // per thread: [im2col buffer | gathered dy]; then the partial dw of threads 1..nt-1
  T* const buf = scratch<T>(nt * (col_len + dyg_len) + (nt - 1) * wlen);
  T* const partials = buf + nt * (col_len + dyg_len);
  auto dw_of = [&](int tid) { return tid == 0 ? dw : partials + (tid - 1) * wlen; };
  if (g.pointwise()) {
    const int used = for_blocks(g.N, nt, [&](int tid, int64_t s0, int64_t s1) {
      T* dwt = dw_of(tid);
      for (int64_t n = s0; n < s1; ++n) {
        const T* dyn = dy + n * g.O * P;
        const T* xn = x + n * g.C * P;
        // dw (O,C) += dy_n (O,P) @ x_n^T (P,C);  dx_n (C,P) = w^T (C,O) @ dy_n (O,P)
        gemm(dt, g.O, g.C, P, 1.0, {dyn, P, false}, {xn, P, true}, n == s0 ? 0.0 : 1.0, dwt, g.C);
        if (dx) gemm(dt, g.C, P, g.O, 1.0, {w, g.C, true}, {dyn, P, false}, 0.0, dx + n * g.C * P, P);
      }
    });
    reduce_partials(dw, partials, used, wlen);
    return;
  }
  const int used = for_blocks(g.N, nt, [&](int tid, int64_t s0, int64_t s1) {
    T* col = buf + tid * (col_len + dyg_len);
    T* dwt = dw_of(tid);
    for (int64_t n0 = s0; n0 < s1; n0 += G) {
      const int64_t cnt = std::min(G, s1 - n0);
      const int64_t ld = cnt * P;
      im2col_group(x, col, n0, cnt, g);
      // dyg (O, cnt*P): the group's output gradient with samples side by side
      const T* dyg = dy + n0 * g.O * P;
      if (cnt > 1) {
        T* dst = col + col_len;
        for (int64_t s = 0; s < cnt; ++s)
          for (int64_t o = 0; o < g.O; ++o)
            std::memcpy(dst + o * ld + s * P, dy + ((n0 + s) * g.O + o) * P, size_t(P) * sizeof(T));
        dyg = dst;
      }
      // dw (O,ckk) += dyg (O,ld) @ col^T (ld,ckk)
      gemm(dt, g.O, ckk, ld, 1.0, {dyg, ld, false}, {col, ld, true}, n0 == s0 ? 0.0 : 1.0, dwt, ckk);
      if (!dx) continue;
      // col (ckk,ld) = w^T (ckk,O) @ dyg (O,ld), reusing the im2col buffer
      gemm(dt, ckk, ld, g.O, 1.0, {w, ckk, true}, {dyg, ld, false}, 0.0, col, ld);
      for (int64_t s = 0; s < cnt; ++s)
        for (int64_t c = 0; c < g.C; ++c)
          col2im_plane(col + c * g.kk() * ld + s * P, dx + ((n0 + s) * g.C + c) * g.H * g.W, ld, g);
    }
  });
  reduce_partials(dw, partials, used, wlen);
}

std::atomic<int> g_conv_path{-1};

ConvPath conv_path_from_env() {
  const char* e = std::getenv("STRATA_CONV");
  if (!e || std::strcmp(e, "auto") == 0) return ConvPath::automatic;
  if (std::strcmp(e, "native") == 0) return ConvPath::native;
  STRATA_CHECK(std::strcmp(e, "onednn") == 0, "[conv2d] STRATA_CONV=", e, " is not a path: use native, onednn or auto");
  return ConvPath::onednn;
}

bool uses_dnnl(bool backward, const Tensor& x, const Tensor& w, const ops::Conv2dParams& p) {
  if (x.dtype() != DType::f32) return false;
  switch (conv_path()) {
    case ConvPath::native: return false;
    case ConvPath::onednn: return true;
    case ConvPath::automatic: return conv_auto_uses_dnnl(backward, x, w, p, get_num_threads());
  }
  return false;
}

}  // namespace

void conv2d_im2col(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, const ops::Conv2dParams& p) {
  const Geom g = make_geom(x, w, p);
  if (y.numel() == 0) return;
  STRATA_DISPATCH_FLOAT16(x.dtype(), "conv2d", [&] {
    conv_forward<scalar_t>(x.data<scalar_t>(), w.data<scalar_t>(), b.data_or_null<scalar_t>(),
                           y.data<scalar_t>(), g, x.dtype());
  });
}

void conv2d_backward_im2col(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& db,
                            const ops::Conv2dParams& p) {
  const Geom g = make_geom(x, w, p);
  STRATA_DISPATCH_FLOAT16(x.dtype(), "conv2d_backward", [&] {
    conv_backward<scalar_t>(dy.data<scalar_t>(), x.data<scalar_t>(), w.data<scalar_t>(),
                            dx.data_or_null<scalar_t>(), dw.data<scalar_t>(),
                            db.data_or_null<scalar_t>(), g, x.dtype());
  });
}

ConvPath conv_path() {
  int v = g_conv_path.load(std::memory_order_relaxed);
  if (v < 0) {
    v = int(conv_path_from_env());
    g_conv_path.store(v);
  }
  return ConvPath(v);
}

void set_conv_path(ConvPath path) { g_conv_path.store(int(path)); }

// Measured on the Fashion-MNIST CNN's two layers, 3x3 stride 1 pad 1 (`strata bench conv`,
// docs/convolutions.md): oneDNN's blocked kernels beat the im2col kernel by
// 2.2-2.5x per pass on the 32->64 layer and 1.5-2.1x on the 1-channel first layer's
// weight gradient, at 1 and 2 threads; that layer's forward was slower on oneDNN in three
// of the four measurements (its output reorder). The rule keeps to what was measured:
// 3x3 stride-1 kernels whose output channels fill 16-wide blocks, with 16k input channels
// (both passes) or one (the backward). It does not depend on the thread count. Everything
// else runs the im2col kernel.
bool conv_auto_uses_dnnl(bool backward, const Tensor& x, const Tensor& w, const ops::Conv2dParams& p, int threads) {
  (void)threads;  // the same choice at 1 and 2 threads on the measured shapes
  const int64_t C = x.size(1), O = w.size(0);
  if (w.size(2) != 3 || w.size(3) != 3 || p.stride_h != 1 || p.stride_w != 1 || O % 16 != 0) return false;
  return C % 16 == 0 || (C == 1 && backward);
}

void conv2d_kernel(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y, const ops::Conv2dParams& p) {
  if (uses_dnnl(false, x, w, p) && dnnl_conv2d(x, w, b, y, p)) return;
  conv2d_im2col(x, w, b, y, p);
}

void conv2d_backward_kernel(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw,
                            Tensor& db, const ops::Conv2dParams& p) {
  if (uses_dnnl(true, x, w, p) && dnnl_conv2d_backward(dy, x, w, dx, dw, db, p)) return;
  conv2d_backward_im2col(dy, x, w, dx, dw, db, p);
}

}  // namespace strata::cpu
