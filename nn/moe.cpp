// The MoE layer: host-side routing (top-k, capacity per sequence), the sort by expert,
// the grouped GEMM experts, the gated combine and the injected auxiliary losses.
#include <strata/nn/moe.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include <strata/autograd/grad_mode.h>
#include <strata/autograd/lambda_node.h>
#include <strata/core/config.h>
#include <strata/nn/init.h>
#include <strata/nn/linear.h>
#include <strata/tensor/ops.h>

namespace strata::nn {

void MoEConfig::check() const {
  if (!enabled()) return;
  if (experts < 1) config_fail("model.moe.experts", "must be >= 1, got " + std::to_string(experts));
  if (top_k < 1 || top_k > experts)
    config_fail("model.moe.top_k", "must be in [1, experts = " + std::to_string(experts) + "], got " +
                                       std::to_string(top_k));
  if (every < 1) config_fail("model.moe.every", "must be >= 1, got " + std::to_string(every));
  if (gate != "softmax" && gate != "sigmoid")
    config_fail("model.moe.gate", "must be softmax or sigmoid, got '" + gate + "'");
  if (!(aux_loss_coef >= 0)) config_fail("model.moe.aux_loss_coef", "must be >= 0");
  if (!(z_loss_coef >= 0)) config_fail("model.moe.z_loss_coef", "must be >= 0");
  if (!(capacity_factor >= 0)) config_fail("model.moe.capacity_factor", "must be >= 0 (0: dropless)");
  if (shared_experts < 0) config_fail("model.moe.shared_experts", "must be >= 0");
  if (hidden < 0) config_fail("model.moe.hidden", "must be >= 0 (0: the dense MLP's width)");
}

// ---------------------------------------------------------------- grouped GEMM
namespace {

// Group g's rows of a (M, ...) tensor, for every group with rows.
template <class F>
void for_groups(const std::vector<int64_t>& counts, F&& f) {
  int64_t at = 0;
  for (size_t g = 0; g < counts.size(); ++g) {
    if (counts[g] > 0) f(int64_t(g), at, counts[g]);
    at += counts[g];
  }
}

// The row blocks stacked (M, n); M = 0 gives an empty (0, n).
Tensor stack_rows(std::vector<Tensor>& blocks, int64_t n, DType dt, Device dev) {
  if (blocks.empty()) return ops::zeros({0, n}, dt, dev);
  return blocks.size() == 1 ? blocks[0] : ops::cat(blocks, 0);
}

}  // namespace

Tensor grouped_linear(const Tensor& x, const Tensor& w, const std::vector<int64_t>& counts) {
  STRATA_CHECK(x.dim() == 2 && w.dim() == 3 && x.size(1) == w.size(2) && int64_t(counts.size()) == w.size(0),
               "[grouped_linear] expects x (M, K), w (G, N, K) and G counts, got ", shape_str(x.shape()), ", ",
               shape_str(w.shape()), " and ", counts.size(), " counts");
  STRATA_CHECK(x.dtype() == w.dtype(), "[grouped_linear] x is ", dtype_name(x.dtype()), " but w is ",
               dtype_name(w.dtype()));
  const int64_t m = std::accumulate(counts.begin(), counts.end(), int64_t(0));
  STRATA_CHECK(m == x.size(0), "[grouped_linear] the counts sum to ", m, " rows but x has ", x.size(0));
  const Tensor xd = x.detach(), wd = w.detach();
  std::vector<Tensor> blocks;
  for_groups(counts, [&](int64_t g, int64_t at, int64_t rows) {
    blocks.push_back(ops::matmul(ops::narrow(xd, 0, at, rows), ops::transpose(ops::select(wd, 0, g), 0, 1)));
  });
  Tensor out = stack_rows(blocks, w.size(1), w.dtype(), w.device());
  return record_fn("GroupedLinearBackward", out, {x, w}, [xd, wd, counts](const Tensor& grad) {
    std::vector<Tensor> dx_blocks;
    Tensor dw = ops::zeros(wd.shape(), wd.dtype(), wd.device());
    for_groups(counts, [&](int64_t g, int64_t at, int64_t rows) {
      const Tensor gy = ops::narrow(grad, 0, at, rows);          // (rows, N)
      const Tensor wg = ops::select(wd, 0, g);                  // (N, K)
      dx_blocks.push_back(ops::matmul(gy, wg));                 // (rows, K)
      Tensor dwg = ops::select(dw, 0, g);
      ops::copy_(dwg, ops::matmul(ops::transpose(gy, 0, 1), ops::narrow(xd, 0, at, rows)));  // (N, K)
    });
    return std::vector<Tensor>{stack_rows(dx_blocks, xd.size(1), xd.dtype(), xd.device()), dw};
  });
}

// ---------------------------------------------------------------- experts
GroupedExperts::GroupedExperts(int64_t experts, int64_t dim, int64_t hidden, ExpertActivation act, double std,
                               double out_std, Generator& gen)
    : act_(act) {
  STRATA_CHECK(experts > 0 && dim > 0 && hidden > 0, "[GroupedExperts] experts, dim and hidden must be positive");
  register_parameter("w1", init::normal({experts, hidden, dim}, std, gen));
  register_parameter("w2", init::normal({experts, dim, hidden}, out_std, gen));
  if (act == ExpertActivation::swiglu) register_parameter("w3", init::normal({experts, hidden, dim}, std, gen));
}

int64_t GroupedExperts::local_experts() const { return parameter("w1").size(0); }

Tensor GroupedExperts::forward_grouped(const Tensor& xs, const std::vector<int64_t>& counts) {
  const Tensor& w1 = parameter("w1");
  const Tensor x = xs.dtype() == w1.dtype() ? xs : cast(xs, w1.dtype());
  Tensor h = grouped_linear(x, w1, counts);
  h = act_ == ExpertActivation::gelu ? gelu(h, true) : swiglu(h, grouped_linear(x, parameter("w3"), counts));
  return grouped_linear(h, parameter("w2"), counts);
}

// ---------------------------------------------------------------- aux loss weight
namespace {
thread_local double g_aux_weight = 1.0;
}

AuxLossWeight::AuxLossWeight(double w) : prev_(g_aux_weight) { g_aux_weight = w; }
AuxLossWeight::~AuxLossWeight() { g_aux_weight = prev_; }
double AuxLossWeight::current() { return g_aux_weight; }

// ---------------------------------------------------------------- the layer
MoE::MoE(const MoEConfig& cfg, int64_t dim, int64_t hidden, ExpertActivation act, double std, double out_std,
         Generator& gen)
    : cfg_(cfg) {
  cfg.check();
  STRATA_CHECK(cfg.enabled(), "[MoE] model.moe.experts must be >= 1");
  register_module("router", std::make_shared<Linear>(dim, cfg.experts, gen, false, std));
  register_module("experts", std::make_shared<GroupedExperts>(cfg.experts, dim, hidden, act, std, out_std, gen));
  if (cfg.shared_experts > 0)
    register_module("shared_experts",
                    std::make_shared<GroupedExperts>(1, dim, cfg.shared_experts * hidden, act, std, out_std, gen));
  stats_.tokens.assign(size_t(cfg.experts), 0);
}

MoEStats MoE::take_stats() {
  MoEStats out = std::move(stats_);
  stats_ = {};
  stats_.tokens.assign(size_t(cfg_.experts), 0);
  return out;
}

namespace {

// What the router decided for N tokens in B sequences of T: each token's top_k experts
// (ties to the lower index), which assignments fit the capacity, and the kept
// assignments sorted by expert (then token, then slot).
struct Routing {
  std::vector<int64_t> choice;    // (N, k) expert of each assignment
  std::vector<int64_t> per_seq;   // (B, E) assignments per sequence and expert, before drops
  std::vector<int64_t> counts;    // (E) kept assignments per expert
  std::vector<int64_t> src_rows;  // (M) the token of each kept assignment, sorted by expert
  std::vector<int64_t> inv;       // (N, k) sorted position of each assignment, M when dropped
  int64_t dropped = 0;
};

Routing route(const Tensor& scores, int64_t b, int64_t t, int64_t k, double capacity_factor) {
  const Tensor sc = ops::contiguous(ops::to_cpu(ops::to_dtype(scores, DType::f64)));
  const double* s = sc.data<double>();
  const int64_t n = b * t, e = sc.size(1);
  Routing r;
  r.choice.resize(size_t(n * k));
  r.per_seq.assign(size_t(b * e), 0);
  std::vector<int64_t> idx(static_cast<size_t>(e));
  for (int64_t i = 0; i < n; ++i) {
    const double* row = s + i * e;
    std::iota(idx.begin(), idx.end(), int64_t(0));
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [row](int64_t a, int64_t c) { return row[a] > row[c] || (row[a] == row[c] && a < c); });
    for (int64_t j = 0; j < k; ++j) {
      r.choice[size_t(i * k + j)] = idx[size_t(j)];
      ++r.per_seq[size_t((i / t) * e + idx[size_t(j)])];
    }
  }
  // Capacity per sequence: the first slot of every token before the second (GShard), tokens in order.
  std::vector<char> kept(size_t(n * k), 1);
  if (capacity_factor > 0) {
    const auto cap = int64_t(std::ceil(capacity_factor * double(t * k) / double(e)));
    std::vector<int64_t> used(static_cast<size_t>(e));
    for (int64_t q = 0; q < b; ++q) {
      std::fill(used.begin(), used.end(), 0);
      for (int64_t j = 0; j < k; ++j)
        for (int64_t i = q * t; i < (q + 1) * t; ++i) {
          const int64_t x = r.choice[size_t(i * k + j)];
          if (used[size_t(x)] < cap)
            ++used[size_t(x)];
          else
            kept[size_t(i * k + j)] = 0, ++r.dropped;
        }
    }
  }
  r.counts.assign(size_t(e), 0);
  for (int64_t a = 0; a < n * k; ++a)
    if (kept[size_t(a)]) ++r.counts[size_t(r.choice[size_t(a)])];
  std::vector<int64_t> next(size_t(e), 0);
  for (int64_t x = 1; x < e; ++x) next[size_t(x)] = next[size_t(x - 1)] + r.counts[size_t(x - 1)];
  const int64_t m = next.back() + r.counts.back();
  r.src_rows.assign(size_t(m), 0);
  r.inv.assign(size_t(n * k), m);
  for (int64_t a = 0; a < n * k; ++a) {
    if (!kept[size_t(a)]) continue;
    const int64_t pos = next[size_t(r.choice[size_t(a)])]++;
    r.src_rows[size_t(pos)] = a / k;
    r.inv[size_t(a)] = pos;
  }
  return r;
}

// out unchanged; backward passes its gradient through and gives `aux` the gradient `w`.
Tensor inject_aux_loss(const Tensor& out, const Tensor& aux, double w) {
  const Shape shape = aux.shape();
  const DType dt = aux.dtype();
  const Device dev = aux.device();
  return record_fn("MoEAuxLossBackward", out.detach(), {out, aux}, [shape, dt, dev, w](const Tensor& g) {
    return std::vector<Tensor>{g, ops::full(shape, w, dt, dev)};
  });
}

}  // namespace

