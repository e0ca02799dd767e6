// Front ends of the fused bias + GELU and bias + residual ops (tensor/cpu/bias_act.h):
// checks, outputs, then the kernel for the device (CPU: every float dtype; CUDA:
// tensor/cuda/bias_act.cu, f32, f64, bf16 and f16).
#include <strata/tensor/cpu/bias_act.h>
#include <strata/tensor/dispatch.h>
#include <strata/tensor/ops.h>

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
