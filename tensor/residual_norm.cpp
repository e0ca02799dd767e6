// Front ends of the fused residual add + LayerNorm (tensor/cpu/residual_norm.h): checks,
// outputs, then the kernel for the device (CPU: every float dtype; CUDA:
// tensor/cuda/residual_norm.cu, f32, f64, bf16 and f16).
#include <strata/tensor/cpu/residual_norm.h>
#include <strata/tensor/dispatch.h>
#include <strata/tensor/ops.h>

namespace strata::ops {
namespace {

using ResidualNormFn = void(Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&,
                            Tensor&, int64_t, int64_t, double);
using NormBwdAddFn = void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          Tensor&, Tensor&, Tensor&, int64_t, int64_t);
const KernelTable<ResidualNormFn> kResidualNorm{"bias_residual_layer_norm_",
                                                {&cpu::bias_residual_layer_norm_kernel, nullptr}};
const KernelTable<NormBwdAddFn> kNormBwdAdd{"layer_norm_backward_add",
                                            {&cpu::layer_norm_backward_add_kernel, nullptr}};

bool is_float(DType dt) { return dt == DType::f32 || dt == DType::f64 || dt == DType::bf16 || dt == DType::f16; }
DType stat_dtype(DType dt) { return dt == DType::bf16 || dt == DType::f16 ? DType::f32 : dt; }

// A (C) vector in dtype dt on device d, or undefined.
void check_vec(const char* op, const char* what, const Tensor& v, int64_t C, DType dt, Device d) {
  if (!v.defined()) return;
  STRATA_CHECK(v.shape() == Shape{C}, "[", op, "] ", what, " must have shape (", C, "), got ", shape_str(v.shape()));
  STRATA_CHECK(v.dtype() == dt, "[", op, "] ", what, " dtype ", dtype_name(v.dtype()), " does not match input ",
               dtype_name(dt));
  STRATA_CHECK(v.device() == d, "[", op, "] ", what, " is on ", v.device().str(), ", the input on ", d.str());
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> bias_residual_layer_norm_(Tensor& y, const Tensor& b, const Tensor& r,
                                                             const Tensor& weight, const Tensor& bias, double eps) {
  constexpr const char* op = "bias_residual_layer_norm_";
  STRATA_CHECK(y.defined() && y.dim() >= 1 && is_float(y.dtype()), "[", op,
               "] y must be a float tensor of at least 1 dim, got ", y.defined() ? y.str() : std::string("undefined"));
  STRATA_CHECK(y.is_contiguous(), "[", op, "] y must be contiguous (it is written in place), got ", y.str());
  STRATA_CHECK(r.defined() && r.numel() == y.numel() && r.size(-1) == y.size(-1) && r.dtype() == y.dtype(), "[", op,
               "] residual ", r.defined() ? r.str() : std::string("undefined"), " does not match y ", y.str(),
               " (same rows, columns and dtype)");
  const Device d = common_device(op, y, r);
  const int64_t C = y.size(-1), rows = C > 0 ? y.numel() / C : 0;
  check_vec(op, "bias", b, C, y.dtype(), d);
  check_vec(op, "weight", weight, C, y.dtype(), d);
  check_vec(op, "norm bias", bias, C, y.dtype(), d);
  Tensor z = empty(y.shape(), y.dtype(), d);
  const DType sdt = stat_dtype(y.dtype());
  Tensor mean = empty({rows}, sdt, d), rstd = empty({rows}, sdt, d);
  kResidualNorm(d)(y, contig_or_undef(b), contiguous(r), contig_or_undef(weight), contig_or_undef(bias), z, mean,
                   rstd, rows, C, eps);
  return {z, mean, rstd};
}

std::tuple<Tensor, Tensor, Tensor> layer_norm_backward_add(const Tensor& dz, const Tensor& s, const Tensor& mean,
                                                           const Tensor& rstd, const Tensor& weight, bool has_bias,
                                                           const Tensor& g, bool in_place) {
  constexpr const char* op = "layer_norm_backward_add";
  if (!g.defined()) return layer_norm_backward(dz, s, mean, rstd, weight, has_bias);
  STRATA_CHECK(s.defined() && s.dim() >= 1 && is_float(s.dtype()), "[", op, "] input must be a float tensor, got ",
               s.defined() ? s.str() : std::string("undefined"));
  for (const Tensor* t : {&dz, &g})
    STRATA_CHECK(t->defined() && t->shape() == s.shape() && t->dtype() == s.dtype(), "[", op, "] gradient ",
                 t->defined() ? t->str() : std::string("undefined"), " does not match the input ", s.str());
  const Device d = common_device(op, s, dz, g, mean, rstd);
  const int64_t C = s.size(-1), rows = C > 0 ? s.numel() / C : 0;
  STRATA_CHECK(mean.dtype() == stat_dtype(s.dtype()) && rstd.dtype() == mean.dtype() && mean.numel() == rows &&
                   rstd.numel() == rows,
               "[", op, "] mean/rstd must be ", rows, " elements of ", dtype_name(stat_dtype(s.dtype())), ", got ",
               mean.str(), " and ", rstd.str());
  check_vec(op, "weight", weight, C, s.dtype(), d);
  STRATA_CHECK(!in_place || g.is_contiguous(), "[", op, "] in place needs a contiguous gradient, got ", g.str());
  Tensor ds = in_place ? g : empty(s.shape(), s.dtype(), d);
  Tensor dw = weight.defined() ? empty({C}, s.dtype(), d) : Tensor();
  Tensor db = has_bias ? empty({C}, s.dtype(), d) : Tensor();
  kNormBwdAdd(d)(contiguous(dz), contiguous(s), contiguous(mean), contiguous(rstd), contig_or_undef(weight),
                 contiguous(g), ds, dw, db, rows, C);
  return {ds, dw, db};
}

}  // namespace strata::ops
