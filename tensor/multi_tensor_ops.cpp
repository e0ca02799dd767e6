// Multi-tensor front ends (ops.h): the lists are checked here once, then one kernel call
// takes the whole list. The CPU kernels are the single-tensor ones in list order.
#include <strata/tensor/cpu/elementwise.h>
#include <strata/tensor/cpu/optim.h>
#include <strata/tensor/cpu/reduce.h>
#include <strata/tensor/dispatch.h>
#include <strata/tensor/ops.h>

namespace strata::ops {
namespace {

using AdamMultiFn = void(std::span<Tensor>, std::span<const Tensor>, std::span<Tensor>, std::span<Tensor>,
                         const AdamParams&);
using SgdMultiFn = void(std::span<Tensor>, std::span<const Tensor>, std::span<Tensor>, const SgdParams&);
using SumSquaresMultiFn = double(std::span<const Tensor>);
using MulMultiFn = void(std::span<Tensor>, double);

void cpu_adam_multi(std::span<Tensor> ps, std::span<const Tensor> gs, std::span<Tensor> ms, std::span<Tensor> vs,
                    const AdamParams& p) {
  for (size_t i = 0; i < ps.size(); ++i) cpu::adam_kernel(ps[i], gs[i], ms[i], vs[i], p);
}
void cpu_sgd_multi(std::span<Tensor> ps, std::span<const Tensor> gs, std::span<Tensor> bufs, const SgdParams& p) {
  Tensor none;
  for (size_t i = 0; i < ps.size(); ++i) cpu::sgd_kernel(ps[i], gs[i], bufs.empty() ? none : bufs[i], p);
}
double cpu_sum_squares_multi(std::span<const Tensor> ts) {
  double s = 0;
  for (const Tensor& t : ts) s += cpu::sum_squares_kernel(t);
  return s;
}
void cpu_mul_multi(std::span<Tensor> ts, double s) {
  for (Tensor& t : ts) cpu::scale_kernel(t, s);
}

const KernelTable<AdamMultiFn> kAdamMulti{"adam_step_multi_", {&cpu_adam_multi, nullptr}};
const KernelTable<SgdMultiFn> kSgdMulti{"sgd_step_multi_", {&cpu_sgd_multi, nullptr}};
const KernelTable<SumSquaresMultiFn> kSumSquaresMulti{"sum_squares_multi", {&cpu_sum_squares_multi, nullptr}};
const KernelTable<MulMultiFn> kMulMulti{"mul_multi_", {&cpu_mul_multi, nullptr}};

// The list's device (all entries on it); entries defined and contiguous.
Device list_device(const char* op, std::span<const Tensor> ts) {
  for (size_t i = 0; i < ts.size(); ++i)
    STRATA_CHECK(ts[i].defined() && ts[i].is_contiguous(), "[", op, "] entry ", i, " must be a contiguous tensor, got ",
                 ts[i].defined() ? ts[i].str() : "undefined");
  const Device d = ts.front().device();
  for (size_t i = 0; i < ts.size(); ++i) {
    STRATA_CHECK(ts[i].device() == d, "[", op, "] entry ", i, " is on ", ts[i].device().str(), ", entry 0 on ",
                 d.str(), ": one call takes tensors of one device");
  }
  return d;
}

// state[i] has params[i]'s shape and dtype, is contiguous and on `d`.
void check_like(const char* op, const char* what, std::span<const Tensor> params, std::span<const Tensor> state,
                Device d) {
  STRATA_CHECK(state.size() == params.size(), "[", op, "] ", state.size(), " ", what, " for ", params.size(),
               " params");
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& t = state[i];
    STRATA_CHECK(t.defined() && t.device() == d && t.shape() == params[i].shape() &&
                     t.dtype() == params[i].dtype() && t.is_contiguous(),
                 "[", op, "] ", what, " ", i, " (", t.defined() ? t.str() : "undefined",
                 ") must be contiguous and match param ", params[i].str());
  }
}

void check_params(const char* op, std::span<const Tensor> params) {
  for (size_t i = 0; i < params.size(); ++i)
    STRATA_CHECK((params[i].dtype() == DType::f32 || params[i].dtype() == DType::f64) && params[i].is_contiguous(),
                 "[", op, "] param ", i, " must be contiguous f32 or f64, got ", params[i].str());
}

void bump(std::span<Tensor> ts) {
  for (Tensor& t : ts) t.bump_version();
}

}  // namespace

void adam_step_multi_(std::span<Tensor> params, std::span<const Tensor> grads, std::span<Tensor> m,
                      std::span<Tensor> v, const AdamParams& p) {
  if (params.empty()) return;
  const char* op = "adam_step_multi_";
  const Device d = list_device(op, params);
  check_params(op, params);
  check_like(op, "grads", params, grads, d);
  check_like(op, "m", params, m, d);
  check_like(op, "v", params, v, d);
  STRATA_CHECK(p.step >= 1, "[", op, "] step is 1-based, got ", p.step);
  kAdamMulti(d)(params, grads, m, v, p);
  bump(params);
  bump(m);
  bump(v);
}

void sgd_step_multi_(std::span<Tensor> params, std::span<const Tensor> grads, std::span<Tensor> bufs,
                     const SgdParams& p) {
  if (params.empty()) return;
  const char* op = "sgd_step_multi_";
  const Device d = list_device(op, params);
  check_params(op, params);
  check_like(op, "grads", params, grads, d);
  STRATA_CHECK(!p.nesterov || (p.momentum > 0 && p.dampening == 0), "[", op,
               "] nesterov needs momentum > 0 and dampening 0, got momentum ", p.momentum, " dampening ", p.dampening);
  STRATA_CHECK((p.momentum != 0) == !bufs.empty(), "[", op, "] momentum ", p.momentum, " with ", bufs.size(),
               " momentum buffers");
  if (p.momentum != 0) check_like(op, "momentum buffers", params, bufs, d);
  kSgdMulti(d)(params, grads, bufs, p);
  bump(params);
  bump(bufs);
}

double sum_squares_multi(std::span<const Tensor> ts) {
  if (ts.empty()) return 0.0;
  return kSumSquaresMulti(list_device("sum_squares_multi", ts))(ts);
}

void mul_multi_(std::span<Tensor> ts, double s) {
  if (ts.empty()) return;
  kMulMulti(list_device("mul_multi_", ts))(ts, s);
  bump(ts);
}

}  // namespace strata::ops
