// Finite-difference gradient checks (f64) for every differentiable op: the
// elementwise and reduction functions, and the shape / join / linalg ones from
// fn_shape.cpp and fn_linalg.cpp, including broadcasting and strided cases.
#include <gtest/gtest.h>

#include <strata/autograd/functions.h>
#include <strata/autograd/gradcheck.h>

using namespace strata;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// f64 leaf with values in [lo, hi) that requires grad.
Tensor leaf(const Shape& s, uint64_t seed, double lo = -1, double hi = 1) {
  Generator g(seed);
  Tensor t = ops::uniform(s, lo, hi, g, DType::f64);
  t.set_requires_grad(true);
  return t;
}

// Values away from 0 (for abs/relu/log/sqrt kinks and poles).
Tensor leaf_away(const Shape& s, uint64_t seed, double lo, double hi) {
  Generator g(seed);
  Tensor m = ops::uniform(s, lo, hi, g, DType::f64);
  Tensor sign = ops::binary_scalar(ops::BinaryOp::sub,
                                   ops::binary_scalar(ops::BinaryOp::mul,
                                                      ops::to_dtype(ops::compare_scalar(ops::CompareOp::gt,
                                                                                        ops::uniform(s, 0, 1, g, DType::f64), 0.5),
                                                                    DType::f64),
                                                      2.0),
                                   1.0);
  Tensor t = ops::binary(ops::BinaryOp::mul, m, sign);
  t.set_requires_grad(true);
  return t;
}

void check(const std::string& what, const Fn& fn, const std::vector<Tensor>& inputs) {
  const GradcheckResult r = gradcheck(fn, inputs);
  EXPECT_TRUE(r.ok) << what << ": " << r.message << " (max err " << r.max_abs_err << ")";
}

}  // namespace

TEST(Gradcheck, BinaryBroadcasting) {
  const std::vector<std::pair<Shape, Shape>> shapes = {{{2, 1, 3}, {4, 1}}, {{3, 4}, {3, 4}}, {{3, 4}, {4}}, {{}, {2, 3}}};
  for (const auto& [sa, sb] : shapes) {
    const std::string tag = shape_str(sa) + " op " + shape_str(sb);
    Tensor a = leaf(sa, 1), b = leaf(sb, 2);
    check("add " + tag, [](const auto& x) { return add(x[0], x[1]); }, {a, b});
    check("sub " + tag, [](const auto& x) { return sub(x[0], x[1]); }, {a, b});
    check("mul " + tag, [](const auto& x) { return mul(x[0], x[1]); }, {a, b});
    check("maximum " + tag, [](const auto& x) { return maximum(x[0], x[1]); }, {a, b});
    check("minimum " + tag, [](const auto& x) { return minimum(x[0], x[1]); }, {a, b});
    Tensor bd = leaf_away(sb, 3, 0.5, 2);
    check("div " + tag, [](const auto& x) { return div(x[0], x[1]); }, {a, bd});
  }
  // only one side requires grad
  Tensor a = leaf({3, 4}, 4);
  Generator g(5);
  Tensor c = ops::uniform({4}, 0.5, 1.5, g, DType::f64);
  check("mul const rhs", [](const auto& x) { return mul(x[0], x[1]); }, {a, c});
  check("div const lhs", [](const auto& x) { return div(x[1], x[0]); }, {leaf({4}, 6, 0.5, 2), c});
}

TEST(Gradcheck, ScalarOpsAndOperators) {
  Tensor a = leaf({2, 3}, 10), b = leaf({3}, 11);
  check("add scalar", [](const auto& x) { return add(x[0], 2.5); }, {a});
  check("mul scalar", [](const auto& x) { return mul(x[0], -1.5); }, {a});
  check("pow 3", [](const auto& x) { return pow(x[0], 3.0); }, {a});
  check("pow 2", [](const auto& x) { return pow(x[0], 2.0); }, {a});
  check("pow 0.5", [](const auto& x) { return pow(x[0], 0.5); }, {leaf({2, 3}, 12, 0.5, 2)});
  check("operators", [](const auto& x) {
    return (x[0] + x[1]) * x[0] - x[1] / (x[0] * x[0] + 1.0) + 2.0 * (-x[0]) - x[0] * 0.5 + (3.0 + x[1]) -
           x[0] / 4.0 - 1.0;
  }, {a, b});
}

