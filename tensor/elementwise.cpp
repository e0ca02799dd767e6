// Elementwise front ends: dtype/device checks, broadcast shape, output allocation,
// then the kernel for the tensors' device from a KernelTable.
#include <strata/tensor/cpu/elementwise.h>
#include <strata/tensor/dispatch.h>
#include <strata/tensor/ops.h>

namespace strata::ops {
namespace {

using BinaryFn = void(BinaryOp, Tensor&, const Tensor&, const Tensor&);
using BinaryScalarFn = void(BinaryOp, Tensor&, const Tensor&, double, bool);
using CompareFn = void(CompareOp, Tensor&, const Tensor&, const Tensor&);
using CompareScalarFn = void(CompareOp, Tensor&, const Tensor&, double);
using UnaryFn = void(UnaryOp, Tensor&, const Tensor&);
using WhereFn = void(Tensor&, const Tensor&, const Tensor&, const Tensor&);
using MaskedFillFn = void(Tensor&, const Tensor&, const Tensor&, double);
using ActGradFn = void(cpu::ActGrad, Tensor&, const Tensor&, const Tensor&);
using AddFn = void(Tensor&, const Tensor&, double);
using ScaleFn = void(Tensor&, double);

const KernelTable<BinaryFn> kBinary{"binary", {&cpu::binary_kernel, nullptr}};
const KernelTable<BinaryScalarFn> kBinaryScalar{"binary_scalar", {&cpu::binary_scalar_kernel, nullptr}};
const KernelTable<CompareFn> kCompare{"compare", {&cpu::compare_kernel, nullptr}};
const KernelTable<CompareScalarFn> kCompareScalar{"compare_scalar", {&cpu::compare_scalar_kernel, nullptr}};
const KernelTable<UnaryFn> kUnary{"unary", {&cpu::unary_kernel, nullptr}};
const KernelTable<WhereFn> kWhere{"where", {&cpu::where_kernel, nullptr}};
const KernelTable<MaskedFillFn> kMaskedFill{"masked_fill", {&cpu::masked_fill_kernel, nullptr}};
const KernelTable<ActGradFn> kActGrad{"activation_backward", {&cpu::act_grad_kernel, nullptr}};
const KernelTable<AddFn> kAdd{"add_", {&cpu::add_kernel, nullptr}};
const KernelTable<ScaleFn> kScale{"mul_", {&cpu::scale_kernel, nullptr}};

const char* op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return "add";
    case BinaryOp::sub: return "sub";
    case BinaryOp::mul: return "mul";
    case BinaryOp::div: return "div";
    case BinaryOp::pow: return "pow";
    case BinaryOp::maximum: return "maximum";
    case BinaryOp::minimum: return "minimum";
  }
  return "binary";
}

const char* op_name(CompareOp op) {
  switch (op) {
    case CompareOp::eq: return "eq";
    case CompareOp::ne: return "ne";
    case CompareOp::lt: return "lt";
    case CompareOp::le: return "le";
    case CompareOp::gt: return "gt";
    case CompareOp::ge: return "ge";
  }
  return "compare";
}

const char* op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg: return "neg";
    case UnaryOp::exp: return "exp";
    case UnaryOp::log: return "log";
    case UnaryOp::sqrt: return "sqrt";
    case UnaryOp::rsqrt: return "rsqrt";
    case UnaryOp::abs: return "abs";
    case UnaryOp::relu: return "relu";
    case UnaryOp::gelu: return "gelu";
    case UnaryOp::gelu_tanh: return "gelu_tanh";
    case UnaryOp::tanh: return "tanh";
    case UnaryOp::sigmoid: return "sigmoid";
    case UnaryOp::sign: return "sign";
    case UnaryOp::square: return "square";
    case UnaryOp::reciprocal: return "reciprocal";
  }
  return "unary";
}

void check_defined(const char* op, const Tensor& t, const char* what) {
  STRATA_CHECK(t.defined(), "[", op, "] ", what, " is an undefined tensor");
}

// numpy broadcast of a and b; the error names the op and both shapes.
Shape broadcast2(const char* op, const Shape& a, const Shape& b) {
  if (a == b) return a;
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    STRATA_CHECK(da == db || da == 1 || db == 1, "[", op, "] shapes ", shape_str(a), " and ", shape_str(b),
                 " are not broadcastable (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  STRATA_CHECK(a.dtype() == b.dtype(), "[", op, "] dtype mismatch: ", dtype_name(a.dtype()), " vs ",
               dtype_name(b.dtype()), "; convert one with ops::to_dtype");
}

void check_mask(const char* op, const Tensor& m) {
  STRATA_CHECK(m.dtype() == DType::u8, "[", op, "] mask/condition must be u8, got ", dtype_name(m.dtype()));
}

