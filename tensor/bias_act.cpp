// Front ends of the fused bias + GELU and bias + residual ops (tensor/cpu/bias_act.h):
// checks, outputs, then the kernel for the device (CPU: every float dtype; CUDA:
// tensor/cuda/bias_act.cu, f32, f64, bf16 and f16).
#include <strata/tensor/cpu/bias_act.h>
#include <strata/tensor/dispatch.h>
#include <strata/tensor/ops.h>
#include <strata/tensor/row_chunks.h>

namespace strata::ops {
namespace {

using BiasGeluFn = void(const Tensor&, const Tensor&, Tensor&, bool);
using BiasGeluBwdFn = void(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, bool);
const KernelTable<BiasGeluFn> kBiasGelu{"bias_gelu", {&cpu::bias_gelu_kernel, nullptr}};
const KernelTable<BiasGeluBwdFn> kBiasGeluBwd{"bias_gelu_backward", {&cpu::bias_gelu_backward_kernel, nullptr}};
using BiasResidualFn = void(Tensor&, const Tensor&, const Tensor&);
const KernelTable<BiasResidualFn> kBiasResidual{"bias_residual_", {&cpu::bias_residual_kernel, nullptr}};

void check_rows(const char* op, const Tensor& y, const Tensor& b) {
  STRATA_CHECK(y.defined() && y.dim() >= 1, "[", op, "] input must be a defined tensor of at least 1 dim");
  if (!b.defined()) return;
  STRATA_CHECK(b.shape() == Shape{y.size(-1)}, "[", op, "] bias must have shape (", y.size(-1), "), got ",
               shape_str(b.shape()));
  STRATA_CHECK(b.dtype() == y.dtype(), "[", op, "] bias dtype ", dtype_name(b.dtype()), " does not match input ",
               dtype_name(y.dtype()));
}

}  // namespace

Tensor bias_gelu(const Tensor& y, const Tensor& b, bool tanh_approx) {
  check_rows("bias_gelu", y, b);
  const Device d = b.defined() ? common_device("bias_gelu", y, b) : y.device();
  Tensor out = empty(y.shape(), y.dtype(), d);
  kBiasGelu(d)(contiguous(y), contig_or_undef(b), out, tanh_approx);
  return out;
}

std::pair<Tensor, Tensor> linear_bias_gelu(const Tensor& x2, const Tensor& w, const Tensor& b, bool tanh_approx) {
  STRATA_CHECK(x2.dim() == 2 && w.dim() == 2 && x2.size(1) == w.size(1), "[linear_bias_gelu] input ", x2.str(),
               " does not match weight ", w.str(), " (out, in)");
  const int64_t M = x2.size(0), outf = w.size(0);
  const Device d = common_device("linear_bias_gelu", x2, w);
  Tensor y = empty({M, outf}, x2.dtype(), d), out = empty({M, outf}, x2.dtype(), d);
  check_rows("linear_bias_gelu", y, b);
  if (b.defined()) (void)common_device("linear_bias_gelu", y, b);
  const Tensor wt = transpose(w, 0, 1), bias = contig_or_undef(b);
  const RowChunks rc(M, outf * int64_t(element_size(y.dtype())), d.is_cpu());
  for (int64_t c = 0; c < rc.count(); ++c) {
    Tensor yc = narrow(y, 0, rc.start(c), rc.size(c)), oc = narrow(out, 0, rc.start(c), rc.size(c));
    gemm_(yc, narrow(x2, 0, rc.start(c), rc.size(c)), wt, 1.0, 0.0);  // no bias
    kBiasGelu(d)(yc, bias, oc, tanh_approx);
  }
  return {y, out};
}

std::pair<Tensor, Tensor> bias_gelu_backward(const Tensor& dout, const Tensor& y, const Tensor& b, bool tanh_approx,
                                             bool need_bias_grad, bool overwrite_y) {
  check_rows("bias_gelu_backward", y, b);
  STRATA_CHECK(dout.defined() && dout.shape() == y.shape() && dout.dtype() == y.dtype(), "[bias_gelu_backward] grad ",
               dout.defined() ? dout.str() : std::string("undefined"), " does not match input ", y.str());
  const Device d = common_device("bias_gelu_backward", dout, y);
  Tensor dh = writes_over(y, overwrite_y) ? y : empty(y.shape(), y.dtype(), d);
  Tensor db = need_bias_grad ? empty({y.size(-1)}, y.dtype(), d) : Tensor();
  kBiasGeluBwd(d)(contiguous(dout), contiguous(y), contig_or_undef(b), dh, db, tanh_approx);
  return {dh, db};
}

void bias_residual_(Tensor& y, const Tensor& b, const Tensor& r) {
  check_rows("bias_residual_", y, b);
  STRATA_CHECK(y.is_contiguous(), "[bias_residual_] y must be contiguous (it is written in place), got ", y.str());
  STRATA_CHECK(r.defined() && r.numel() == y.numel() && r.size(-1) == y.size(-1) && r.dtype() == y.dtype(),
               "[bias_residual_] residual ", r.defined() ? r.str() : std::string("undefined"),
               " does not match y ", y.str(), " (same rows, columns and dtype)");
  const Device d = common_device("bias_residual_", y, r);
  if (b.defined()) (void)common_device("bias_residual_", y, b);
  kBiasResidual(d)(y, contig_or_undef(b), contiguous(r));
}

}  // namespace strata::ops