TEST(Gradcheck, Unary) {
  Tensor a = leaf({3, 4}, 20, -2, 2);
  Tensor pos = leaf({3, 4}, 21, 0.3, 3);
  Tensor away = leaf_away({3, 4}, 22, 0.1, 2);
  check("neg", [](const auto& x) { return neg(x[0]); }, {a});
  check("exp", [](const auto& x) { return exp(x[0]); }, {a});
  check("log", [](const auto& x) { return log(x[0]); }, {pos});
  check("sqrt", [](const auto& x) { return sqrt(x[0]); }, {pos});
  check("rsqrt", [](const auto& x) { return rsqrt(x[0]); }, {pos});
  check("abs", [](const auto& x) { return abs(x[0]); }, {away});
  check("square", [](const auto& x) { return square(x[0]); }, {a});
  check("relu", [](const auto& x) { return relu(x[0]); }, {away});
  check("gelu", [](const auto& x) { return gelu(x[0]); }, {a});
  check("gelu tanh", [](const auto& x) { return gelu(x[0], true); }, {a});
  check("tanh", [](const auto& x) { return tanh(x[0]); }, {a});
  check("sigmoid", [](const auto& x) { return sigmoid(x[0]); }, {a});
  // strided input: the op sees a transposed view
  check("exp of transpose", [](const auto& x) { return exp(transpose(x[0], 0, 1)); }, {a});
}

TEST(Gradcheck, WhereAndMaskedFill) {
  Tensor cond = ops::from_vector<uint8_t>({1, 0, 0, 1}, {4});
  Tensor a = leaf({3, 4}, 30), b = leaf({3, 1}, 31);
  check("where", [cond](const auto& x) { return where(cond, x[0], x[1]); }, {a, b});
  Tensor mask = ops::from_vector<uint8_t>({0, 1, 1, 0, 1, 0}, {3, 2, 1});
  check("masked_fill", [mask](const auto& x) { return masked_fill(x[0], mask, -3.0); }, {leaf({3, 2, 4}, 32)});
}

TEST(Gradcheck, Reductions) {
  Tensor a = leaf({3, 4, 5}, 40);
  check("sum all", [](const auto& x) { return sum(x[0]); }, {a});
  check("sum dim 1", [](const auto& x) { return sum(x[0], {1}); }, {a});
  check("sum dims 0,2 keepdim", [](const auto& x) { return sum(x[0], {0, -1}, true); }, {a});
  check("mean all", [](const auto& x) { return mean(x[0]); }, {a});
  check("mean dim -1", [](const auto& x) { return mean(x[0], {-1}); }, {a});
  check("mean dims keepdim", [](const auto& x) { return mean(x[0], {0, 1}, true); }, {a});
  check("amax dim 1", [](const auto& x) { return amax(x[0], 1); }, {a});
  check("amax dim -1 keepdim", [](const auto& x) { return amax(x[0], -1, true); }, {a});
  check("sum of permuted", [](const auto& x) { return sum(permute(x[0], {2, 0, 1}), {1}); }, {a});
}

TEST(Gradcheck, Views) {
  Tensor a = leaf({2, 3, 4}, 50);
  check("view", [](const auto& x) { return view(x[0], {6, 4}); }, {a});
  check("reshape of transpose", [](const auto& x) { return reshape(transpose(x[0], 0, 2), {4, 6}); }, {a});
  check("transpose", [](const auto& x) { return transpose(x[0], 0, 2); }, {a});
  check("permute", [](const auto& x) { return permute(x[0], {1, 2, 0}); }, {a});
  check("narrow", [](const auto& x) { return narrow(x[0], 2, 1, 2); }, {a});
  check("slice step 2", [](const auto& x) { return slice(x[0], 2, 0, 4, 2); }, {a});
  check("select", [](const auto& x) { return select(x[0], 1, -1); }, {a});
  check("expand", [](const auto& x) { return expand(x[0], {3, 2, 4}); }, {leaf({2, 1}, 51)});
  check("squeeze", [](const auto& x) { return squeeze(x[0], 1); }, {leaf({3, 1, 2}, 52)});
  check("unsqueeze", [](const auto& x) { return unsqueeze(x[0], -1); }, {a});
  check("flatten", [](const auto& x) { return flatten(x[0], 1); }, {a});
  check("contiguous", [](const auto& x) { return contiguous(transpose(x[0], 1, 2)); }, {a});
  // a view used twice with overlapping reads
  check("two narrows", [](const auto& x) { return add(narrow(x[0], 1, 0, 2), narrow(x[0], 1, 1, 2)); }, {a});
}

TEST(Gradcheck, SplitChunkCatStack) {
  Tensor a = leaf({4, 5}, 60);
  check("split", [](const auto& x) {
    auto p = split(x[0], {1, 3, 1}, 1);
    return add(mul(p[0], 2.0), add(sum(p[1], {1}, true), mul(p[2], p[2])));
  }, {a});
  check("chunk", [](const auto& x) {
    auto p = chunk(x[0], 2, 0);
    return mul(p[0], exp(p[1]));
  }, {a});
  Tensor b = leaf({4, 2}, 61), c = leaf({4, 1}, 62);
  check("cat dim 1", [](const auto& x) { return cat({x[0], x[1], x[2]}, 1); }, {a, b, c});
  check("cat dim 0 with reuse", [](const auto& x) { return cat({x[0], mul(x[0], 2.0)}, -2); }, {a});
  Tensor d = leaf({4, 5}, 63);
  check("stack 0", [](const auto& x) { return stack({x[0], x[1]}, 0); }, {a, d});
  check("stack -1", [](const auto& x) { return stack({x[0], x[1]}, -1); }, {a, d});
}