Tensor act_grad(const char* op, cpu::ActGrad kind, const Tensor& grad, const Tensor& x) {
  check_defined(op, grad, "grad");
  check_defined(op, x, "saved input");
  const Device d = common_device(op, grad, x);
  check_same_dtype(op, grad, x);
  STRATA_CHECK(grad.shape() == x.shape(), "[", op, "] grad ", shape_str(grad.shape()), " does not match ",
               shape_str(x.shape()));
  Tensor out = Tensor::empty(x.shape(), x.dtype(), d);
  kActGrad(d)(kind, out, grad, x);
  return out;
}

}  // namespace

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = op_name(op);
  check_defined(name, a, "lhs");
  check_defined(name, b, "rhs");
  const Device d = common_device(name, a, b);
  check_same_dtype(name, a, b);
  Tensor out = Tensor::empty(broadcast2(name, a.shape(), b.shape()), a.dtype(), d);
  kBinary(d)(op, out, a, b);
  return out;
}

Tensor binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first) {
  check_defined(op_name(op), a, "input");
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  kBinaryScalar(a.device())(op, out, a, s, scalar_first);
  return out;
}

Tensor compare(CompareOp op, const Tensor& a, const Tensor& b) {
  const char* name = op_name(op);
  check_defined(name, a, "lhs");
  check_defined(name, b, "rhs");
  const Device d = common_device(name, a, b);
  check_same_dtype(name, a, b);
  Tensor out = Tensor::empty(broadcast2(name, a.shape(), b.shape()), DType::u8, d);
  kCompare(d)(op, out, a, b);
  return out;
}

Tensor compare_scalar(CompareOp op, const Tensor& a, double s) {
  check_defined(op_name(op), a, "input");
  Tensor out = Tensor::empty(a.shape(), DType::u8, a.device());
  kCompareScalar(a.device())(op, out, a, s);
  return out;
}

Tensor unary(UnaryOp op, const Tensor& a) {
  check_defined(op_name(op), a, "input");
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  kUnary(a.device())(op, out, a);
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_defined("where", cond, "cond");
  check_defined("where", a, "a");
  check_defined("where", b, "b");
  const Device d = common_device("where", cond, a, b);
  check_mask("where", cond);
  check_same_dtype("where", a, b);
  const Shape s = broadcast2("where", cond.shape(), broadcast2("where", a.shape(), b.shape()));
  Tensor out = Tensor::empty(s, a.dtype(), d);
  kWhere(d)(out, cond, a, b);
  return out;
}

Tensor masked_fill(const Tensor& t, const Tensor& mask, double value) {
  check_defined("masked_fill", t, "input");
  check_defined("masked_fill", mask, "mask");
  const Device d = common_device("masked_fill", t, mask);
  check_mask("masked_fill", mask);
  STRATA_CHECK(broadcast2("masked_fill", t.shape(), mask.shape()) == t.shape(), "[masked_fill] mask ",
               shape_str(mask.shape()), " does not broadcast to the input ", shape_str(t.shape()));
  Tensor out = Tensor::empty(t.shape(), t.dtype(), d);
  kMaskedFill(d)(out, t, mask, value);
  return out;
}

Tensor gelu_backward(const Tensor& grad, const Tensor& x, bool tanh_approx) {
  return act_grad("gelu_backward", tanh_approx ? cpu::ActGrad::gelu_tanh : cpu::ActGrad::gelu, grad, x);
}
Tensor relu_backward(const Tensor& grad, const Tensor& y) {
  return act_grad("relu_backward", cpu::ActGrad::relu, grad, y);
}
Tensor tanh_backward(const Tensor& grad, const Tensor& y) {
  return act_grad("tanh_backward", cpu::ActGrad::tanh, grad, y);
}
Tensor sigmoid_backward(const Tensor& grad, const Tensor& y) {
  return act_grad("sigmoid_backward", cpu::ActGrad::sigmoid, grad, y);
}

void add_(Tensor& dst, const Tensor& src, double alpha) {
  check_defined("add_", dst, "dst");
  check_defined("add_", src, "src");
  const Device d = common_device("add_", dst, src);
  check_same_dtype("add_", dst, src);
  STRATA_CHECK(broadcast2("add_", dst.shape(), src.shape()) == dst.shape(), "[add_] src ", shape_str(src.shape()),
               " does not broadcast to dst ", shape_str(dst.shape()));
  for (int64_t i = 0; i < dst.dim(); ++i)
    STRATA_CHECK(dst.strides()[i] != 0 || dst.shape()[i] <= 1, "[add_] dst ", shape_str(dst.shape()),
                 " is a broadcast (expanded) view; write into a contiguous tensor instead");
  kAdd(d)(dst, src, alpha);
  dst.bump_version();
}

void mul_(Tensor& t, double s) {
  check_defined("mul_", t, "input");
  kScale(t.device())(t, s);
  t.bump_version();
}

void zero_(Tensor& t) {
  check_defined("zero_", t, "input");
  fill_(t, 0.0);
}

}  // namespace strata::ops
