// Front ends of the Llama kernels (RMSNorm, rotary embedding, SwiGLU): checks, output
// allocation, contiguous inputs, then dispatch to tensor/cpu/{rms_norm,rotary,swiglu} or
// their CUDA twins (tensor/cuda/norm.cu, llama_ops.cu; f32 and f64).
#include <strata/tensor/cpu/rms_norm.h>
#include <strata/tensor/cpu/rotary.h>
#include <strata/tensor/cpu/swiglu.h>
#include <strata/tensor/dispatch.h>
#include <strata/tensor/ops.h>
#include <strata/tensor/row_chunks.h>

namespace strata::ops {
namespace {

using RmsNormFn = void(const Tensor&, const Tensor&, Tensor&, Tensor&, int64_t, int64_t, double);
using RmsNormBwdFn = void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, int64_t,
                          int64_t);
using RmsNormBwdAddFn = void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&,
                             Tensor&, int64_t, int64_t);
using RotaryFn = void(const Tensor&, const Tensor&, const Tensor&, Tensor&, int64_t, int64_t, int64_t, int64_t, bool,
                      int64_t);
using SwigluFn = void(const Tensor&, const Tensor&, Tensor&, int64_t);
using SwigluBwdFn = void(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, int64_t);

const KernelTable<RmsNormFn> kRmsNorm{"rms_norm", {&cpu::rms_norm_kernel, nullptr}};
const KernelTable<RmsNormBwdFn> kRmsNormBwd{"rms_norm_backward", {&cpu::rms_norm_backward_kernel, nullptr}};
const KernelTable<RmsNormBwdAddFn> kRmsNormBwdAdd{"rms_norm_backward_add", {&cpu::rms_norm_backward_add_kernel, nullptr}};
const KernelTable<RotaryFn> kRotary{"rotary", {&cpu::rotary_kernel, nullptr}};
const KernelTable<SwigluFn> kSwiglu{"swiglu", {&cpu::swiglu_kernel, nullptr}};
const KernelTable<SwigluBwdFn> kSwigluBwd{"swiglu_backward", {&cpu::swiglu_backward_kernel, nullptr}};

bool is_float(DType dt) { return dt == DType::f32 || dt == DType::f64 || dt == DType::bf16 || dt == DType::f16; }

void check_input(const Tensor& t, const char* op, const char* what) {
  STRATA_CHECK(t.defined(), "[", op, "] ", what, " is undefined");
  STRATA_CHECK(is_float(t.dtype()), "[", op, "] ", what, " must be f32, f64, bf16 or f16, got ", t.str());
}

void check_like(const Tensor& a, const Tensor& b, const char* op, const char* what) {
  STRATA_CHECK(b.defined() && b.shape() == a.shape() && b.dtype() == a.dtype() && b.device() == a.device(), "[", op,
               "] ", what, " ", b.defined() ? b.str() : std::string("undefined"), " does not match ", a.str());
}

DType stat_dtype(DType dt) { return dt == DType::bf16 || dt == DType::f16 ? DType::f32 : dt; }

}  // namespace

std::pair<Tensor, Tensor> rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  check_input(x, "rms_norm", "input");
  STRATA_CHECK(x.dim() >= 1, "[rms_norm] input must be at least 1-d, got ", x.str());
  const int64_t C = x.size(-1), rows = C > 0 ? x.numel() / C : 0;
  if (weight.defined())
    STRATA_CHECK(weight.shape() == Shape{C} && weight.dtype() == x.dtype(), "[rms_norm] weight must be (", C, ") ",
                 dtype_name(x.dtype()), ", got ", weight.str());
  const Device d = x.device();
  Tensor y = empty(x.shape(), x.dtype(), d), rstd = empty({rows}, stat_dtype(x.dtype()), d);
  kRmsNorm(d)(contiguous(x), contig_or_undef(weight), y, rstd, rows, C, eps);
  return {y, rstd};
}

std::pair<Tensor, Tensor> rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& rstd,
                                            const Tensor& weight) {
  return rms_norm_backward_add(dy, x, rstd, weight, Tensor(), false);
}

std::pair<Tensor, Tensor> rms_norm_backward_add(const Tensor& dy, const Tensor& x, const Tensor& rstd,
                                                const Tensor& weight, const Tensor& pending, bool in_place) {
  const char* op = pending.defined() ? "rms_norm_backward_add" : "rms_norm_backward";
  check_input(x, op, "input");
  check_like(x, dy, op, "grad");
  const int64_t C = x.size(-1), rows = C > 0 ? x.numel() / C : 0;
  STRATA_CHECK(rstd.numel() == rows && rstd.dtype() == stat_dtype(x.dtype()), "[", op, "] rstd must be (", rows,
               ") ", dtype_name(stat_dtype(x.dtype())), ", got ", rstd.str());
  const Device d = x.device();
  if (pending.defined()) {
    check_like(x, pending, op, "pending gradient");
    STRATA_CHECK(!in_place || pending.is_contiguous(), "[", op, "] in place needs a contiguous gradient, got ",
                 pending.str());
  }
  Tensor dx = pending.defined() && in_place ? pending : empty(x.shape(), x.dtype(), d);
  Tensor dw = weight.defined() ? empty({C}, x.dtype(), d) : Tensor();
  const Tensor wc = contig_or_undef(weight);
  if (pending.defined())
    kRmsNormBwdAdd(d)(contiguous(dy), contiguous(x), contiguous(rstd), wc, contiguous(pending),
                      dx, dw, rows, C);
  else
    kRmsNormBwd(d)(contiguous(dy), contiguous(x), contiguous(rstd), wc, dx, dw, rows, C);
  return {dx, dw};
}

