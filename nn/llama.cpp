// Llama model: grouped-query attention with rotary embeddings, the SwiGLU MLP, the block
// and the model, with per-block activation checkpointing.
#include <strata/nn/llama.h>

#include <cmath>

#include <strata/nn/embedding.h>
#include <strata/nn/linear.h>
#include <strata/nn/normalization.h>
#include <strata/nn/recompute.h>
#include <strata/nn/residual_fusion.h>

namespace strata::nn {
namespace {
constexpr double kInitStd = 0.02;
double resid_std(const LlamaConfig& c) { return kInitStd / std::sqrt(2.0 * double(c.n_layer)); }

// m as a plain bias-free Linear with nothing acting around its forward (no forward hook:
// FSDP; not a subclass: tensor parallelism's column-parallel projections), or null.
const Linear* plain_linear(const std::shared_ptr<Module>& m) {
  const Linear* l = plain_module<Linear>(*m);
  return l && !l->has_bias() ? l : nullptr;
}

// residual + proj(y) (residual undefined: proj(y)). When proj is a plain bias-free Linear
// the residual is added in one pass after its GEMM, in place (linear_residual), instead of
// a separate add into a fresh tensor; same values either way.
Tensor project_residual(const std::shared_ptr<Module>& proj, const Tensor& y, const Tensor& residual) {
  if (const Linear* lin = plain_linear(proj); lin && residual.defined())
    return proj->traced([&] { return linear_residual(y, lin->weight(), Tensor(), residual); });
  Tensor out = (*proj)(y);
  return residual.defined() ? residual + out : out;
}
}  // namespace

int64_t LlamaConfig::hidden_dim() const {
  if (intermediate_size > 0) return intermediate_size;
  int64_t h = 4 * n_embd;
  h = 2 * h / 3;
  if (ffn_dim_multiplier > 0) h = int64_t(ffn_dim_multiplier * double(h));
  const int64_t m = multiple_of > 0 ? multiple_of : 1;
  return m * ((h + m - 1) / m);
}

void LlamaConfig::check() const {
  STRATA_CHECK(vocab > 0 && block_size > 0 && n_layer > 0 && n_head > 0 && n_embd > 0 && n_kv_head >= 0,
               "[Llama] vocab, block_size, n_layer, n_head, n_embd must be positive and n_kv_head >= 0");
  STRATA_CHECK(n_embd % n_head == 0 && head_dim() % 2 == 0, "[Llama] n_embd ", n_embd, " / n_head ", n_head,
               " must be an even head dimension (rotary embedding pairs)");
  STRATA_CHECK(n_head % kv_heads() == 0, "[Llama] n_kv_head ", kv_heads(), " does not divide n_head ", n_head);
  STRATA_CHECK(hidden_dim() > 0, "[Llama] the feed-forward width must be positive, got ", hidden_dim());
  STRATA_CHECK(norm_eps > 0, "[Llama] norm_eps must be positive, got ", norm_eps);
}

Tensor RotaryPositions::at(int64_t t) const {
  return positions ? positions(t) : ops::arange(0, double(t), 1.0, DType::i64);
}

// ---------------------------------------------------------------- attention
LlamaAttention::LlamaAttention(const LlamaConfig& cfg, Generator& gen, std::shared_ptr<const RotaryPositions> rotary)
    : head_dim_(cfg.head_dim()), selective_(cfg.selective), rotary_(std::move(rotary)) {
  const int64_t c = cfg.n_embd, hd = head_dim_;
  register_module("wq", std::make_shared<Linear>(c, cfg.n_head * hd, gen, false, kInitStd));
  register_module("wk", std::make_shared<Linear>(c, cfg.kv_heads() * hd, gen, false, kInitStd));
  register_module("wv", std::make_shared<Linear>(c, cfg.kv_heads() * hd, gen, false, kInitStd));
  register_module("wo", std::make_shared<Linear>(cfg.n_head * hd, c, gen, false, resid_std(cfg)));
}

Tensor LlamaAttention::forward(const Tensor& x) { return forward_impl(x, Tensor()); }
Tensor LlamaAttention::forward_add(const Tensor& x, const Tensor& residual) { return forward_impl(x, residual); }

Tensor LlamaAttention::forward_impl(const Tensor& x, const Tensor& residual) {
  STRATA_CHECK(x.dim() == 3, "[LlamaAttention] expects (B, T, C), got ", shape_str(x.shape()));
  const int64_t hd = head_dim_;
  const auto check_heads = [hd](int64_t wq, int64_t wk, int64_t wv) {
    STRATA_CHECK(wq % hd == 0 && wk % hd == 0 && wk > 0 && wv == wk, "[LlamaAttention] projection widths ", wq, ", ",
                 wk, ", ", wv, " are not whole heads of ", hd);
    STRATA_CHECK((wq / hd) % (wk / hd) == 0, "[LlamaAttention] ", wk / hd, " key/value heads do not divide ", wq / hd,
                 " query heads");
    return std::pair{wq / hd, wk / hd};
  };
  // Selective recomputation keeps the projections' outputs (q|k|v side by side) and
  // recomputes the rest in backward: rotary and the attention core (a replaced core also
  // repeats the key/value heads).
  if (!attention_fn_) {
    // The fused op: q|k|v packed (B, T, (H + 2 Hkv) hd), rotary turning its q and k heads
    // in one pass, the key/value groups read in place. Plain projections' three GEMMs
    // write that buffer side by side; otherwise (column-parallel projections, a forward
    // hook) the modules run and their outputs are concatenated.
    const Linear *lq = plain_linear(child("wq")), *lk = plain_linear(child("wk")), *lv = plain_linear(child("wv"));
    std::pair<int64_t, int64_t> heads;
    Tensor raw;
    if (lq && lk && lv) {
      heads = check_heads(lq->out_features(), lk->out_features(), lv->out_features());
      raw = linear_packed(x, {lq->weight(), lk->weight(), lv->weight()});
    } else {
      // x may be a sequence shard (B, T/tp, C): column-parallel projections gather it
      const Tensor q = (*child("wq"))(x), k = (*child("wk"))(x), v = (*child("wv"))(x);
      heads = check_heads(q.size(2), k.size(2), v.size(2));
      raw = cat({q, k, v}, -1);
    }
    const auto core_fn = [this, heads](const Tensor& r) { return packed_core(r, heads.second); };
    return project_residual(child("wo"), selective_ ? recompute_in_backward(core_fn, raw, {}) : core_fn(raw),
                            residual);
  }
  // A replaced core (context parallelism's ring attention): q, k, v spanning this rank's
  // T/cp, under tensor parallelism its heads.
  Tensor q = (*child("wq"))(x);  // (B, T, H*hd), H this rank's query heads
  Tensor k = (*child("wk"))(x);  // (B, T, Hkv*hd)
  Tensor v = (*child("wv"))(x);
  const auto [h, hkv] = check_heads(q.size(2), k.size(2), v.size(2));
  if (selective_) {
    const Tensor raw = cat({q, k, v}, -1);  // (B, T, (H + 2 Hkv) hd)
    return project_residual(child("wo"),
                            recompute_in_backward(
                                [this, h, hkv](const Tensor& r) {
                                  const int64_t hd = head_dim_;
                                  auto parts = split(r, {h * hd, hkv * hd, hkv * hd}, -1);
                                  return core(parts[0], parts[1], parts[2], h, hkv);
                                },
                                raw, {}),
                            residual);
  }
  return project_residual(child("wo"), core(q, k, v, h, hkv), residual);
}

Tensor LlamaAttention::packed_core(const Tensor& raw, int64_t hkv) {
  // rotary on the q and k heads (the first h + hkv) at the tokens' global positions, inside
  // the attention kernel where it can be (causal_attention_rotary)
  return causal_attention_rotary(raw, rotary_->at(raw.size(1)), rotary_->inv_freq, head_dim_, hkv);  // (B, T, H*hd)
}

Tensor LlamaAttention::core(const Tensor& q_in, const Tensor& k_in, const Tensor& v, int64_t h, int64_t hkv) {
  const int64_t hd = head_dim_, b = q_in.size(0), t = q_in.size(1);
  // Rotary embedding on q and k at the tokens' global positions (the rotate-half layout
  // of Hugging Face's Llama: pairs (x[i], x[i + hd/2])), before the heads are repeated.
  const Tensor pos = rotary_->at(t);
  const Tensor q = rotary(reshape(q_in, {b, t, h, hd}), pos, rotary_->inv_freq);
  const Tensor k = rotary(reshape(k_in, {b, t, hkv, hd}), pos, rotary_->inv_freq);
  // Grouped-query attention: query head j reads key/value head j / (H/Hkv). The replaced
  // core (ring attention) takes plain multi-head q|k|v, so each k, v head is repeated H/Hkv
  // times ((B, T, Hkv, hd) -> (B, T, H, hd), Hugging Face's repeat_kv), which costs the
  // expanded K and V: 2 B T (H - Hkv) hd more elements per block.
  const int64_t rep = h / hkv;
  auto repeat = [&](const Tensor& kv) {
    const Tensor heads = reshape(kv, {b, t, hkv, 1, hd});
    return reshape(rep == 1 ? heads : contiguous(expand(heads, {b, t, hkv, rep, hd})), {b, t, h * hd});
  };
  const Tensor qkv = cat({reshape(q, {b, t, h * hd}), repeat(k), repeat(v)}, -1);  // (B, T, 3*H*hd)
  return attention_fn_(qkv, hd, 0.0, nullptr);  // (B, T, H*hd)
}

// ---------------------------------------------------------------- MLP
LlamaFeedForward::LlamaFeedForward(const LlamaConfig& cfg, Generator& gen) {
  const int64_t c = cfg.n_embd, f = cfg.hidden_dim();
  register_module("w1", std::make_shared<Linear>(c, f, gen, false, kInitStd));
  register_module("w2", std::make_shared<Linear>(f, c, gen, false, resid_std(cfg)));
  register_module("w3", std::make_shared<Linear>(c, f, gen, false, kInitStd));
}

Tensor LlamaFeedForward::forward(const Tensor& x) { return forward_add(x, Tensor()); }

Tensor LlamaFeedForward::forward_add(const Tensor& x, const Tensor& residual) {
  // Plain projections: their GEMMs and the SwiGLU in row chunks (linear_swiglu); otherwise
  // (column-parallel projections, a forward hook) the modules run. Same values either way.
  const Linear *l1 = plain_linear(child("w1")), *l3 = plain_linear(child("w3"));
  const Tensor h = l1 && l3 ? linear_swiglu(x, l1->weight(), l3->weight())
                            : swiglu((*child("w1"))(x), (*child("w3"))(x));  // (B, T, F)
  return project_residual(child("w2"), h, residual);  // (B, T, C)
}

// ---------------------------------------------------------------- block
LlamaBlock::LlamaBlock(const LlamaConfig& cfg, Generator& gen, std::shared_ptr<const RotaryPositions> rotary,
                       int64_t index) {
  register_module("attention_norm", std::make_shared<RMSNorm>(cfg.n_embd, cfg.norm_eps));
  register_module("attention", std::make_shared<LlamaAttention>(cfg, gen, std::move(rotary)));
  register_module("ffn_norm", std::make_shared<RMSNorm>(cfg.n_embd, cfg.norm_eps));
  if (cfg.moe.moe_block(index))
    register_module("feed_forward",
                    std::make_shared<MoE>(cfg.moe, cfg.n_embd, cfg.moe.hidden > 0 ? cfg.moe.hidden : cfg.hidden_dim(),
                                          ExpertActivation::swiglu, kInitStd, resid_std(cfg), gen));
  else
    register_module("feed_forward", std::make_shared<LlamaFeedForward>(cfg, gen));
}

Tensor LlamaBlock::forward(const Tensor& x) {
  // The residual adds join wo's and w2's GEMMs where they can (residual_fusion.h).
  Tensor h;
  {
    const Tensor a = (*child("attention_norm"))(x);  // released before the MLP runs
    if (auto* attn = residual_fusable<LlamaAttention>(child("attention"), x))
      h = attn->traced([&] { return attn->forward_add(a, x); });
    else
      h = x + (*child("attention"))(a);
  }
  const Tensor m = (*child("ffn_norm"))(h);
  if (auto* ff = residual_fusable<LlamaFeedForward>(child("feed_forward"), h))
    return ff->traced([&] { return ff->forward_add(m, h); });
  return h + (*child("feed_forward"))(m);
}

// ---------------------------------------------------------------- model
Llama::Llama(const LlamaConfig& cfg, Generator& gen) : cfg_(cfg), rotary_(std::make_shared<RotaryPositions>()) {
  cfg.check();
  rotary_->inv_freq = rope_inv_freq(cfg.head_dim(), cfg.rope_theta, cfg.rope_scaling);
  register_module("tok_embeddings", std::make_shared<Embedding>(cfg.vocab, cfg.n_embd, gen, kInitStd));
  auto layers = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < cfg.n_layer; ++i) layers->push_back(std::make_shared<LlamaBlock>(cfg, gen, rotary_, i));
  register_module("norm", std::make_shared<RMSNorm>(cfg.n_embd, cfg.norm_eps));
  if (!cfg.tie_weights) register_module("output", std::make_shared<Linear>(cfg.n_embd, cfg.vocab, gen, false, kInitStd));
}

