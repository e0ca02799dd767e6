// Expert parallelism: the experts' shards, the all-to-all dispatch and combine, and the
// gradient sync that keeps the experts' gradients and optimizer apart from the rest.
#include <strata/parallel/expert/expert_parallel.h>

#include <map>
#include <numeric>

#include <strata/autograd/lambda_node.h>
#include <strata/comm/agreement.h>
#include <strata/core/error.h>
#include <strata/optim/clip.h>
#include <strata/parallel/checkpoint/layout_io.h>
#include <strata/parallel/data/coalesced.h>
#include <strata/tensor/ops.h>

namespace strata::parallel {

const EpShardedParam* EpLayout::find(const std::string& name) const {
  const std::string bare = optim::Optimizer::state_param_name(name);  // of "exp_avg.h.1.mlp.experts.w1"
  for (const auto& p : sharded)
    if (p.name == name) return &p;
  for (const auto& p : sharded)
    if (p.name == bare) return &p;
  return nullptr;
}

// ---------------------------------------------------------------- all-to-all of rows
namespace {

std::vector<int64_t> offsets(const std::vector<int64_t>& rows) {
  std::vector<int64_t> off(rows.size() + 1, 0);
  std::partial_sum(rows.begin(), rows.end(), off.begin() + 1);
  return off;
}

// Posts the exchange and returns the output buffer with the Work that fills it (a
// completed Work when there is nothing to send or receive).
std::pair<Tensor, comm::Work> start_exchange(const Tensor& x, const std::vector<int64_t>& send_rows,
                                             const std::vector<int64_t>& recv_rows, comm::ProcessGroup& group) {
  const int n = group.size(), me = group.rank();
  STRATA_CHECK(int(send_rows.size()) == n && int(recv_rows.size()) == n, "[ep] all-to-all over ", n,
               " ranks got ", send_rows.size(), " send and ", recv_rows.size(), " receive counts");
  const std::vector<int64_t> so = offsets(send_rows), ro = offsets(recv_rows);
  STRATA_CHECK(so.back() == x.size(0), "[ep] the send counts sum to ", so.back(), " rows but there are ", x.size(0));
  const Tensor xc = ops::contiguous(x);
  Tensor out = ops::empty({ro.back(), x.size(1)}, x.dtype(), x.device());
  std::vector<comm::P2POp> ops;
  for (int j = 0; j < n; ++j) {
    if (j == me) {
      STRATA_CHECK(send_rows[size_t(j)] == recv_rows[size_t(j)], "[ep] rank ", me, " sends itself ",
                   send_rows[size_t(j)], " rows but expects ", recv_rows[size_t(j)]);
      if (send_rows[size_t(j)] > 0) {
        Tensor dst = ops::narrow(out, 0, ro[size_t(j)], recv_rows[size_t(j)]);
        ops::copy_(dst, ops::narrow(xc, 0, so[size_t(j)], send_rows[size_t(j)]));
      }
      continue;
    }
    if (send_rows[size_t(j)] > 0)
      ops.push_back({comm::P2POp::Kind::send, ops::narrow(xc, 0, so[size_t(j)], send_rows[size_t(j)]), j});
    if (recv_rows[size_t(j)] > 0)
      ops.push_back({comm::P2POp::Kind::recv, ops::narrow(out, 0, ro[size_t(j)], recv_rows[size_t(j)]), j});
  }
  return {out, group.batch_isend_irecv(std::move(ops), "ep all-to-all")};
}

Tensor exchange_rows(const Tensor& x, const std::vector<int64_t>& send_rows, const std::vector<int64_t>& recv_rows,
                     comm::ProcessGroup& group) {
  auto [out, work] = start_exchange(x, send_rows, recv_rows, group);
  work.wait();
  return out;
}

// The exchange as an autograd op whose forward value is `out` (filled by the caller's wait).
Tensor record_exchange(const Tensor& out, const Tensor& x, const std::vector<int64_t>& send_rows,
                       const std::vector<int64_t>& recv_rows, comm::ProcessGroup& group) {
  comm::ProcessGroup* g = &group;
  return record_fn("AllToAllRowsBackward", out, {x}, [g, send_rows, recv_rows](const Tensor& grad) {
    return std::vector<Tensor>{exchange_rows(grad, recv_rows, send_rows, *g)};
  });
}

}  // namespace

Tensor all_to_all_rows(const Tensor& x, const std::vector<int64_t>& send_rows, const std::vector<int64_t>& recv_rows,
                       comm::ProcessGroup& group) {
  STRATA_CHECK(x.dim() == 2, "[ep] all_to_all_rows expects (rows, C), got ", shape_str(x.shape()));
  return record_exchange(exchange_rows(x.detach(), send_rows, recv_rows, group), x, send_rows, recv_rows, group);
}

// ---------------------------------------------------------------- apply_ep
namespace {

nn::GroupedExperts& experts_of(nn::MoE& moe, const std::string& path) {
  auto* ge = dynamic_cast<nn::GroupedExperts*>(moe.child("experts").get());
  STRATA_CHECK(ge != nullptr, "[ep] '", path, ".experts' is not a GroupedExperts");
  return *ge;
}

// Dispatch: counts to the owners, rows to the owners, the owners' experts on rows sorted
// by local expert, and the outputs back in the sender's order.
nn::ExpertDispatch make_dispatch(std::shared_ptr<comm::ProcessGroup> ep, nn::GroupedExperts* experts, int64_t e) {
  return [ep, experts, e](const Tensor& xs, const std::vector<int64_t>& counts, const std::function<void()>& meanwhile) {
    const int n = ep->size();
    const int64_t el = e / n;
    Tensor recv = ops::empty({e}, DType::i64);
    ep->all_to_all(ops::from_vector(counts, {e}), recv).wait();  // recv[j * el + l]: rows of rank j for my expert l
    const std::vector<int64_t> rc = recv.to_vector<int64_t>();
    std::vector<int64_t> send_rows(size_t(n), 0), recv_rows(size_t(n), 0), local(size_t(el), 0);
    for (int j = 0; j < n; ++j)
      for (int64_t l = 0; l < el; ++l) {
        send_rows[size_t(j)] += counts[size_t(j * el + l)];
        recv_rows[size_t(j)] += rc[size_t(j * el + l)];
        local[size_t(l)] += rc[size_t(j * el + l)];
      }
    // By source rank, then local expert; `meanwhile` computes while the rows travel.
    auto [received, work] = start_exchange(xs.detach(), send_rows, recv_rows, *ep);
    if (meanwhile) meanwhile();
    work.wait();
    const Tensor xr = record_exchange(received, xs, send_rows, recv_rows, *ep);
    // Expert-major order for the grouped GEMM, and back: blocks (rank j, expert l) of xr
    // re-concatenated (views and one copy each way, any dtype).
    std::vector<int64_t> block(size_t(n * el) + 1, 0);  // start of (rank j, expert l) in xr
    for (int64_t k = 0; k < n * el; ++k) block[size_t(k + 1)] = block[size_t(k)] + rc[size_t(k)];
    const auto reorder = [&](const Tensor& t, bool to_expert_major) {
      std::vector<std::pair<int64_t, int64_t>> order;  // (source start, rows) in output order
      if (to_expert_major) {
        for (int64_t l = 0; l < el; ++l)
          for (int j = 0; j < n; ++j) order.emplace_back(block[size_t(j * el + l)], rc[size_t(j * el + l)]);
      } else {  // t is expert-major: find each (j, l) block's start there
        std::vector<int64_t> at(size_t(n * el), 0);
        int64_t pos = 0;
        for (int64_t l = 0; l < el; ++l)
          for (int j = 0; j < n; ++j) at[size_t(j * el + l)] = pos, pos += rc[size_t(j * el + l)];
        for (int64_t k = 0; k < n * el; ++k) order.emplace_back(at[size_t(k)], rc[size_t(k)]);
      }
      std::vector<Tensor> parts;
      for (const auto& [start, rows] : order)
        if (rows > 0) parts.push_back(narrow(t, 0, start, rows));
      if (parts.empty()) return t;  // no rows at all
      return parts.size() == 1 ? parts[0] : cat(parts, 0);
    };
    const Tensor yg = experts->forward_grouped(reorder(xr, true), local);
    const Tensor yr = reorder(yg, false);
    return all_to_all_rows(yr, recv_rows, send_rows, *ep);
  };
}

}  // namespace

EpLayout apply_ep(nn::Module& model, comm::ProcessGroup& dp, comm::ProcessGroup& replica, int ep, int cp) {
  STRATA_CHECK(ep >= 1 && dp.size() % ep == 0, "[ep] ep ", ep, " does not divide the ", dp.size(), " dp ranks");
  const auto layers = nn::moe_layers(model);
  EpLayout out;
  const int d = dp.rank();
  out.ep = dp.split(d / ep, d % ep, "ep");
  out.edp = replica.split((replica.rank() / cp) % ep, replica.rank(), "edp");
  out.replicas = replica.size();
  // One model's experts everywhere (replica rank 0's), then each rank keeps its rows.
  std::vector<Tensor> whole;
  for (const auto& [path, moe] : layers)
    for (const auto& [n, p] : experts_of(*moe, path).named_parameters()) whole.push_back(p.detach());
  broadcast_coalesced(replica, whole, 0);
  const int r = out.ep->rank();
  for (const auto& [path, moe] : layers) {
    nn::GroupedExperts& ge = experts_of(*moe, path);
    const int64_t e = moe->config().experts;
    STRATA_CHECK(e % ep == 0, "[ep] '", path, "' has ", e, " experts, not divisible by ep ", ep);
    for (const auto& [n, p] : ge.named_parameters()) {
      out.sharded.push_back({path + ".experts." + n, p.shape()});
      Tensor local = ops::clone(ops::narrow(p.detach(), 0, r * (e / ep), e / ep));
      local.storage()->recharge(MemCategory::params);  // counted as the parameter it replaces
      ge.set_parameter(n, std::move(local));
    }
    nn::MoEHooks h = moe->hooks();
    h.dispatch = make_dispatch(out.ep, &ge, e);
    moe->set_hooks(std::move(h));
  }
  return out;
}

void apply_moe_cp(nn::Module& model, std::shared_ptr<comm::ProcessGroup> cp) {
  for (const auto& [path, moe] : nn::moe_layers(model)) {
    nn::MoEHooks h = moe->hooks();
    h.sequence_shards = cp->size();
    h.sum_over_sequence = [cp](const Tensor& t) {
      Tensor out = ops::clone(t);
      cp->all_reduce(out).wait();
      return out;
    };
    moe->set_hooks(std::move(h));
  }
}

// ---------------------------------------------------------------- detached experts
namespace {
class DetachedExperts final : public nn::Module {
 public:
  std::string type_name() const override { return "DetachedExperts"; }
};
}  // namespace

ExpertsDetached::ExpertsDetached(nn::Module& model) : model_(model) {
  for (const auto& [path, moe] : nn::moe_layers(model)) experts_.emplace_back(path + ".experts", moe->child("experts"));
  for (const auto& [path, m] : experts_) model_.replace_child(path, std::make_shared<DetachedExperts>());
}

ExpertsDetached::~ExpertsDetached() {
  for (auto& [path, m] : experts_) model_.replace_child(path, m);
}

EpWholeExperts::EpWholeExperts(nn::Module& model, const EpLayout& layout) {
  const int n = layout.ep->size();
  for (const auto& [path, moe] : nn::moe_layers(model)) {
    nn::GroupedExperts& ge = experts_of(*moe, path);
    for (const auto& [name, p] : ge.named_parameters()) {
      Shape whole = p.shape();
      whole[0] *= n;
      Tensor full = ops::empty(whole, p.dtype(), p.device());
      layout.ep->all_gather(ops::contiguous(p.detach()), full).wait();  // rank j's rows are block j
      saved_.push_back({&ge, name, p});
      ge.set_parameter(name, full);
    }
    hooks_.emplace_back(moe, moe->hooks());
    nn::MoEHooks h = moe->hooks();
    h.dispatch = nullptr;
    moe->set_hooks(std::move(h));
  }
}

EpWholeExperts::~EpWholeExperts() {
  for (auto& s : saved_) s.module->set_parameter(s.name, s.local);
  for (auto& [moe, h] : hooks_) moe->set_hooks(h);
}

// ---------------------------------------------------------------- the sync
namespace {

class ExpertSync final : public GradSync {
 public:
  ExpertSync(std::unique_ptr<GradSync> dense, nn::Module& model, std::shared_ptr<const EpLayout> layout,
             const OptimizerFactory& make_optimizer)
      : dense_(std::move(dense)), layout_(*layout), keep_(std::move(layout)) {
    for (const EpShardedParam& e : layout_.sharded) experts_.emplace_back(e.name, model.parameter(e.name));
    opt_ = make_optimizer(experts_);
    STRATA_CHECK(opt_ != nullptr, "[ep] the optimizer factory returned null");
  }

