// CUDA elementwise kernels: one grid-stride kernel per (operand count, dtype), the op a
// runtime argument evaluated by the formulas in tensor/cuda/op_math.h, operands
// addressed through a coalesced OffsetCalc (contiguous tensors take the flat path).
// f16/bf16 tensors are widened to f32 per element and rounded once on store (widen.h),
// as the CPU's kernels.
#include <strata/tensor/cuda/indexing.h>
#include <strata/tensor/cuda/kernels.h>
#include <strata/tensor/cuda/launch.h>
#include <strata/tensor/cuda/op_math.h>
#include <strata/tensor/cuda/widen.h>
#include <strata/tensor/dispatch.h>

namespace strata::cuda {
namespace {

using ops::BinaryOp;
using ops::CompareOp;
using ops::UnaryOp;

std::vector<int64_t> bstrides(const Tensor& t, const Shape& shape) {
  return broadcast_strides(t.shape(), t.strides(), shape);
}

// S: the storage type; the op is evaluated in acc_t<S> (f32 for f16/bf16).
template <class S>
__global__ void binary_k(int64_t n, OffsetCalc<3> oc, BinaryOp op, S* o, const S* a, const S* b) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t off[3];
    oc.get(i, off);
    o[off[0]] = st<S>(apply_binary(op, ld(a[off[1]]), ld(b[off[2]])));
  }
}

template <class S>
__global__ void binary_scalar_k(int64_t n, OffsetCalc<2> oc, ScalarOp<acc_t<S>> f, S* o, const S* a) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t off[2];
    oc.get(i, off);
    o[off[0]] = st<S>(f(ld(a[off[1]])));
  }
}

template <class S>
__global__ void compare_k(int64_t n, OffsetCalc<3> oc, CompareOp op, uint8_t* o, const S* a, const S* b) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t off[3];
    oc.get(i, off);
    o[off[0]] = apply_compare(op, ld(a[off[1]]), ld(b[off[2]]));
  }
}

template <class S>
__global__ void compare_scalar_k(int64_t n, OffsetCalc<2> oc, CompareOp op, uint8_t* o, const S* a, double s) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t off[2];
    oc.get(i, off);
    o[off[0]] = apply_compare_scalar(op, ld(a[off[1]]), s);
  }
}

template <class S>
__global__ void unary_k(int64_t n, OffsetCalc<2> oc, UnaryOp op, S* o, const S* a) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t off[2];
    oc.get(i, off);
    o[off[0]] = st<S>(apply_unary(op, ld(a[off[1]])));
  }
}

// Selections copy elements (16-bit ones bit for bit).
template <class T>
__global__ void where_k(int64_t n, OffsetCalc<4> oc, T* o, const uint8_t* c, const T* a, const T* b) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t off[4];
    oc.get(i, off);
    o[off[0]] = c[off[1]] ? a[off[2]] : b[off[3]];
  }
}

template <class T>
__global__ void masked_fill_k(int64_t n, OffsetCalc<3> oc, T* o, const T* t, const uint8_t* m, T v) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t off[3];
    oc.get(i, off);
    o[off[0]] = m[off[2]] ? v : t[off[1]];
  }
}

template <class S>
__global__ void act_grad_k(int64_t n, OffsetCalc<3> oc, ActKind kind, S* o, const S* g, const S* x) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t off[3];
    oc.get(i, off);
    o[off[0]] = st<S>(apply_act_grad(kind, ld(g[off[1]]), ld(x[off[2]])));
  }
}

// dst += alpha * src (alpha == 1: dst += src, as the CPU's contiguous path), in acc_t<S>
template <class S, class A = acc_t<S>>
__global__ void add_k(int64_t n, OffsetCalc<2> oc, S* d, const S* s, A alpha, bool unit) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t off[2];
    oc.get(i, off);
    const A dv = ld(d[off[0]]), sv = ld(s[off[1]]);
    d[off[0]] = st<S>(unit ? A(dv + sv) : A(dv + alpha * sv));
  }
}

template <class S, class A = acc_t<S>>
__global__ void scale_k(int64_t n, OffsetCalc<1> oc, S* t, A s) {
  for (int64_t i = global_index(); i < n; i += grid_stride()) {
    int64_t off[1];
    oc.get(i, off);
    t[off[0]] = st<S>(A(ld(t[off[0]]) * s));
  }
}