void Llama::set_lm_hooks(LmHooks h) {
  hooks_ = std::move(h);
  rotary_->positions = hooks_.positions;
}

std::shared_ptr<ModuleList> Llama::blocks() const {
  auto l = std::dynamic_pointer_cast<ModuleList>(child("layers"));
  STRATA_CHECK(l != nullptr, "[Llama] child 'layers' is not a ModuleList of blocks");
  return l;
}

Tensor Llama::run_block(const std::shared_ptr<Module>& blk, const Tensor& x) {
  if (!cfg_.checkpoint) return (*blk)(x);
  // No dropout and no generator: the recompute in backward is the same function of x.
  return recompute_in_backward([blk](const Tensor& in) { return (*blk)(in); }, x, {});
}

Tensor Llama::embed(const Tensor& full_idx) {
  STRATA_CHECK(full_idx.dim() == 2 && (full_idx.dtype() == DType::i64 || full_idx.dtype() == DType::i32),
               "[Llama] expects idx (B, T) of i64, got ", full_idx.str());
  STRATA_CHECK(full_idx.size(1) >= 1 && full_idx.size(1) <= cfg_.block_size, "[Llama] sequence length ",
               full_idx.size(1), " exceeds block_size ", cfg_.block_size);
  // Context parallelism: this rank's part of every sequence; the positions the rotary
  // embedding uses come from the same hook pair (rotary_->positions).
  const Tensor idx = hooks_.shard_sequence ? hooks_.shard_sequence(full_idx) : full_idx;  // (B, T_local)
  Tensor x = (*child("tok_embeddings"))(idx);                                              // (B, T_local, C)
  return hooks_.enter_blocks ? hooks_.enter_blocks(x) : x;
}

