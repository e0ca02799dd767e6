// Batch norm front ends (plain, with the ReLU after it, and with a 2x2 max pool after
// that): checks, outputs, contiguous inputs, then the kernels of tensor/cpu/norm.h. Devices
// without the fused kernels run the plain batch norm and the separate ops.
#include <array>
#include <tuple>

#include <strata/tensor/cpu/norm.h>
#include <strata/tensor/dispatch.h>
#include <strata/tensor/op_checks.h>
#include <strata/tensor/ops.h>

namespace strata::ops {
namespace {

using detail::check_float16;
using detail::check_same;
using detail::check_vec;

using BatchNormFn = void(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&, Tensor&, Tensor&,
                         int64_t, int64_t, int64_t, bool, double, double);
using BatchNormBwdFn = void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&,
                            Tensor&, Tensor&, int64_t, int64_t, int64_t, bool);
using BatchNormReluBwdFn = void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                const Tensor&, Tensor&, Tensor&, Tensor&, int64_t, int64_t, int64_t, bool);
using BnReluPoolFn = void(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&, Tensor&, Tensor&,
                          Tensor&, int64_t, int64_t, int64_t, int64_t, bool, double, double);
using BnReluPoolBwdFn = void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                             const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&, int64_t, int64_t, int64_t,
                             int64_t, bool);

const KernelTable<BatchNormFn> kBatchNorm{"batch_norm", {&cpu::batch_norm_kernel, nullptr}};
const KernelTable<BatchNormBwdFn> kBatchNormBwd{"batch_norm_backward", {&cpu::batch_norm_backward_kernel, nullptr}};
// BatchNorm + ReLU in one pass; devices without these run the two ops.
const KernelTable<BatchNormFn> kBatchNormRelu{"batch_norm_relu", {&cpu::batch_norm_relu_kernel, nullptr}};
const KernelTable<BatchNormReluBwdFn> kBatchNormReluBwd{"batch_norm_relu_backward",
                                                        {&cpu::batch_norm_relu_backward_kernel, nullptr}};
// BatchNorm + ReLU + 2x2 max pool in one pass (CPU only: autograd composes the ops elsewhere).
const KernelTable<BnReluPoolFn> kBnReluPool{"batch_norm_relu_max_pool2",
                                            {&cpu::batch_norm_relu_max_pool2_kernel, nullptr}};
const KernelTable<BnReluPoolBwdFn> kBnReluPoolBwd{"batch_norm_relu_max_pool2_backward",
                                                  {&cpu::batch_norm_relu_max_pool2_backward_kernel, nullptr}};

// x (N,C,*) -> (N, C, S)
std::tuple<int64_t, int64_t, int64_t> nc_s(const Tensor& x, const char* op) {
  STRATA_CHECK(x.dim() >= 2, "[", op, "] expects (N,C) or (N,C,H,W) input, got ", shape_str(x.shape()));
  int64_t S = 1;
  for (int64_t i = 2; i < x.dim(); ++i) S *= x.size(i);
  return {x.size(0), x.size(1), S};
}

// The input of the pooled op: (N, C, H, W) with a whole 2x2 window, H, W >= 2.
std::array<int64_t, 4> nchw_pooled(const Tensor& x, const char* op) {
  check_float16(x, op, "input");
  STRATA_CHECK(x.dim() == 4 && x.size(2) >= 2 && x.size(3) >= 2, "[", op, "] expects (N, C, H, W) with H, W >= 2, got ",
               shape_str(x.shape()));
  return {x.size(0), x.size(1), x.size(2), x.size(3)};
}

// A batch norm's affine parameters and running statistics for x's C channels.
void check_bn_params(const Tensor& x, int64_t C, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                     const Tensor& running_var, bool training, const char* op) {
  check_vec(weight, C, x.dtype(), op, "weight");
  check_vec(bias, C, x.dtype(), op, "bias");
  check_vec(running_mean, C, x.dtype(), op, "running_mean");
  check_vec(running_var, C, x.dtype(), op, "running_var");
  STRATA_CHECK(running_mean.defined() == running_var.defined(), "[", op,
               "] running_mean and running_var must both be defined or both undefined");
  for (const Tensor* r : {&running_mean, &running_var})
    STRATA_CHECK(!r->defined() || r->is_contiguous(), "[", op, "] running statistics must be contiguous");
  STRATA_CHECK(training || running_mean.defined(), "[", op, "] eval mode needs running_mean and running_var");
}

// A backward's weight and the statistics its forward saved, for x's C channels.
void check_bn_saved(const Tensor& x, int64_t C, const Tensor& weight, const Tensor& save_mean,
                    const Tensor& save_invstd, const char* op) {
  check_vec(weight, C, x.dtype(), op, "weight");
  check_vec(save_mean, C, x.dtype(), op, "save_mean");
  check_vec(save_invstd, C, x.dtype(), op, "save_invstd");
}