Tensor MoE::forward(const Tensor& x) {
  STRATA_CHECK(x.dim() == 3, "[MoE] expects (B, T, C), got ", shape_str(x.shape()));
  const int64_t b = x.size(0), t = x.size(1), c = x.size(2), n = b * t, e = cfg_.experts, k = cfg_.top_k;
  const Tensor xf = reshape(x, {n, c});
  const Tensor logits = (*child("router"))(xf);  // (N, E)
  const bool softmax_gate = cfg_.gate == "softmax";
  const Tensor scores = softmax_gate ? softmax(logits, -1) : sigmoid(logits);
  const Routing r = route(scores.detach(), b, t, k, cfg_.capacity_factor);
  const int64_t m = int64_t(r.src_rows.size());

  // Sorted by expert, through the experts (here or on their ranks), back to (N, k) slots.
  // The gathers and the combine run in f32 for 16-bit activations (the CPU's index kernels
  // are f32/f64); the rows travel and meet the experts in the experts' dtype.
  auto* experts = dynamic_cast<GroupedExperts*>(child("experts").get());
  STRATA_CHECK(experts != nullptr, "[MoE] child 'experts' is not a GroupedExperts");
  const bool half = x.dtype() == DType::bf16 || x.dtype() == DType::f16;
  const DType route_dt = half ? DType::f32 : x.dtype();
  const DType expert_dt = experts->parameter("w1").dtype();
  const Tensor xr = half ? cast(xf, route_dt) : xf;
  Tensor xs = index_select(xr, 0, ops::from_vector(r.src_rows, {m}).to(x.device()));
  if (xs.dtype() != expert_dt) xs = cast(xs, expert_dt);
  // The shared experts need no routing: they run while the rows travel to their experts.
  Tensor shared_out;
  const auto shared = [&] {
    if (cfg_.shared_experts == 0) return;
    auto* se = dynamic_cast<GroupedExperts*>(child("shared_experts").get());
    STRATA_CHECK(se != nullptr, "[MoE] child 'shared_experts' is not a GroupedExperts");
    shared_out = se->forward_grouped(xf, {n});
  };
  Tensor ys;  // (M, C)
  if (hooks_.dispatch && cfg_.shared_expert_overlap) {
    ys = hooks_.dispatch(xs, r.counts, shared);
  } else if (hooks_.dispatch) {
    ys = hooks_.dispatch(xs, r.counts, nullptr);
    shared();
  } else {
    ys = experts->forward_grouped(xs, r.counts);
    shared();
  }
  if (ys.dtype() != route_dt) ys = cast(ys, route_dt);
  ys = cat({ys, ops::zeros({1, c}, ys.dtype(), ys.device())}, 0);  // row M: a dropped assignment's zeros
  const Tensor y_nk = reshape(index_select(ys, 0, ops::from_vector(r.inv, {n * k}).to(x.device())), {n, k, c});
  const Tensor sr = scores.dtype() == route_dt ? scores : cast(scores, route_dt);
  Tensor gates = gather(sr, 1, ops::from_vector(r.choice, {n, k}).to(x.device()));  // (N, k)
  if (cfg_.norm_topk) gates = gates / sum(gates, {1}, true);
  Tensor out = sum(y_nk * unsqueeze(gates, 2), {1});  // (N, C)
  if (shared_out.defined()) out = out + (shared_out.dtype() == out.dtype() ? shared_out : cast(shared_out, out.dtype()));
  if (out.dtype() != x.dtype()) out = cast(out, x.dtype());

  if (grad_enabled()) {
    // The auxiliary losses, per sequence (this rank's part of it under context parallelism).
    Tensor aux;
    const int shards = std::max(1, hooks_.sequence_shards);
    const double t_global = double(t) * shards;
    if (cfg_.aux_loss_coef > 0) {
      // f_e: the sequence's assignments to e over T * k; P_e: its mean routing probability.
      Tensor f = ops::from_vector(std::vector<double>(r.per_seq.begin(), r.per_seq.end()), {b, e});
      if (hooks_.sum_over_sequence) f = hooks_.sum_over_sequence(f);
      f = ops::to_dtype(f, scores.dtype());
      ops::mul_(f, 1.0 / (t_global * double(k)));
      f = f.to(x.device());
      const Tensor p = softmax_gate ? scores : scores / sum(scores, {1}, true);
      const Tensor p_sum = sum(reshape(p, {b, t, e}), {1});  // (B, E) over this rank's tokens
      // coef * E * mean_b sum_e f_be P_be, P = p_sum / T; each of the `shards` ranks of a
      // sequence adds its tokens' part, and the replicas' average divides by them again.
      aux = sum(p_sum * f) * (cfg_.aux_loss_coef * double(e) * double(shards) / (t_global * double(b)));
      stats_.aux_loss += aux.item<double>();
    }
    if (cfg_.z_loss_coef > 0) {
      const Tensor mx = ops::amax(logits.detach(), 1, true);
      const Tensor lse = log(sum(exp(logits - mx), {1})) + reshape(mx, {n});
      Tensor z = mean(square(lse)) * cfg_.z_loss_coef;
      stats_.z_loss += z.item<double>();
      aux = aux.defined() ? aux + z : z;
    }
    if (aux.defined()) out = inject_aux_loss(out, aux, AuxLossWeight::current());
    for (int64_t q = 0; q < e; ++q) stats_.tokens[size_t(q)] += r.counts[size_t(q)];
    stats_.dropped += r.dropped;
    ++stats_.forwards;
  }
  return reshape(out, {b, t, c});
}

std::vector<std::pair<std::string, MoE*>> moe_layers(Module& model) {
  std::vector<std::pair<std::string, MoE*>> out;
  for (const auto& [name, m] : model.named_modules())
    if (auto* moe = dynamic_cast<MoE*>(m.get())) out.emplace_back(name, moe);
  return out;
}

}  // namespace strata::nn