Tensor Llama::finish(const Tensor& x) {
  Tensor y = (*child("norm"))(x);
  return hooks_.leave_blocks ? hooks_.leave_blocks(y) : y;
}

Tensor Llama::head(const Tensor& x) {
  if (hooks_.logits) return hooks_.logits(x, parameter(head_weight_name()));
  if (cfg_.tie_weights) return linear(x, parameter("tok_embeddings.weight"), Tensor());  // (B,T,C) @ (V,C)^T
  return (*child("output"))(x);
}

Tensor Llama::features(const Tensor& idx) {
  Tensor x = embed(idx);
  for (const auto& [name, blk] : blocks()->named_children()) x = run_block(blk, x);
  return finish(x);
}

Tensor Llama::forward(const Tensor& idx) { return head(features(idx)); }

Tensor Llama::loss(const Tensor& idx, const Tensor& targets, int64_t ignore_index) {
  STRATA_CHECK(targets.shape() == idx.shape(), "[Llama::loss] targets ", shape_str(targets.shape()),
               " do not match idx ", shape_str(idx.shape()));
  const Tensor tg = hooks_.shard_sequence ? hooks_.shard_sequence(targets) : targets;
  if (hooks_.loss)  // from vocabulary-sharded logits, never the whole (B*T, V)
    return hooks_.loss(reshape(features(idx), {-1, cfg_.n_embd}), parameter(head_weight_name()),
                       ops::reshape(tg, {-1}), ignore_index);
  return cross_entropy(reshape(forward(idx), {-1, cfg_.vocab}), ops::reshape(tg, {-1}), ignore_index);
}

Tensor Llama::forward_stage(const Tensor& in, int64_t begin, int64_t end, bool first, bool last) {
  Tensor x = first ? embed(in) : in;
  const std::shared_ptr<ModuleList> l = blocks();
  for (int64_t i = begin; i < end; ++i) x = run_block(l->child(std::to_string(i)), x);
  if (!last) return x;
  x = finish(x);
  return hooks_.loss ? x : head(x);  // stage_loss() takes the features under a loss hook
}

Tensor Llama::stage_loss(const Tensor& last_out, const Tensor& full_targets) const {
  const Tensor targets = hooks_.shard_sequence ? hooks_.shard_sequence(full_targets) : full_targets;
  if (hooks_.loss)
    return hooks_.loss(reshape(last_out, {-1, cfg_.n_embd}), parameter(head_weight_name()), ops::reshape(targets, {-1}),
                       -1);
  return cross_entropy(reshape(last_out, {-1, last_out.size(last_out.dim() - 1)}), ops::reshape(targets, {-1}), -1);
}

}  // namespace strata::nn
