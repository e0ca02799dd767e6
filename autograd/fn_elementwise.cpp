// Differentiable elementwise ops. Broadcasting binaries sum their gradient back
// to each input's shape (ops::sum_to_shape); activations save what their backward
// formula reads (input for gelu, output for relu/tanh/sigmoid/exp/sqrt).
#include <strata/autograd/functions.h>
#include <strata/autograd/lambda_node.h>

namespace strata {
namespace {

using ops::BinaryOp;
using ops::UnaryOp;

Tensor mul_raw(const Tensor& a, const Tensor& b) { return ops::binary(BinaryOp::mul, a, b); }
Tensor scale_raw(const Tensor& a, double s) { return ops::binary_scalar(BinaryOp::mul, a, s); }

// Saves t only when `need` (the gradient that reads it is wanted).
SavedTensor save_if(bool need, const Tensor& t) { return SavedTensor(need ? t : Tensor()); }

bool needs(const Tensor& t) { return t.defined() && t.requires_grad(); }

// A unary op whose gradient is g * f'(saved), saved being the input or the output.
template <class Bwd>
Tensor unary_fn(const char* name, UnaryOp op, const Tensor& a, bool save_output, Bwd bwd) {
  Tensor out = ops::unary(op, a);
  if (!any_requires_grad(a)) return out;
  SavedTensor s(save_output ? out : a);
  return record_fn(name, out, {a}, [s, name, bwd](const Tensor& g) { return std::vector{bwd(g, s.get(name))}; });
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = ops::binary(BinaryOp::add, a, b);
  const Shape as = a.shape(), bs = b.shape();
  const bool na = needs(a), nb = needs(b);
  return record_fn("AddBackward", out, {a, b}, [=](const Tensor& g) {
    return std::vector{na ? ops::sum_to_shape(g, as) : Tensor(), nb ? ops::sum_to_shape(g, bs) : Tensor()};
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = ops::binary(BinaryOp::sub, a, b);
  const Shape as = a.shape(), bs = b.shape();
  const bool na = needs(a), nb = needs(b);
  return record_fn("SubBackward", out, {a, b}, [=](const Tensor& g) {
    return std::vector{na ? ops::sum_to_shape(g, as) : Tensor(),
                       nb ? ops::unary(UnaryOp::neg, ops::sum_to_shape(g, bs)) : Tensor()};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = ops::binary(BinaryOp::mul, a, b);
  if (!any_requires_grad(a, b)) return out;
  const Shape as = a.shape(), bs = b.shape();
  const bool na = needs(a), nb = needs(b);
  SavedTensor sa = save_if(nb, a), sb = save_if(na, b);
  return record_fn("MulBackward", out, {a, b}, [=](const Tensor& g) {
    Tensor ga, gb;
    if (na) ga = ops::sum_to_shape(mul_raw(g, sb.get("MulBackward")), as);
    if (nb) gb = ops::sum_to_shape(mul_raw(g, sa.get("MulBackward")), bs);
    return std::vector{ga, gb};
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = ops::binary(BinaryOp::div, a, b);
  if (!any_requires_grad(a, b)) return out;
  const Shape as = a.shape(), bs = b.shape();
  const bool na = needs(a), nb = needs(b);
  SavedTensor sa = save_if(nb, a), sb(b);
  return record_fn("DivBackward", out, {a, b}, [=](const Tensor& g) {
    const Tensor& B = sb.get("DivBackward");
    Tensor ga, gb;
    const Tensor gdb = ops::binary(BinaryOp::div, g, B);  // g / b
    if (na) ga = ops::sum_to_shape(gdb, as);
    // d(a/b)/db = -a / b^2  ->  -(g / b) * a / b
    if (nb)
      gb = ops::sum_to_shape(
          ops::unary(UnaryOp::neg, ops::binary(BinaryOp::div, mul_raw(gdb, sa.get("DivBackward")), B)), bs);
    return std::vector{ga, gb};
  });
}

Tensor pow(const Tensor& a, double e) {
  Tensor out = ops::binary_scalar(BinaryOp::pow, a, e);
  if (!any_requires_grad(a)) return out;
  SavedTensor sa(a);
  return record_fn("PowBackward", out, {a}, [=](const Tensor& g) {
    const Tensor& A = sa.get("PowBackward");
    // g * e * a^(e-1)
    Tensor d = e == 2.0 ? scale_raw(A, 2.0) : scale_raw(ops::binary_scalar(BinaryOp::pow, A, e - 1.0), e);
    return std::vector{mul_raw(g, d)};
  });
}

namespace {
// maximum/minimum: the gradient goes to the winning input, split in half on ties.
Tensor extremum(const char* name, BinaryOp op, const Tensor& a, const Tensor& b) {
  Tensor out = ops::binary(op, a, b);
  if (!any_requires_grad(a, b)) return out;
  const Shape as = a.shape(), bs = b.shape();
  const bool na = needs(a), nb = needs(b);
  SavedTensor sa(a), sb(b);
  const ops::CompareOp win = op == BinaryOp::maximum ? ops::CompareOp::gt : ops::CompareOp::lt;
  return record_fn(name, out, {a, b}, [=](const Tensor& g) {
    const Tensor& A = sa.get(name);
    const Tensor& B = sb.get(name);
    // wa = [a wins] + 0.5 [tie]; wb = 1 - wa
    Tensor wa = ops::binary(BinaryOp::add, ops::to_dtype(ops::compare(win, A, B), g.dtype()),
                            scale_raw(ops::to_dtype(ops::compare(ops::CompareOp::eq, A, B), g.dtype()), 0.5));
    Tensor ga, gb;
    if (na) ga = ops::sum_to_shape(mul_raw(g, wa), as);
    if (nb) gb = ops::sum_to_shape(mul_raw(g, ops::binary_scalar(BinaryOp::sub, wa, 1.0, true)), bs);
    return std::vector{ga, gb};
  });
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return extremum("MaximumBackward", BinaryOp::maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum("MinimumBackward", BinaryOp::minimum, a, b); }

Tensor add(const Tensor& a, double s) {
  return record_fn("AddScalarBackward", ops::binary_scalar(BinaryOp::add, a, s), {a},
                   [](const Tensor& g) { return std::vector{g}; });
}

Tensor mul(const Tensor& a, double s) {
  return record_fn("MulScalarBackward", ops::binary_scalar(BinaryOp::mul, a, s), {a},
                   [s](const Tensor& g) { return std::vector{scale_raw(g, s)}; });
}

Tensor neg(const Tensor& a) {
  return record_fn("NegBackward", ops::unary(UnaryOp::neg, a), {a},
                   [](const Tensor& g) { return std::vector{ops::unary(UnaryOp::neg, g)}; });
}

Tensor exp(const Tensor& a) {
  return unary_fn("ExpBackward", UnaryOp::exp, a, true, [](const Tensor& g, const Tensor& y) { return mul_raw(g, y); });
}

Tensor log(const Tensor& a) {
  return unary_fn("LogBackward", UnaryOp::log, a, false,
                  [](const Tensor& g, const Tensor& x) { return ops::binary(BinaryOp::div, g, x); });
}

Tensor sqrt(const Tensor& a) {
  // d sqrt(x) = 0.5 / y
  return unary_fn("SqrtBackward", UnaryOp::sqrt, a, true, [](const Tensor& g, const Tensor& y) {
    return scale_raw(ops::binary(BinaryOp::div, g, y), 0.5);
  });
}

Tensor rsqrt(const Tensor& a) {
  // d x^-1/2 = -0.5 x^-3/2 = -0.5 y^3
  return unary_fn("RsqrtBackward", UnaryOp::rsqrt, a, true, [](const Tensor& g, const Tensor& y) {
    return mul_raw(g, scale_raw(ops::binary_scalar(BinaryOp::pow, y, 3.0), -0.5));
  });
}

Tensor abs(const Tensor& a) {
  return unary_fn("AbsBackward", UnaryOp::abs, a, false,
                  [](const Tensor& g, const Tensor& x) { return mul_raw(g, ops::unary(UnaryOp::sign, x)); });
}

Tensor square(const Tensor& a) {
  return unary_fn("SquareBackward", UnaryOp::square, a, false,
                  [](const Tensor& g, const Tensor& x) { return mul_raw(g, scale_raw(x, 2.0)); });
}

Tensor relu(const Tensor& a) {
  return unary_fn("ReluBackward", UnaryOp::relu, a, true,
                  [](const Tensor& g, const Tensor& y) { return ops::relu_backward(g, y); });
}

Tensor gelu(const Tensor& a, bool tanh_approx) {
  return unary_fn(tanh_approx ? "GeluTanhBackward" : "GeluBackward", tanh_approx ? UnaryOp::gelu_tanh : UnaryOp::gelu,
                  a, false,
                  [tanh_approx](const Tensor& g, const Tensor& x) { return ops::gelu_backward(g, x, tanh_approx); });
}

Tensor tanh(const Tensor& a) {
  return unary_fn("TanhBackward", UnaryOp::tanh, a, true,
                  [](const Tensor& g, const Tensor& y) { return ops::tanh_backward(g, y); });
}

Tensor sigmoid(const Tensor& a) {
  return unary_fn("SigmoidBackward", UnaryOp::sigmoid, a, true,
                  [](const Tensor& g, const Tensor& y) { return ops::sigmoid_backward(g, y); });
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Tensor out = ops::where(cond, a, b);
  if (!any_requires_grad(a, b)) return out;
  const Shape as = a.shape(), bs = b.shape();
  const bool na = needs(a), nb = needs(b);
  const Tensor c = cond.detach();
  return record_fn("WhereBackward", out, {a, b}, [=](const Tensor& g) {
    const Tensor zero = ops::zeros({}, g.dtype(), g.device());
    Tensor ga, gb;
    if (na) ga = ops::sum_to_shape(ops::where(c, g, zero), as);
    if (nb) gb = ops::sum_to_shape(ops::where(c, zero, g), bs);
    return std::vector{ga, gb};
  });
}

Tensor masked_fill(const Tensor& t, const Tensor& mask, double value) {
  Tensor out = ops::masked_fill(t, mask, value);
  if (!any_requires_grad(t)) return out;
  const Tensor m = mask.detach();
  return record_fn("MaskedFillBackward", out, {t},
                   [m](const Tensor& g) { return std::vector{ops::masked_fill(g, m, 0.0)}; });
}

Tensor cast(const Tensor& x, DType dt) {
  if (x.dtype() == dt) return x;
  const DType in = x.dtype();
  if (!is_floating(in) || !is_floating(dt)) return ops::to_dtype(x, dt);  // integers carry no gradient
  return record_fn("CastBackward", ops::to_dtype(x, dt), {x},
                   [in](const Tensor& g) { return std::vector{ops::to_dtype(g, in)}; });
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, double s) { return add(a, s); }
Tensor operator-(const Tensor& a, double s) { return add(a, -s); }
Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
Tensor operator/(const Tensor& a, double s) { return mul(a, 1.0 / s); }
Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
Tensor operator+(double s, const Tensor& a) { return add(a, s); }

}  // namespace strata
