// Optimizer kernel front ends: in-place fused Adam/AdamW and SGD updates.
#include <strata/tensor/cpu/optim.h>
#include <strata/tensor/dispatch.h>
#include <strata/tensor/half_ops.h>
#include <strata/tensor/ops.h>

namespace strata::ops {
namespace {

using AdamFn = void(Tensor&, const Tensor&, Tensor&, Tensor&, const AdamParams&);
using SgdFn = void(Tensor&, const Tensor&, Tensor&, const SgdParams&);
const KernelTable<AdamFn> kAdam{"adam_step_", {&cpu::adam_kernel, nullptr}};
const KernelTable<SgdFn> kSgd{"sgd_step_", {&cpu::sgd_kernel, nullptr}};
using AdamMixedFn = void(Tensor&, Tensor&, const Tensor&, Tensor&, Tensor&, const AdamParams&);
using SgdMixedFn = void(Tensor&, Tensor&, const Tensor&, Tensor&, const SgdParams&);
const KernelTable<AdamMixedFn> kAdamMixed{"adam_step_mixed_", {&cpu::adam_mixed_kernel, nullptr}};
const KernelTable<SgdMixedFn> kSgdMixed{"sgd_step_mixed_", {&cpu::sgd_mixed_kernel, nullptr}};

// master f32, param16 bf16/f16 of its shape, grad of param16's dtype or f32; all contiguous.
void check_mixed(const Tensor& master, const Tensor& param16, const Tensor& grad, const char* op) {
  STRATA_CHECK(master.defined() && master.dtype() == DType::f32 && master.is_contiguous(), "[", op,
               "] master must be contiguous f32, got ", master.defined() ? master.str() : "undefined");
  STRATA_CHECK(param16.defined() && (param16.dtype() == DType::bf16 || param16.dtype() == DType::f16) &&
                   param16.shape() == master.shape() && param16.is_contiguous(),
               "[", op, "] param16 must be a contiguous bf16/f16 tensor shaped like master ", master.str(), ", got ",
               param16.defined() ? param16.str() : "undefined");
  STRATA_CHECK(grad.defined() && (grad.dtype() == param16.dtype() || grad.dtype() == DType::f32) &&
                   grad.shape() == master.shape() && grad.is_contiguous(),
               "[", op, "] grad must be contiguous ", dtype_name(param16.dtype()), " or f32 shaped like master ",
               master.str(), ", got ", grad.defined() ? grad.str() : "undefined");
}

void check_state(const Tensor& param, const Tensor& t, const char* op, const char* what) {
  STRATA_CHECK(t.defined(), "[", op, "] ", what, " is undefined");
  STRATA_CHECK(t.shape() == param.shape() && t.dtype() == param.dtype(), "[", op, "] ", what, " ", t.str(),
               " does not match param ", param.str());
  STRATA_CHECK(t.is_contiguous(), "[", op, "] ", what, " must be contiguous");
}

}  // namespace

void adam_step_(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamParams& p) {
  STRATA_CHECK(param.dtype() == DType::f32 || param.dtype() == DType::f64, "[adam_step_] param must be f32 or f64, got ",
               param.str());
  check_state(param, param, "adam_step_", "param");
  check_state(param, grad, "adam_step_", "grad");
  check_state(param, m, "adam_step_", "m");
  check_state(param, v, "adam_step_", "v");
  STRATA_CHECK(p.step >= 1, "[adam_step_] step is 1-based, got ", p.step);
  const Device d = common_device("adam_step_", param, grad, m, v);
  kAdam(d)(param, grad, m, v, p);
  param.bump_version();
  m.bump_version();
  v.bump_version();
}

void sgd_step_(Tensor& param, const Tensor& grad, Tensor& buf, const SgdParams& p) {
  STRATA_CHECK(param.dtype() == DType::f32 || param.dtype() == DType::f64, "[sgd_step_] param must be f32 or f64, got ",
               param.str());
  check_state(param, param, "sgd_step_", "param");
  check_state(param, grad, "sgd_step_", "grad");
  STRATA_CHECK(!p.nesterov || (p.momentum > 0 && p.dampening == 0),
               "[sgd_step_] nesterov needs momentum > 0 and dampening 0, got momentum ", p.momentum, " dampening ",
               p.dampening);
  if (p.momentum != 0) {
    check_state(param, buf, "sgd_step_", "momentum buffer");
    common_device("sgd_step_", param, grad, buf);
  } else {
    common_device("sgd_step_", param, grad);
  }
  kSgd(param.device())(param, grad, buf, p);
  param.bump_version();
  if (p.momentum != 0) buf.bump_version();
}

void adam_step_mixed_(Tensor& master, Tensor& param16, const Tensor& grad, Tensor& m, Tensor& v,
                      const AdamParams& p) {
  check_mixed(master, param16, grad, "adam_step_mixed_");
  check_state(master, m, "adam_step_mixed_", "m");
  check_state(master, v, "adam_step_mixed_", "v");
  STRATA_CHECK(p.step >= 1, "[adam_step_mixed_] step is 1-based, got ", p.step);
  const Device d = common_device("adam_step_mixed_", master, param16, grad, m, v);
  kAdamMixed(d)(master, param16, grad, m, v, p);
  master.bump_version();
  param16.bump_version();
  m.bump_version();
  v.bump_version();
}

void sgd_step_mixed_(Tensor& master, Tensor& param16, const Tensor& grad, Tensor& buf, const SgdParams& p) {
  check_mixed(master, param16, grad, "sgd_step_mixed_");
  STRATA_CHECK(!p.nesterov || (p.momentum > 0 && p.dampening == 0),
               "[sgd_step_mixed_] nesterov needs momentum > 0 and dampening 0, got momentum ", p.momentum,
               " dampening ", p.dampening);
  if (p.momentum != 0) check_state(master, buf, "sgd_step_mixed_", "momentum buffer");
  const Device d = common_device("sgd_step_mixed_", master, param16, grad);
  kSgdMixed(d)(master, param16, grad, buf, p);
  master.bump_version();
  param16.bump_version();
  if (p.momentum != 0) buf.bump_version();
}

}  // namespace strata::ops