TEST(Gradcheck, IndexSelectAndGather) {
  Tensor a = leaf({4, 3}, 70);
  Tensor idx = ops::from_vector<int64_t>({3, 0, 3, 1}, {4});
  check("index_select dim 0", [idx](const auto& x) { return index_select(x[0], 0, idx); }, {a});
  Tensor idx1 = ops::from_vector<int64_t>({2, 2, 0}, {3});
  check("index_select dim -1", [idx1](const auto& x) { return index_select(x[0], -1, idx1); }, {a});
  Tensor gi = ops::from_vector<int64_t>({0, 2, 1, 1, 2, 2, 0, 0}, {4, 2});
  check("gather dim 1", [gi](const auto& x) { return gather(x[0], 1, gi); }, {a});
  Tensor gi0 = ops::from_vector<int64_t>({3, 0, 3, 2, 1, 1}, {2, 3});
  check("gather dim 0", [gi0](const auto& x) { return gather(x[0], 0, gi0); }, {a});
}

TEST(Gradcheck, Matmul) {
  struct Case {
    Shape a, b;
  };
  const std::vector<Case> cases = {
      {{3, 4}, {4, 5}},        {{2, 3, 4}, {2, 4, 5}}, {{2, 3, 4}, {4, 5}},    {{3, 4}, {2, 4, 5}},
      {{2, 1, 3, 4}, {5, 4, 2}}, {{4}, {4, 5}},        {{3, 4}, {4}},          {{4}, {4}},
      {{4}, {2, 4, 5}},        {{2, 3, 4}, {4}}};
  uint64_t seed = 80;
  for (const auto& c : cases) {
    Tensor a = leaf(c.a, seed++), b = leaf(c.b, seed++);
    check("matmul " + shape_str(c.a) + " @ " + shape_str(c.b), [](const auto& x) { return matmul(x[0], x[1]); },
          {a, b});
  }
  // transposed operands go to BLAS as transposes
  Tensor a = leaf({4, 3}, 100), b = leaf({5, 4}, 101);
  check("matmul transposed views",
        [](const auto& x) { return matmul(transpose(x[0], 0, 1), transpose(x[1], 0, 1)); }, {a, b});
}

TEST(Gradcheck, Linear) {
  Tensor x = leaf({2, 3, 4}, 110), w = leaf({5, 4}, 111), b = leaf({5}, 112);
  check("linear with bias", [](const auto& v) { return linear(v[0], v[1], v[2]); }, {x, w, b});
  check("linear without bias", [](const auto& v) { return linear(v[0], v[1], Tensor()); }, {x, w});
  check("linear 2-d", [](const auto& v) { return linear(v[0], v[1], v[2]); }, {leaf({6, 4}, 113), w, b});
  check("two linears + gelu", [](const auto& v) {
    return sum(gelu(linear(tanh(linear(v[0], v[1], v[2])), v[3], Tensor())), {-1});
  }, {x, w, b, leaf({3, 5}, 114)});
}

// The check itself: a function whose backward is wrong must be rejected, naming the input
// and element. x * detach(x) has the value x^2, but its backward sees only one factor
// (analytic x, numeric 2x); 2x - detach(x) has the value x and the analytic gradient 2.
TEST(Gradcheck, RejectsAWrongGradient) {
  Tensor x = leaf_away({3, 2}, 120, 0.5, 1.5);
  GradcheckResult r = gradcheck([](const auto& v) { return mul(v[0], v[0].detach()); }, {x});
  EXPECT_FALSE(r.ok) << "x * detach(x) passed (max err " << r.max_abs_err << ")";
  EXPECT_GT(r.max_abs_err, 1e-2);  // |w x| per element (w the check's random projection), far above its 1e-6
  EXPECT_NE(r.message.find("input 0 element 0"), std::string::npos) << r.message;
  Tensor y = leaf({4}, 121);
  r = gradcheck([](const auto& v) { return v[0] * 2.0 - v[0].detach(); }, {y});
  EXPECT_FALSE(r.ok) << "2x - detach(x) passed (max err " << r.max_abs_err << ")";
  EXPECT_GT(r.max_abs_err, 1e-2);  // analytic 2w vs numeric w at every element
  // The same functions with their true gradients pass.
  EXPECT_TRUE(gradcheck([](const auto& v) { return mul(v[0], v[0]); }, {x}).ok);
  EXPECT_TRUE(gradcheck([](const auto& v) { return v[0] * 2.0 - v[0]; }, {y}).ok);
}
