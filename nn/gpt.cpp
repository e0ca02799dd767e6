// GPT model: attention, MLP, block and the model, with per-block activation checkpointing.
#include <strata/nn/gpt.h>

#include <cmath>
#include <limits>
#include <typeinfo>

#include <strata/autograd/autocast.h>
#include <strata/autograd/grad_mode.h>
#include <strata/nn/activation.h>
#include <strata/nn/dropout.h>
#include <strata/nn/embedding.h>
#include <strata/nn/linear.h>
#include <strata/nn/normalization.h>
#include <strata/nn/recompute.h>
#include <strata/nn/residual_fusion.h>

namespace strata::nn {
namespace {
constexpr double kInitStd = 0.02;
double resid_std(const GPTConfig& c) { return kInitStd / std::sqrt(2.0 * double(c.n_layer)); }

// residual + drop(proj(y)) (residual undefined: drop(proj(y))). When proj is a plain
// Linear and drop does nothing, neither with forward hooks (ZeRO-3 gathers are hooks),
// the bias and the residual go into one pass after proj's bias-free GEMM
// (linear_residual), as Megatron-LM's bias_dropout_add fusion; tensor parallelism swaps
// proj for a RowParallelLinear and keeps the unfused ops. Same values either way.
// proj as a plain Linear when the residual add may be fused after its GEMM, else null.
const Linear* fusable_proj(Module& proj, Module& drop, const Tensor& residual) {
  const Linear* lin = plain_module<Linear>(proj);
  const Dropout* d = plain_module<Dropout>(drop);
  return residual.defined() && lin && d && (d->p() == 0 || !d->is_training()) ? lin : nullptr;
}

Tensor project_residual(Module& proj, Module& drop, const Tensor& y, const Tensor& residual) {
  if (const Linear* lin = fusable_proj(proj, drop, residual))
    return proj.traced([&] { return linear_residual(y, lin->weight(), lin->bias(), residual); });
  Tensor out = drop(proj(y));
  return residual.defined() ? residual + out : out;
}

// (s, ln(s)) with s = project_residual(...): where the residual add fuses, the LayerNorm
// joins its pass (linear_residual_layer_norm); else ln(s) is left undefined for the caller.
std::pair<Tensor, Tensor> project_residual_norm(Module& proj, Module& drop, const Tensor& y, const Tensor& residual,
                                                const LayerNorm& ln) {
  if (const Linear* lin = fusable_proj(proj, drop, residual)) {
    Tensor z;
    Tensor s = proj.traced([&] {
      auto [sum, normed] =
          linear_residual_layer_norm(y, lin->weight(), lin->bias(), residual, ln.weight(), ln.bias(), ln.eps());
      z = normed;
      return sum;
    });
    return {s, z};
  }
  return {project_residual(proj, drop, y, residual), Tensor()};
}

}  // namespace

// ---------------------------------------------------------------- attention
CausalSelfAttention::CausalSelfAttention(const GPTConfig& cfg, Generator& gen)
    : head_dim_(cfg.n_embd / cfg.n_head), selective_(cfg.selective) {
  const int64_t c = cfg.n_embd;
  register_module("c_attn", std::make_shared<Linear>(c, 3 * c, gen, cfg.bias, kInitStd));
  register_module("c_proj", std::make_shared<Linear>(c, c, gen, cfg.bias, resid_std(cfg)));
  register_module("attn_dropout", std::make_shared<Dropout>(cfg.dropout, gen));
  register_module("resid_dropout", std::make_shared<Dropout>(cfg.dropout, gen));
}

const Tensor& CausalSelfAttention::causal_mask(int64_t t) {
  if (!mask_.defined() || mask_.size(0) != t) mask_ = ops::causal_mask(t);
  return mask_;
}

double CausalSelfAttention::attention_dropout() const {
  const auto* d = dynamic_cast<const Dropout*>(child("attn_dropout").get());
  return d ? d->p() : 0.0;
}

Tensor CausalSelfAttention::forward(const Tensor& x) { return forward_impl(x, Tensor()); }
Tensor CausalSelfAttention::forward_add(const Tensor& x, const Tensor& residual) {
  return forward_impl(x, residual);
}

std::pair<Tensor, Tensor> CausalSelfAttention::forward_add_norm(const Tensor& x, const Tensor& residual,
                                                                 const LayerNorm& ln) {
  return project_residual_norm(*child("c_proj"), *child("resid_dropout"), core_of(x), residual, ln);
}

Tensor CausalSelfAttention::forward_impl(const Tensor& x, const Tensor& residual) {
  return project_residual(*child("c_proj"), *child("resid_dropout"), core_of(x), residual);
}

Tensor CausalSelfAttention::core_of(const Tensor& x) {
  STRATA_CHECK(x.dim() == 3, "[CausalSelfAttention] expects (B, T, C), got ", shape_str(x.shape()));
  Tensor qkv = (*child("c_attn"))(x);  // (B, T, 3*Hl*hd); x may be a sequence shard (B, T/tp, C)
  const int64_t cl = qkv.size(-1) / 3;
  STRATA_CHECK(qkv.size(-1) == 3 * cl && cl % head_dim_ == 0, "[CausalSelfAttention] c_attn output width ",
               qkv.size(-1), " is not 3 * heads * head_dim (head_dim ", head_dim_, ")");
  // Selective recomputation: the core's (B, Hl, T, T) probabilities (and their dropout)
  // are not kept; qkv and y are, as c_attn's output and c_proj's input.
  return selective_ ? recompute_in_backward([this](const Tensor& q) { return core(q); }, qkv,
                                            child("attn_dropout")->generators())
                    : core(qkv);
}

Tensor CausalSelfAttention::core(const Tensor& qkv) {
  const int64_t b = qkv.size(0), t = qkv.size(1), hd = head_dim_;
  const int64_t cl = qkv.size(-1) / 3, h = cl / hd;
  // One fused op (no head split/merge copies, the causal softmax on the lower triangle
  // only; under autocast a 16-bit op) unless the probabilities need dropout.
  const std::shared_ptr<Module> attn_dropout = child("attn_dropout");
  const auto* attn_drop = dynamic_cast<const Dropout*>(attn_dropout.get());
  if (attention_fn_) {  // replaced (ring attention): it draws the dropout masks from our generator
    const bool drop = attn_drop && attn_drop->p() > 0 && attn_drop->is_training();
    Generator* gen = drop ? attn_dropout->own_generator() : nullptr;
    return attention_fn_(qkv, hd, drop ? attn_drop->p() : 0.0, gen);
  }
  if (attn_drop && (attn_drop->p() == 0 || !attn_drop->is_training()))
    return causal_attention(qkv, hd);
  auto parts = split(qkv, {cl, cl, cl}, -1);  // 3 x (B, T, Hl*hd)
  auto heads = [&](const Tensor& p) { return transpose(reshape(p, {b, t, h, hd}), 1, 2); };  // (B, Hl, T, hd)
  Tensor q = mul(heads(parts[0]), 1.0 / std::sqrt(double(hd)));  // scale q: fewer elements than scores
  Tensor k = heads(parts[1]), v = heads(parts[2]);
  Tensor att = matmul(q, transpose(k, -1, -2));  // (B, Hl, T, T)
  const Tensor& mask = causal_mask(t);  // built on the host, then cached on qkv's device
  if (mask.device() != qkv.device()) mask_ = mask.to(qkv.device());
  att = masked_fill(att, mask_, -std::numeric_limits<double>::infinity());
  att = softmax(att, -1);
  att = (*attn_dropout)(att);
  Tensor y = matmul(att, v);                              // (B, Hl, T, hd)
  return reshape(contiguous(transpose(y, 1, 2)), {b, t, cl});  // (B, T, Hl*hd)
}

// ---------------------------------------------------------------- MLP
GPTMLP::GPTMLP(const GPTConfig& cfg, Generator& gen) {
  const int64_t c = cfg.n_embd;
  register_module("c_fc", std::make_shared<Linear>(c, 4 * c, gen, cfg.bias, kInitStd));
  register_module("gelu", std::make_shared<GELU>(true));
  register_module("c_proj", std::make_shared<Linear>(4 * c, c, gen, cfg.bias, resid_std(cfg)));
  register_module("dropout", std::make_shared<Dropout>(cfg.dropout, gen));
}

Tensor GPTMLP::forward(const Tensor& x) { return forward_impl(x, Tensor()); }
Tensor GPTMLP::forward_add(const Tensor& x, const Tensor& residual) { return forward_impl(x, residual); }
std::pair<Tensor, Tensor> GPTMLP::forward_add_norm(const Tensor& x, const Tensor& residual, const LayerNorm& ln) {
  return project_residual_norm(*child("c_proj"), *child("dropout"), activation(x), residual, ln);
}

Tensor GPTMLP::forward_impl(const Tensor& x, const Tensor& residual) {
  return project_residual(*child("c_proj"), *child("dropout"), activation(x), residual);  // (B, T, C)
}

Tensor GPTMLP::activation(const Tensor& x) {
  // c_fc's bias and the GELU run as one pass after a bias-free GEMM (linear_gelu), unless
  // c_fc was swapped for another layer (tensor parallelism) or either child has forward
  // hooks (ZeRO-3 gathers), which must then see their own calls. Same values either way.
  const Linear* fc = plain_module<Linear>(*child("c_fc"));
  const GELU* act = plain_module<GELU>(*child("gelu"));
  Tensor h;
  if (fc && act)
    h = linear_gelu(x, fc->weight(), fc->bias(), act->tanh_approx());  // (B, T, 4C)
  else
    h = (*child("gelu"))((*child("c_fc"))(x));
  return h;
}

// ---------------------------------------------------------------- block
GPTBlock::GPTBlock(const GPTConfig& cfg, Generator& gen, int64_t index) {
  register_module("ln_1", std::make_shared<LayerNorm>(cfg.n_embd, 1e-5, cfg.bias));
  register_module("attn", std::make_shared<CausalSelfAttention>(cfg, gen));
  register_module("ln_2", std::make_shared<LayerNorm>(cfg.n_embd, 1e-5, cfg.bias));
  if (cfg.moe.moe_block(index))
    register_module("mlp", std::make_shared<MoE>(cfg.moe, cfg.n_embd, cfg.moe.hidden > 0 ? cfg.moe.hidden : 4 * cfg.n_embd,
                                                 ExpertActivation::gelu, kInitStd, resid_std(cfg), gen));
  else
    register_module("mlp", std::make_shared<GPTMLP>(cfg, gen));
}

Tensor GPTBlock::forward(const Tensor& x) { return forward_norm_next(x, Tensor(), nullptr).first; }

std::pair<Tensor, Tensor> GPTBlock::forward_norm_next(const Tensor& x, const Tensor& ln_1_x, const LayerNorm* next) {
  // x + attn(ln_1(x)), the residual added inside attn's output projection when it can be.
  // ln_1(x) is released before the MLP runs, as the temporary of `x + attn(ln_1(x))` was:
  // under autocast nothing saves the f32 tensor, and holding it raised the forward's peak.
  // Where attn's residual add fuses and ln_2 is a plain LayerNorm, ln_2 joins that pass too
  // (linear_residual_layer_norm; m is then ln_2(h) already).
  Tensor h, m;
  {
    const Tensor a = ln_1_x.defined() ? ln_1_x : (*child("ln_1"))(x);
    if (auto* attn = residual_fusable<CausalSelfAttention>(child("attn"), x)) {
      if (const auto* ln2 = residual_fusable<LayerNorm>(child("ln_2"), x))
        h = attn->traced([&] {
          auto [sum, normed] = attn->forward_add_norm(a, x, *ln2);
          m = normed;
          return sum;
        });
      else
        h = attn->traced([&] { return attn->forward_add(a, x); });
    } else {
      h = x + (*child("attn"))(a);
    }
  }
  if (!m.defined()) m = (*child("ln_2"))(h);
  // h + mlp(m), and with `next` its LayerNorm in the same pass where the residual fuses
  if (auto* mlp = residual_fusable<GPTMLP>(child("mlp"), h)) {
    if (!next) return {mlp->traced([&] { return mlp->forward_add(m, h); }), Tensor()};
    Tensor z;
    Tensor out = mlp->traced([&] {
      auto [sum, normed] = mlp->forward_add_norm(m, h, *next);
      z = normed;
      return sum;
    });
    return {out, z};
  }
  return {h + (*child("mlp"))(m), Tensor()};
}

// ---------------------------------------------------------------- model
GPT::GPT(const GPTConfig& cfg, Generator& gen) : cfg_(cfg) {
  STRATA_CHECK(cfg.vocab > 0 && cfg.block_size > 0 && cfg.n_layer > 0 && cfg.n_head > 0 && cfg.n_embd > 0,
               "[GPT] vocab, block_size, n_layer, n_head, n_embd must be positive");
  STRATA_CHECK(cfg.n_embd % cfg.n_head == 0, "[GPT] n_embd ", cfg.n_embd, " is not divisible by n_head ",
               cfg.n_head);
  register_module("wte", std::make_shared<Embedding>(cfg.vocab, cfg.n_embd, gen, kInitStd));
  register_module("wpe", std::make_shared<Embedding>(cfg.block_size, cfg.n_embd, gen, kInitStd));
  register_module("drop", std::make_shared<Dropout>(cfg.dropout, gen));
  auto h = register_module("h", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < cfg.n_layer; ++i) h->push_back(std::make_shared<GPTBlock>(cfg, gen, i));
  register_module("ln_f", std::make_shared<LayerNorm>(cfg.n_embd, 1e-5, cfg.bias));
  if (!cfg.tie_weights)
    register_module("lm_head", std::make_shared<Linear>(cfg.n_embd, cfg.vocab, gen, false, kInitStd));
}

std::shared_ptr<ModuleList> GPT::blocks() const {
  auto h = std::dynamic_pointer_cast<ModuleList>(child("h"));
  STRATA_CHECK(h != nullptr, "[GPT] child 'h' is not a ModuleList of blocks");
  return h;
}

Tensor GPT::run_block(const std::shared_ptr<Module>& blk, const Tensor& x) {
  if (!cfg_.checkpoint || !grad_enabled()) return (*blk)(x);
  return recompute_in_backward([blk](const Tensor& in) { return (*blk)(in); }, x, blk->generators());
}

Tensor GPT::features(const Tensor& full_idx) {
  STRATA_CHECK(full_idx.dim() == 2 && (full_idx.dtype() == DType::i64 || full_idx.dtype() == DType::i32),
               "[GPT] expects idx (B, T) of i64, got ", full_idx.str());
  STRATA_CHECK(full_idx.size(1) >= 1 && full_idx.size(1) <= cfg_.block_size, "[GPT] sequence length ",
               full_idx.size(1), " exceeds block_size ", cfg_.block_size);
  const Tensor idx = hooks_.shard_sequence ? hooks_.shard_sequence(full_idx) : full_idx;  // (B, T_local)
  const int64_t t = idx.size(1);
  Tensor pos = hooks_.positions ? hooks_.positions(t) : ops::arange(0, double(t), 1.0, DType::i64);  // (T)
  pos = pos.to(idx.device());
  Tensor x = (*child("wte"))(idx) + (*child("wpe"))(pos);  // (B,T,C) + (T,C)
  if (hooks_.enter_blocks) x = hooks_.enter_blocks(x);
  x = (*child("drop"))(x);
  // In the order registered, whatever the blocks are named (h.0, h.1, ... in a full model).
  const std::shared_ptr<ModuleList> h = blocks();
  x = run_blocks(*h, x);
  return hooks_.leave_blocks ? hooks_.leave_blocks(x) : x;
}

// The blocks, then ln_f. Where every block is a plain GPTBlock and every LayerNorm after a
// block (the next block's ln_1, ln_f) a plain LayerNorm, and blocks are not recomputed in
// backward, each block's MLP residual add and the LayerNorm after it run as one pass
// (GPTBlock::forward_norm_next, linear_residual_layer_norm), as attn's residual and ln_2
// do inside a block: the next block starts from that normed input. Same values either way.
Tensor GPT::run_blocks(const ModuleList& h, Tensor x) {
  const auto& children = h.named_children();
  bool chain = !(cfg_.checkpoint && grad_enabled()) && residual_fusable<LayerNorm>(child("ln_f"), x);
  std::vector<GPTBlock*> blks;
  std::vector<LayerNorm*> ln_1s;
  for (const auto& [name, blk] : children) {
    auto* b = chain ? residual_fusable<GPTBlock>(blk, x) : nullptr;
    auto* ln = b ? residual_fusable<LayerNorm>(b->child("ln_1"), x) : nullptr;
    chain = chain && ln;
    blks.push_back(b);
    ln_1s.push_back(ln);
  }
  if (!chain || children.empty()) {
    for (const auto& [name, blk] : children) x = run_block(blk, x);
    return (*child("ln_f"))(x);
  }
  const auto& ln_f = static_cast<const LayerNorm&>(*child("ln_f"));
  Tensor normed;  // the next block's ln_1(x) where the previous block made it
  for (size_t i = 0; i < blks.size(); ++i) {
    const LayerNorm& next = i + 1 < blks.size() ? *ln_1s[i + 1] : ln_f;
    Tensor z;
    x = blks[i]->traced([&] {
      auto [out, nz] = blks[i]->forward_norm_next(x, normed, &next);
      z = nz;
      return out;
    });
    normed = z;
  }
  return normed.defined() ? normed : (*child("ln_f"))(x);
}

Tensor GPT::forward(const Tensor& idx) {
  Tensor x = features(idx);
  if (hooks_.logits) return hooks_.logits(x, parameter(head_weight_name()));
  if (cfg_.tie_weights) return linear(x, parameter("wte.weight"), Tensor());  // (B,T,C) @ (V,C)^T
  return (*child("lm_head"))(x);
}

Tensor GPT::loss(const Tensor& idx, const Tensor& targets, int64_t ignore_index) {
  STRATA_CHECK(targets.shape() == idx.shape(), "[GPT::loss] targets ", shape_str(targets.shape()),
               " do not match idx ", shape_str(idx.shape()));
  // Under context parallelism, this rank's targets (features() shards idx the same way).
  const Tensor tg = hooks_.shard_sequence ? hooks_.shard_sequence(targets) : targets;
  if (hooks_.loss)  // e.g. from vocabulary-sharded logits, never the whole (B*T, V)
    return hooks_.loss(reshape(features(idx), {-1, cfg_.n_embd}), parameter(head_weight_name()),
                       ops::reshape(tg, {-1}), ignore_index);
  Tensor logits = forward(idx);
  return cross_entropy(reshape(logits, {-1, cfg_.vocab}), ops::reshape(tg, {-1}), ignore_index);
}

Tensor GPT::forward_stage(const Tensor& in, int64_t begin, int64_t end, bool first, bool last) {
  Tensor x = in;
  if (first) {  // as features(): the embeddings, then (sequence parallel) this rank's shard
    // Context parallelism: this rank's part of every sequence, at its global positions;
    // every later stage then sees (B, T_local, C).
    const Tensor idx = hooks_.shard_sequence ? hooks_.shard_sequence(in) : in;
    const int64_t t = idx.size(1);
    Tensor pos = hooks_.positions ? hooks_.positions(t) : ops::arange(0, double(t), 1.0, DType::i64);
    pos = pos.to(idx.device());
    x = (*child("wte"))(idx) + (*child("wpe"))(pos);
    if (hooks_.enter_blocks) x = hooks_.enter_blocks(x);
    x = (*child("drop"))(x);
  }
  const std::shared_ptr<ModuleList> h = blocks();
  for (int64_t i = begin; i < end; ++i) x = run_block(h->child(std::to_string(i)), x);
  if (!last) return x;
  x = (*child("ln_f"))(x);
  if (hooks_.leave_blocks) x = hooks_.leave_blocks(x);
  if (hooks_.loss) return x;  // stage_loss() takes the features
  if (hooks_.logits) return hooks_.logits(x, parameter(head_weight_name()));
  return cfg_.tie_weights ? linear(x, parameter("wte.weight"), Tensor()) : (*child("lm_head"))(x);
}

Tensor GPT::stage_loss(const Tensor& last_out, const Tensor& full_targets) const {
  // Under context parallelism, this rank's targets (forward_stage sharded the tokens alike).
  const Tensor targets = hooks_.shard_sequence ? hooks_.shard_sequence(full_targets) : full_targets;
  if (hooks_.loss)
    return hooks_.loss(reshape(last_out, {-1, cfg_.n_embd}), parameter(head_weight_name()), ops::reshape(targets, {-1}),
                       -1);
  return cross_entropy(reshape(last_out, {-1, last_out.size(last_out.dim() - 1)}), ops::reshape(targets, {-1}), -1);
}

}  // namespace strata::nn
