// Optimizer kernel front ends: in-place fused Adam/AdamW and SGD updates.
#include <strata/tensor/cpu/optim.h>
#include <strata/tensor/dispatch.h>
#include <strata/tensor/ops.h>

namespace strata::ops {
namespace {

using AdamFn = void(Tensor&, const Tensor&, Tensor&, Tensor&, const AdamParams&);
using SgdFn = void(Tensor&, const Tensor&, Tensor&, const SgdParams&);
const KernelTable<AdamFn> kAdam{"adam_step_", {&cpu::adam_kernel, nullptr}};
const KernelTable<SgdFn> kSgd{"sgd_step_", {&cpu::sgd_kernel, nullptr}};

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

}  // namespace strata::ops