Tensor rotary(const Tensor& x, const Tensor& positions, const Tensor& inv_freq, bool inverse, int64_t rotated_heads) {
  check_input(x, "rotary", "input");
  STRATA_CHECK(x.dim() == 4 && x.size(3) % 2 == 0, "[rotary] expects x (B, T, H, hd) with hd even, got ", x.str());
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), hd = x.size(3);
  STRATA_CHECK(positions.defined() && positions.dtype() == DType::i64 && positions.shape() == Shape{T},
               "[rotary] positions must be (", T, ") i64, got ", positions.defined() ? positions.str() : "undefined");
  STRATA_CHECK(inv_freq.defined() && inv_freq.dtype() == DType::f64 && inv_freq.shape() == Shape{hd / 2},
               "[rotary] inv_freq must be (", hd / 2, ") f64, got ", inv_freq.defined() ? inv_freq.str() : "undefined");
  STRATA_CHECK(rotated_heads <= H, "[rotary] rotated_heads ", rotated_heads, " exceeds the ", H, " heads of ", x.str());
  const Device d = x.device();
  Tensor y = empty(x.shape(), x.dtype(), d);
  // The tables are read on the host side of the kernel's device (CPU tensors here).
  kRotary(d)(contiguous(x), contiguous(positions.to(d)), contiguous(inv_freq.to(d)), y, B, T, H, hd, inverse,
             rotated_heads < 0 ? H : rotated_heads);
  return y;
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  check_input(gate, "swiglu", "gate");
  check_like(gate, up, "swiglu", "up");
  Tensor y = empty(gate.shape(), gate.dtype(), gate.device());
  kSwiglu(gate.device())(contiguous(gate), contiguous(up), y, gate.numel());
  return y;
}

std::tuple<Tensor, Tensor, Tensor> linear_swiglu(const Tensor& x2, const Tensor& w1, const Tensor& w3) {
  STRATA_CHECK(x2.dim() == 2 && w1.dim() == 2 && w1.shape() == w3.shape() && x2.size(1) == w1.size(1),
               "[linear_swiglu] input ", x2.str(), " does not match the weights ", w1.str(), " and ", w3.str(),
               " (hidden, in) each");
  check_input(x2, "linear_swiglu", "input");
  const Device d = common_device("linear_swiglu", x2, w1, w3);
  const int64_t M = x2.size(0), F = w1.size(0);
  Tensor gate = empty({M, F}, x2.dtype(), d), up = empty({M, F}, x2.dtype(), d), h = empty({M, F}, x2.dtype(), d);
  const Tensor w1t = transpose(w1, 0, 1), w3t = transpose(w3, 0, 1);
  const RowChunks rc(M, 2 * F * int64_t(element_size(x2.dtype())), d.is_cpu());
  for (int64_t c = 0; c < rc.count(); ++c) {
    const int64_t r0 = rc.start(c), n = rc.size(c);
    const Tensor xc = narrow(x2, 0, r0, n);
    Tensor gc = narrow(gate, 0, r0, n), uc = narrow(up, 0, r0, n), hc = narrow(h, 0, r0, n);
    gemm_(gc, xc, w1t, 1.0, 0.0);
    gemm_(uc, xc, w3t, 1.0, 0.0);
    kSwiglu(d)(gc, uc, hc, gc.numel());
  }
  return {gate, up, h};
}

std::pair<Tensor, Tensor> swiglu_backward(const Tensor& dy, const Tensor& gate, const Tensor& up, bool overwrite_gate,
                                          bool overwrite_up) {
  check_input(gate, "swiglu_backward", "gate");
  check_like(gate, up, "swiglu_backward", "up");
  check_like(gate, dy, "swiglu_backward", "grad");
  const Device d = gate.device();
  // each element is read before it is written
  const auto out = [&](const Tensor& t, bool over) {
    return writes_over(t, over) ? t : empty(gate.shape(), gate.dtype(), d);
  };
  Tensor dg = out(gate, overwrite_gate), du = out(up, overwrite_up);
  kSwigluBwd(d)(contiguous(dy), contiguous(gate), contiguous(up), dg, du, gate.numel());
  return {dg, du};
}

}  // namespace strata::ops