static_assert(int(cpu::ActGrad::gelu) == int(ActKind::gelu) && int(cpu::ActGrad::gelu_tanh) == int(ActKind::gelu_tanh) &&
                  int(cpu::ActGrad::relu) == int(ActKind::relu) && int(cpu::ActGrad::tanh) == int(ActKind::tanh) &&
                  int(cpu::ActGrad::sigmoid) == int(ActKind::sigmoid),
              "ActKind must mirror cpu::ActGrad");

void check_float_op(BinaryOp op, DType dt) {
  if ((op == BinaryOp::div || op == BinaryOp::pow) &&
      !(dt == DType::f32 || dt == DType::f64 || dt == DType::bf16 || dt == DType::f16))
    STRATA_THROW(Error, "[binary] div and pow need a floating dtype, got ", dtype_name(dt));
}

}  // namespace

void binary_kernel(BinaryOp op, Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t n = out.numel();
  check_float_op(op, out.dtype());
  if (n == 0) return;
  OpContext ctx(out);
  const Shape& s = out.shape();
  const auto oc = make_offset_calc<3>(s, {out.strides(), bstrides(a, s), bstrides(b, s)}, "binary");
  STRATA_DISPATCH_ALL16(out.dtype(), "binary", [&] {
    binary_k<scalar_t><<<grid_for(n), kThreads, 0, ctx.stream>>>(n, oc, op, dptr<scalar_t>(out), dptr<scalar_t>(a),
                                                                  dptr<scalar_t>(b));
  });
  STRATA_CUDA_CHECK_LAUNCH("binary");
}

void binary_scalar_kernel(BinaryOp op, Tensor& out, const Tensor& a, double s, bool scalar_first) {
  const int64_t n = out.numel();
  check_float_op(op, out.dtype());
  if (n == 0) return;
  OpContext ctx(out);
  const auto oc = make_offset_calc<2>(out.shape(), {out.strides(), bstrides(a, out.shape())}, "binary_scalar");
  STRATA_DISPATCH_ALL16(out.dtype(), "binary_scalar", [&] {
    binary_scalar_k<scalar_t><<<grid_for(n), kThreads, 0, ctx.stream>>>(
        n, oc, make_scalar_op<acc_t<scalar_t>>(op, s, scalar_first), dptr<scalar_t>(out), dptr<scalar_t>(a));
  });
  STRATA_CUDA_CHECK_LAUNCH("binary_scalar");
}

void compare_kernel(CompareOp op, Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t n = out.numel();
  if (n == 0) return;
  OpContext ctx(out);
  const Shape& s = out.shape();
  const auto oc = make_offset_calc<3>(s, {out.strides(), bstrides(a, s), bstrides(b, s)}, "compare");
  STRATA_DISPATCH_ALL16(a.dtype(), "compare", [&] {
    compare_k<scalar_t><<<grid_for(n), kThreads, 0, ctx.stream>>>(n, oc, op, dptr<uint8_t>(out), dptr<scalar_t>(a),
                                                                   dptr<scalar_t>(b));
  });
  STRATA_CUDA_CHECK_LAUNCH("compare");
}

void compare_scalar_kernel(CompareOp op, Tensor& out, const Tensor& a, double s) {
  const int64_t n = out.numel();
  if (n == 0) return;
  OpContext ctx(out);
  const auto oc = make_offset_calc<2>(out.shape(), {out.strides(), bstrides(a, out.shape())}, "compare_scalar");
  STRATA_DISPATCH_ALL16(a.dtype(), "compare_scalar", [&] {
    compare_scalar_k<scalar_t><<<grid_for(n), kThreads, 0, ctx.stream>>>(n, oc, op, dptr<uint8_t>(out),
                                                                          dptr<scalar_t>(a), s);
  });
  STRATA_CUDA_CHECK_LAUNCH("compare_scalar");
}