  Tensor forward_with(const std::function<Tensor()>& fn) override {
    reduced_ = false;
    return dense_->forward_with(fn);
  }
  Scoped no_sync() override {
    struct Pause {
      Scoped inner;
      bool* paused;
      ~Pause() { *paused = false; }
    };
    paused_ = true;
    return std::make_shared<Pause>(Pause{dense_->no_sync(), &paused_});
  }
  void reduce_accumulated() override { dense_->reduce_accumulated(); }
  void finalize() override {
    dense_->finalize();
    if (!paused_ && !reduced_) reduce_experts();  // once per backward, however often finalize is called
  }
  double sum_over_shards(double local) override {
    // Each expert counted once: the ep ranks hold different experts, the edp ranks equal ones.
    std::vector<Tensor> grads;
    for (const auto& [n, p] : experts_) grads.push_back(p);
    const Tensor sq = ops::full({1}, optim::grad_norm_sq(grads), DType::f64);
    return dense_->sum_over_shards(local) +
           comm::all_reduce_host(*layout_.ep, sq, comm::ReduceOp::sum).item<double>();
  }
  void scale_grads(double f) override {
    dense_->scale_grads(f);
    std::vector<Tensor> ps;
    for (const auto& [n, p] : experts_) ps.push_back(p);
    optim::scale_grads(ps, f);
  }
  void step(optim::GradScaler* scaler) override {
    dense_->step(scaler);
    opt_->set_lr(dense_->optimizer().lr());
    opt_->step();
  }
  void zero_grad() override {
    dense_->zero_grad();
    opt_->zero_grad();
    reduced_ = false;
  }
  optim::Optimizer& optimizer() override { return dense_->optimizer(); }
  // The experts stay this rank's: a pipeline step gathers ZeRO-3's units here and still
  // dispatches; evaluation makes them whole through EpWholeExperts (summon_full_params).
  Scoped gather_parameters() override { return dense_->gather_parameters(); }
  std::vector<ShardPiece> state_pieces(const nn::Module& model, const comm::ProcessGroup& group) override {
    std::vector<ShardPiece> out;
    for (auto& p : dense_->state_pieces(model, group))
      if (!layout_.find(p.name)) out.push_back(std::move(p));
    if (layout_.edp->rank() != 0) return out;  // the edp ranks hold equal experts
    // The f32 masters of 16-bit experts, as every other checkpoint holds them.
    std::map<std::string, Tensor> masters;
    for (const auto& [n, m] : opt_->named_masters()) masters.emplace(n, m);
    const auto piece = [&](const std::string& name, const Tensor& t) {
      const EpShardedParam* g = layout_.find(name);
      const int64_t off = layout_.ep->rank() * t.numel();
      out.push_back({name, g->global_shape, off, off + t.numel(), ops::flatten(t)});
    };
    for (const auto& [n, p] : experts_) piece(n, masters.count(n) ? masters[n] : p);
    for (const auto& [n, t] : opt_->state_dict().tensors) piece(n, t);
    return out;
  }
  void load_state(const TensorSource& ck, nn::Module& model, bool with_optimizer, const TpLayout* tp,
                  comm::ProcessGroup& world) override {
    {
      const ExpertsDetached off(model);
      dense_->load_state(ck, model, with_optimizer, tp, world);
    }
    // This rank's rows of every expert weight (and of its optimizer state), read and
    // checked on every rank before any rank changes anything.
    const auto rows = [&](const std::string& name, const Tensor& like, DType dt) {
      const EpShardedParam* g = layout_.find(name);
      expect_floating(ck, name, g->global_shape, dt);
      const int64_t off = layout_.ep->rank() * like.numel();
      const Tensor v = ops::reshape(ck.read(name, off, off + like.numel()), like.shape());
      return v.dtype() == dt ? v : ops::to_dtype(v, dt);
    };
    nn::NamedTensors weights;
    optim::OptimizerState st;
    comm::run_agreed(world, [&] {
      for (const auto& [n, p] : experts_) weights.emplace_back(n, rows(n, p, p.dtype() == DType::f64 ? DType::f64 : DType::f32));
      if (!with_optimizer) return;
      st.scalars = optimizer_meta(ck);
      if (st.scalars.value("step", int64_t(0)) == 0) return;  // before the first step there is no state
      for (const auto& kind : opt_->state_kinds())
        for (const auto& [n, p] : experts_) {
          const DType dt = p.dtype() == DType::f64 ? DType::f64 : DType::f32;
          st.tensors.emplace_back(kind + "." + n, rows(kind + "." + n, p, dt));
        }
    });
    if (with_optimizer) opt_->load_state_dict(st);  // checks everything before it changes
    for (const auto& [n, v] : weights) opt_->set_weight(n, v);  // the f32 master exactly, the parameter its rounding
  }
  bool shards_state() const override { return true; }
  bool holds_buckets() const override { return dense_->holds_buckets(); }
  std::vector<int64_t> flat_unit_sizes() const override { return dense_->flat_unit_sizes(); }
  std::string name() const override { return dense_->name(); }
  GradSync* wrapped() override { return dense_.get(); }