// A training forward updated the running statistics in place.
void bump_running(bool training, Tensor& running_mean, Tensor& running_var) {
  if (!training || !running_mean.defined()) return;
  running_mean.bump_version();
  running_var.bump_version();
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                              Tensor& running_mean, Tensor& running_var, bool training,
                                              double momentum, double eps, bool relu) {
  check_float16(x, "batch_norm", "input");
  const auto [N, C, S] = nc_s(x, "batch_norm");
  check_bn_params(x, C, weight, bias, running_mean, running_var, training, "batch_norm");
  STRATA_CHECK(!training || N * S > 1, "[batch_norm] expected more than 1 value per channel when training, got input ",
               shape_str(x.shape()));
  const Device d = x.device();
  const bool fused = relu && kBatchNormRelu.find(d);
  Tensor y = empty(x.shape(), x.dtype(), d);
  Tensor save_mean = empty({C}, x.dtype(), d), save_invstd = empty({C}, x.dtype(), d);
  (fused ? kBatchNormRelu : kBatchNorm)(d)(contiguous(x), contig_or_undef(weight), contig_or_undef(bias), running_mean,
                                           running_var, y, save_mean, save_invstd, N, C, S, training, momentum, eps);
  bump_running(training, running_mean, running_var);
  if (relu && !fused) y = unary(UnaryOp::relu, y);
  return {y, save_mean, save_invstd};
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                                       const Tensor& save_mean, const Tensor& save_invstd,
                                                       bool training, const Tensor& relu_out) {
  check_float16(x, "batch_norm_backward", "input");
  check_same(x, dy, "batch_norm_backward", "grad");
  if (relu_out.defined()) check_same(x, relu_out, "batch_norm_backward", "relu output");
  const auto [N, C, S] = nc_s(x, "batch_norm_backward");
  check_bn_saved(x, C, weight, save_mean, save_invstd, "batch_norm_backward");
  const Device d = x.device();
  Tensor dx = empty(x.shape(), x.dtype(), d);
  Tensor dw = empty({C}, x.dtype(), d), db = empty({C}, x.dtype(), d);
  if (relu_out.defined() && kBatchNormReluBwd.find(d)) {
    kBatchNormReluBwd(d)(contiguous(dy), contiguous(relu_out), contiguous(x), contig_or_undef(weight),
                         contiguous(save_mean), contiguous(save_invstd), dx, dw, db, N, C, S, training);
    return {dx, dw, db};
  }
  const Tensor g = relu_out.defined() ? relu_backward(dy, relu_out) : dy;
  kBatchNormBwd(d)(contiguous(g), contiguous(x), contig_or_undef(weight), contiguous(save_mean),
                   contiguous(save_invstd), dx, dw, db, N, C, S, training);
  return {dx, dw, db};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> batch_norm_relu_max_pool2(const Tensor& x, const Tensor& weight,
                                                                     const Tensor& bias, Tensor& running_mean,
                                                                     Tensor& running_var, bool training,
                                                                     double momentum, double eps) {
  const char* op = "batch_norm_relu_max_pool2";
  const auto [N, C, H, W] = nchw_pooled(x, op);
  check_bn_params(x, C, weight, bias, running_mean, running_var, training, op);
  const Device d = x.device();
  Tensor p = empty({N, C, H / 2, W / 2}, x.dtype(), d), win = empty({N, C, H / 2, W / 2}, DType::u8, d);
  Tensor save_mean = empty({C}, x.dtype(), d), save_invstd = empty({C}, x.dtype(), d);
  kBnReluPool(d)(contiguous(x), contig_or_undef(weight), contig_or_undef(bias), running_mean, running_var, p, win,
                 save_mean, save_invstd, N, C, H, W, training, momentum, eps);
  bump_running(training, running_mean, running_var);
  return {p, win, save_mean, save_invstd};
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_relu_max_pool2_backward(const Tensor& dp, const Tensor& p,
                                                                       const Tensor& win, const Tensor& x,
                                                                       const Tensor& weight, const Tensor& save_mean,
                                                                       const Tensor& save_invstd, bool training) {
  const char* op = "batch_norm_relu_max_pool2_backward";
  const auto [N, C, H, W] = nchw_pooled(x, op);
  const Shape ps{N, C, H / 2, W / 2};
  check_same(p, dp, op, "grad");
  STRATA_CHECK(p.shape() == ps && win.shape() == ps && win.dtype() == DType::u8 && p.dtype() == x.dtype(), "[", op,
               "] p and win must be ", shape_str(ps), " (", dtype_name(x.dtype()), ", u8), got ", p.str(), ", ",
               win.str());
  check_bn_saved(x, C, weight, save_mean, save_invstd, op);
  const Device d = x.device();
  Tensor dx = empty(x.shape(), x.dtype(), d);
  Tensor dw = empty({C}, x.dtype(), d), db = empty({C}, x.dtype(), d);
  kBnReluPoolBwd(d)(contiguous(dp), contiguous(p), contiguous(win), contiguous(x), contig_or_undef(weight),
                    contiguous(save_mean), contiguous(save_invstd), dx, dw, db, N, C, H, W, training);
  return {dx, dw, db};
}

}  // namespace strata::ops