void unary_kernel(UnaryOp op, Tensor& out, const Tensor& a) {
  const int64_t n = out.numel();
  if (n == 0) return;
  OpContext ctx(out);
  const auto oc = make_offset_calc<2>(out.shape(), {out.strides(), bstrides(a, out.shape())}, "unary");
  STRATA_DISPATCH_FLOAT16(out.dtype(), "unary", [&] {
    unary_k<scalar_t><<<grid_for(n), kThreads, 0, ctx.stream>>>(n, oc, op, dptr<scalar_t>(out), dptr<scalar_t>(a));
  });
  STRATA_CUDA_CHECK_LAUNCH("unary");
}

void where_kernel(Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  const int64_t n = out.numel();
  if (n == 0) return;
  OpContext ctx(out);
  const Shape& s = out.shape();
  const auto oc = make_offset_calc<4>(s, {out.strides(), bstrides(cond, s), bstrides(a, s), bstrides(b, s)}, "where");
  STRATA_DISPATCH_ALL16(out.dtype(), "where", [&] {
    where_k<scalar_t><<<grid_for(n), kThreads, 0, ctx.stream>>>(n, oc, dptr<scalar_t>(out), dptr<uint8_t>(cond),
                                                                 dptr<scalar_t>(a), dptr<scalar_t>(b));
  });
  STRATA_CUDA_CHECK_LAUNCH("where");
}

void masked_fill_kernel(Tensor& out, const Tensor& t, const Tensor& mask, double value) {
  const int64_t n = out.numel();
  if (n == 0) return;
  OpContext ctx(out);
  const Shape& s = out.shape();
  const auto oc = make_offset_calc<3>(s, {out.strides(), bstrides(t, s), bstrides(mask, s)}, "masked_fill");
  STRATA_DISPATCH_ALL16(out.dtype(), "masked_fill", [&] {
    const scalar_t v = st<scalar_t>(static_cast<acc_t<scalar_t>>(value));  // the CPU's A(value), rounded
    masked_fill_k<scalar_t><<<grid_for(n), kThreads, 0, ctx.stream>>>(n, oc, dptr<scalar_t>(out), dptr<scalar_t>(t),
                                                                        dptr<uint8_t>(mask), v);
  });
  STRATA_CUDA_CHECK_LAUNCH("masked_fill");
}

void act_grad_kernel(cpu::ActGrad kind, Tensor& out, const Tensor& grad, const Tensor& x) {
  const int64_t n = out.numel();
  if (n == 0) return;
  OpContext ctx(out);
  const Shape& s = out.shape();
  const auto oc = make_offset_calc<3>(s, {out.strides(), bstrides(grad, s), bstrides(x, s)}, "activation_backward");
  STRATA_DISPATCH_FLOAT16(out.dtype(), "activation_backward", [&] {
    act_grad_k<scalar_t><<<grid_for(n), kThreads, 0, ctx.stream>>>(n, oc, ActKind(int(kind)), dptr<scalar_t>(out),
                                                                    dptr<scalar_t>(grad), dptr<scalar_t>(x));
  });
  STRATA_CUDA_CHECK_LAUNCH("activation_backward");
}

void add_kernel(Tensor& dst, const Tensor& src, double alpha) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  OpContext ctx(dst);
  const auto oc = make_offset_calc<2>(dst.shape(), {dst.strides(), bstrides(src, dst.shape())}, "add_");
  STRATA_DISPATCH_ALL16(dst.dtype(), "add_", [&] {
    add_k<scalar_t><<<grid_for(n), kThreads, 0, ctx.stream>>>(n, oc, dptr<scalar_t>(dst), dptr<scalar_t>(src),
                                                               static_cast<acc_t<scalar_t>>(alpha), alpha == 1.0);
  });
  STRATA_CUDA_CHECK_LAUNCH("add_");
}

void scale_kernel(Tensor& t, double s) {
  const int64_t n = t.numel();
  if (n == 0) return;
  OpContext ctx(t);
  const auto oc = make_offset_calc<1>(t.shape(), {t.strides()}, "mul_");
  STRATA_DISPATCH_ALL16(t.dtype(), "mul_", [&] {
    scale_k<scalar_t><<<grid_for(n), kThreads, 0, ctx.stream>>>(n, oc, dptr<scalar_t>(t),
                                                                 static_cast<acc_t<scalar_t>>(s));
  });
  STRATA_CUDA_CHECK_LAUNCH("mul_");
}

}  // namespace strata::cuda