 private:
  // The experts' gradients summed over the ranks that hold the same experts, divided by
  // every replica of the loss: the gradient of the global mean.
  void reduce_experts() {
    std::vector<Tensor> grads;
    for (auto& [n, p] : experts_) {
      Tensor g = p.grad();
      if (!g.defined()) {  // no token reached this rank's experts
        g = ops::zeros(p.shape(), p.dtype(), p.device());
        p.set_grad(g);
      }
      grads.push_back(g);
    }
    std::vector<comm::Work> works;
    if (layout_.edp->size() > 1)
      for (auto& g : grads) works.push_back(layout_.edp->all_reduce(g));
    for (auto& w : works) w.wait();
    if (layout_.replicas > 1)
      for (auto& g : grads) ops::mul_(g, 1.0 / double(layout_.replicas));
    reduced_ = true;
  }

  std::unique_ptr<GradSync> dense_;
  const EpLayout& layout_;
  std::shared_ptr<const EpLayout> keep_;
  nn::NamedTensors experts_;
  std::unique_ptr<optim::Optimizer> opt_;
  bool paused_ = false;   // inside no_sync: gradients accumulate locally
  bool reduced_ = false;  // the experts' gradients of this backward are reduced
};

}  // namespace

std::unique_ptr<GradSync> make_expert_sync(std::unique_ptr<GradSync> dense, nn::Module& model,
                                           std::shared_ptr<const EpLayout> layout, const OptimizerFactory& make_optimizer) {
  return std::make_unique<ExpertSync>(std::move(dense), model, std::move(layout), make_optimizer);
}

}  // namespace strata::parallel
