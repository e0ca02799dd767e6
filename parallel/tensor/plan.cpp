// apply_tp: the broadcast, the child swaps and the record of what was sharded.
#include <strata/parallel/tensor/plan.h>

#include <strata/nn/embedding.h>
#include <strata/nn/lm_hooks.h>
#include <strata/optim/clip.h>
#include <strata/parallel/tensor/regions.h>
#include <strata/parallel/tensor/vocab.h>

namespace strata::parallel {

namespace {

// The entry's module has the type and widths its style needs (error naming the path).
void check_entry(const nn::Module& model, const std::string& path, TpStyle style, int n) {
  const std::shared_ptr<nn::Module> m = model.child(path);  // throws naming the children
  const auto fail = [&](const char* want) {
    STRATA_THROW(Error, "[apply_tp] plan entry '", path, "' (", tp_style_name(style), ") is a ", m->type_name(), ", ", want);
  };
  const auto* lin = dynamic_cast<const nn::Linear*>(m.get());
  switch (style) {
    case TpStyle::parallel_rng:
      if (m->own_generator() == nullptr) fail("which has no generator of its own");
      return;
    case TpStyle::sequence_norm:
      if (!dynamic_cast<const nn::LayerNorm*>(m.get()) && !dynamic_cast<const nn::RMSNorm*>(m.get()))
        fail("not a LayerNorm or an RMSNorm");
      return;
    case TpStyle::vocab_parallel: {
      const auto* emb = dynamic_cast<const nn::Embedding*>(m.get());
      if (!emb && !(lin && !lin->has_bias())) fail("not an Embedding or a Linear without bias");
      const int64_t v = emb ? emb->num_embeddings() : lin->out_features();
      STRATA_CHECK(v % n == 0, "[apply_tp] '", path, "': a vocabulary of ", v, " does not split into ", n,
                   " tensor-parallel ranks");
      return;
    }
    default: break;
  }
  if (lin == nullptr) fail("not a Linear");
  const bool row = style == TpStyle::rowwise;
  const int64_t width = row ? lin->in_features() : lin->out_features(), parts = style == TpStyle::colwise_qkv ? 3 : 1;
  STRATA_CHECK(width % (parts * n) == 0, "[apply_tp] '", path, "': ", width, row ? " input" : " output",
               " features do not split into ", parts, " part(s) x ", n, " tensor-parallel ranks");
}

// The hooks of a vocabulary-parallel head and of sequence parallelism (Megatron-SP: the
// residual stream is split along T between the embeddings and the final norm).
nn::LmHooks lm_hooks(const std::shared_ptr<comm::ProcessGroup>& tp, bool vocab_head, bool sp) {
  nn::LmHooks h;
  if (sp) {
    h.enter_blocks = [tp](const Tensor& x) { return scatter_to_seq(x, *tp); };
    h.leave_blocks = [tp](const Tensor& x) { return all_gather_seq(x, *tp); };
  }
  if (vocab_head) {
    // The features are replicated: under SP all_gather_seq's backward already sums their
    // gradient over tp, otherwise copy_to_tp does.
    const auto local_logits = [tp, sp](const Tensor& x, const Tensor& w) {
      return linear(sp ? x : copy_to_tp(x, *tp), w, Tensor());
    };
    h.logits = [tp, local_logits](const Tensor& x, const Tensor& w) {
      return gather_from_tp(local_logits(x, w), *tp);
    };
    h.loss = [tp, local_logits](const Tensor& x, const Tensor& w, const Tensor& targets, int64_t ignore) {
      return vocab_parallel_cross_entropy(local_logits(x, w), targets, *tp, ignore);
    };
  }
  return h;
}

}  // namespace

const TpShardedParam* TpLayout::find(const std::string& name) const {
  for (const auto& p : sharded)
    if (p.name == name) return &p;
  return nullptr;
}

TpLayout apply_tp(nn::Module& model, const TpPlan& plan, std::shared_ptr<comm::ProcessGroup> tp) {
  STRATA_CHECK(tp != nullptr, "[apply_tp] the tp group is null");
  const int n = tp->size();
  std::vector<comm::Work> works;
  for (const auto& [name, t] : model.state_dict()) works.push_back(tp->broadcast(t, 0));
  for (const auto& w : works) w.wait();
  const std::vector<Generator*> gens = model.generators();
  if (n > 1 && !gens.empty()) {
    std::vector<int64_t> st;
    for (const Generator* g : gens) {
      st.push_back(int64_t(g->seed()));
      st.push_back(int64_t(g->offset()));
    }
    // Rank 0's block of a host all-gather (works on every backend, nccl included).
    const auto v = comm::all_gather_host(*tp, ops::from_vector(st, {int64_t(st.size())})).to_vector<int64_t>();
    for (size_t i = 0; i < gens.size(); ++i) gens[i]->set_state(uint64_t(v[2 * i]), uint64_t(v[2 * i + 1]));
  }
  // Every entry is checked before any module changes.
  bool sp = false;
  for (const auto& [path, style] : plan) {
    check_entry(model, path, style, n);
    sp = sp || style == TpStyle::sequence_norm;
  }
  auto* lm = dynamic_cast<nn::LanguageModel*>(&model);
  const auto head = lm ? plan.find(lm->head_module()) : plan.end();
  const bool vocab_head = head != plan.end() && head->second == TpStyle::vocab_parallel;
  if (sp)
    STRATA_CHECK(vocab_head, "[apply_tp] the plan has sequence_norm entries (sequence parallelism) but ",
                 lm ? "not the head '" + lm->head_module() + "' as vocab_parallel"
                    : model.type_name() + " is not an nn::LanguageModel (no sequence to split)");
  TpLayout out{.tp = tp, .sharded = {}, .modules = {}, .sequence_parallel = sp};
  for (const auto& [path, style] : plan) {
    const std::shared_ptr<nn::Module> m = model.child(path);
    if (style == TpStyle::parallel_rng) {
      Generator* g = m->own_generator();
      g->set_state(g->seed() + 2718 + uint64_t(tp->rank()), g->offset());
      continue;
    }
    const std::string pre = path + ".";
    std::shared_ptr<nn::Module> shard;
    if (style == TpStyle::sequence_norm) {
      if (const auto* rms = dynamic_cast<const nn::RMSNorm*>(m.get()))
        shard = std::make_shared<SequenceParallelNorm>(*rms, tp);
      else
        shard = std::make_shared<SequenceParallelNorm>(dynamic_cast<const nn::LayerNorm&>(*m), tp);
    } else if (const auto* emb = dynamic_cast<const nn::Embedding*>(m.get())) {
      out.sharded.push_back({pre + "weight", emb->weight().shape(), {0, 1}});
      shard = std::make_shared<VocabParallelEmbedding>(*emb, tp);
    } else if (const auto& lin = dynamic_cast<const nn::Linear&>(*m); style == TpStyle::rowwise) {
      out.sharded.push_back({pre + "weight", lin.weight().shape(), {1, 1}});
      shard = std::make_shared<RowParallelLinear>(lin, tp, /*input_is_parallel=*/true, sp);
    } else {
      const int64_t parts = style == TpStyle::colwise_qkv ? 3 : 1;
      const bool vocab = style == TpStyle::vocab_parallel;  // an lm head: its forward gathers the logits
      out.sharded.push_back({pre + "weight", lin.weight().shape(), {0, parts}});
      if (lin.has_bias()) out.sharded.push_back({pre + "bias", lin.bias().shape(), {0, parts}});
      shard = std::make_shared<ColumnParallelLinear>(lin, tp, parts, /*gather_output=*/vocab, sp && !vocab);
    }
    shard->train(m->is_training());
    model.replace_child(path, std::move(shard));
    out.modules.push_back(path);
  }
  if (lm && (vocab_head || sp)) lm->set_lm_hooks(lm_hooks(tp, vocab_head, sp));
  return out;
}

TpWholeModules::TpWholeModules(nn::Module& model, const TpLayout& layout) : model_(model) {
  for (const std::string& path : layout.modules) {
    std::shared_ptr<nn::Module> shard = model.child(path);
    const auto* tpm = dynamic_cast<const TpModule*>(shard.get());
    STRATA_CHECK(tpm != nullptr, "[TpWholeModules] '", path, "' is a ", shard->type_name(), ", not a TpModule");
    std::shared_ptr<nn::Module> whole = tpm->whole();
    whole->train(shard->is_training());
    model.replace_child(path, std::move(whole));
    shards_.emplace_back(path, std::move(shard));
  }
  if (auto* lm = dynamic_cast<nn::LanguageModel*>(&model)) {
    hooks_ = lm->lm_hooks();
    lm->set_lm_hooks({});
  }
}

TpWholeModules::~TpWholeModules() {
  for (auto& [path, shard] : shards_) model_.replace_child(path, std::move(shard));
  if (auto* lm = dynamic_cast<nn::LanguageModel*>(&model_)) lm->set_lm_hooks(std::move(hooks_));
}

int64_t tp_sharded_elements(const nn::Module& model, const TpPlan& plan) {
  int64_t n = 0;
  for (const auto& [path, style] : plan) {
    if (style == TpStyle::parallel_rng || style == TpStyle::sequence_norm) continue;  // replicated
    for (const auto& [name, t] : model.child(path)->named_parameters())
      if (style != TpStyle::rowwise || name == "weight") n += t.numel();  // a row layer's bias is whole
  }
  return n;
}

int64_t tp_global_parameters(const nn::Module& model, const TpLayout* layout) {
  int64_t n = model.num_parameters();
  if (layout == nullptr) return n;
  const int64_t tp = layout->tp->size();
  for (const auto& [name, t] : model.named_parameters())  // those this rank holds (a pipeline stage: its own)
    if (const TpShardedParam* p = layout->find(name)) n += shape_numel(p->global_shape) / tp * (tp - 1);
  return n;
}

double tp_grad_norm_sq(const nn::NamedTensors& params, const TpLayout& layout) {
  std::vector<Tensor> sharded, replicated;
  for (const auto& [name, t] : params) (layout.find(name) ? sharded : replicated).push_back(t);
  Tensor sq = ops::full({1}, optim::grad_norm_sq(sharded), DType::f64);
  if (layout.tp->size() > 1) sq = comm::all_reduce_host(*layout.tp, sq, comm::ReduceOp::sum);
  return sq.item<double>() + optim::grad_norm_sq(replicated);
}

}  // namespace strata::parallel
