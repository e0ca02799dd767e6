// The Llama's planner description (see llama_spec.h).
#include <strata/nn/llama_spec.h>

#include <algorithm>

#include <string>

#include <strata/core/error.h>
#include <strata/nn/llama_plans.h>

namespace strata::nn {

// Per tensor the autograd graph keeps (N = b·T rows, C = n_embd, H heads, F the SwiGLU
// width, f32; "/tp" where tensor parallelism splits it, "/sp" where sequence parallelism
// does):
//   block:  its input x (N·C/sp, kept by attention_norm) and rstd (N/sp), the norm's
//           output (N·C, kept by wq, wk, wv; under SP each of the three column-parallel
//           projections all-gathers the shard itself and keeps its own N·C copy, 3 N·C),
//           the packed rotated q|k|v
//           of H query and Hkv key/value heads (N·C/tp (1 + 2 Hkv/H), kept by the
//           attention core, which reads the key/value heads in place), the rows'
//           log-sum-exp (b·H/tp·T), the attention output (N·C/tp, kept by wo), the
//           residual sum h (N·C/sp) and ffn_norm's rstd (N/sp) and output (N·C; 2 N·C under
//           SP, gathered by w1 and w3 each), the gate
//           and up projections (2N·F/tp, kept by SwiGLU) and its output (N·F/tp, kept by
//           w2). The rotary embedding keeps nothing (its backward is the inverse rotation).
//   last:   norm's input and rstd, its output (N·C) and the loss's probabilities (N·V/tp).
// With full recomputation a block keeps only its input until its backward recomputes it;
// with selective it keeps q|k|v as projected and recomputes rotary and the attention core.
// (Context parallelism's ring attention takes k, v repeated to H heads, 3N·C/tp; the
// activation query has no cp, so the sum does not count that.) One recomputation's bytes are counted apart (llama_recompute_bytes).
// An MoE block (moe_layers of them) keeps moe_activation_bytes() (moe_spec.cpp) instead of
// the gate, up and SwiGLU outputs (3N·F/tp); the MoE is never tp-split.
int64_t llama_activation_bytes(const LlamaActivationInput& a) {
  STRATA_CHECK(a.batch > 0 && a.seq > 0 && a.embd > 0 && a.heads > 0 && a.vocab > 0 && a.hidden > 0 &&
                   a.layers >= 0 && a.tp >= 1,
               "[plan] activation sizes must be positive");
  const bool sp = a.sequence_parallel && a.tp > 1;
  const int64_t tp = a.tp, spd = sp ? tp : 1;
  const int64_t n = a.batch * a.seq, nc = n * a.embd, nf = n * a.hidden;
  const int64_t att = a.batch * (a.heads / tp) * a.seq;  // the fused attention's log-sum-exp
  const int64_t qkv = nc / tp * (a.heads + 2 * a.kv_heads) / a.heads;  // q|k|v: H + 2 Hkv heads
  const int64_t block = nc / spd + n / spd + (sp ? 3 : 1) * nc  // x, attention_norm's rstd and output
                        + qkv + att + nc / tp                    // q|k|v, log-sum-exp, attention output
                        + nc / spd + n / spd + (sp ? 2 : 1) * nc // h, ffn_norm
                        + 3 * nf / tp;                 // gate, up, SwiGLU output
  // Selective: the projections' q|k|v side by side (as large) instead of the packed rotated
  // q|k|v and the log-sum-exp.
  const int64_t kept_core = qkv;
  STRATA_CHECK(a.moe_layers >= 0 && a.moe_layers <= a.layers, "[plan] ", a.moe_layers, " MoE blocks of ", a.layers);
  const int64_t moe_delta = a.moe_layers > 0 ? moe_activation_bytes(a.moe) - 3 * nf / tp * 4 : 0;
  int64_t bytes = a.checkpoint  ? a.layers * (nc / spd) * 4
                  : a.selective ? a.layers * (block - qkv - att + kept_core) * 4 + a.moe_layers * moe_delta
                                : a.layers * block * 4 + a.moe_layers * moe_delta;
  if (a.last) bytes += (nc / spd + n / spd + nc + n * (a.vocab / tp)) * 4;
  if (a.pipeline) bytes += (a.last ? n * (a.vocab / tp) : nc) * 4;
  return bytes;
}

int64_t llama_recompute_bytes(const LlamaActivationInput& a) {
  if ((!a.checkpoint && !a.selective) || a.layers == 0) return 0;
  const int64_t tp = a.tp, nc = a.batch * a.seq * a.embd, att = a.batch * (a.heads / tp) * a.seq;
  const int64_t qkv = nc / tp * (a.heads + 2 * a.kv_heads) / a.heads;
  if (a.selective) return (qkv + att) * 4;  // one block's packed q|k|v and log-sum-exp
  return one_block_recompute_bytes(a, llama_activation_bytes);
}

// As gpt_backward_transient_bytes: the residual stream's pending gradient (N·C/sp) and w1's
// or w3's weight gradient (C·F/tp); SwiGLU's input gradients are written over the gate and
// up projections (SavedTensor::take). On the last stage the loss's gradient (N·V), when larger.
int64_t llama_backward_transient_bytes(const LlamaActivationInput& a) {
  const int64_t n = a.batch * a.seq, tp = a.tp, sp = a.sequence_parallel && tp > 1 ? tp : 1;
  return backward_transient_bytes((n * a.embd / sp + a.embd * a.hidden / tp) * 4, a);
}

ModelSpec llama_spec(const LlamaConfig& cfg) {
  cfg.check();
  const int64_t c = cfg.n_embd, v = cfg.vocab, t = cfg.block_size, hd = cfg.head_dim();
  const int64_t q = cfg.n_head * hd, kv = cfg.kv_heads() * hd, f = cfg.hidden_dim();
  const int64_t moe_hidden = cfg.moe.hidden > 0 ? cfg.moe.hidden : f;  // as LlamaBlock builds it
  std::vector<ParamSpec> ps;
  ps.reserve(size_t(9 * cfg.n_layer + 3));
  add_param(ps, "tok_embeddings.weight", {v, c}, cfg.tie_weights ? StagePart::tied : StagePart::first);
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    add_param(ps, p + "attention_norm.weight", {c}, StagePart::block, l);
    add_param(ps, p + "attention.wq.weight", {q, c}, StagePart::block, l);
    add_param(ps, p + "attention.wk.weight", {kv, c}, StagePart::block, l);
    add_param(ps, p + "attention.wv.weight", {kv, c}, StagePart::block, l);
    add_param(ps, p + "attention.wo.weight", {c, q}, StagePart::block, l);
    add_param(ps, p + "ffn_norm.weight", {c}, StagePart::block, l);
    if (cfg.moe.moe_block(l)) {
      add_moe_params(ps, p + "feed_forward", cfg.moe, c, moe_hidden, ExpertActivation::swiglu, l);
      continue;
    }
    add_param(ps, p + "feed_forward.w1.weight", {f, c}, StagePart::block, l);
    add_param(ps, p + "feed_forward.w2.weight", {c, f}, StagePart::block, l);
    add_param(ps, p + "feed_forward.w3.weight", {f, c}, StagePart::block, l);
  }
  add_param(ps, "norm.weight", {c}, StagePart::last);
  if (!cfg.tie_weights) add_param(ps, "output.weight", {v, c}, StagePart::last);
  const TpPlan plan = llama_tp_plan(cfg);  // sequence parallelism shards no parameter
  for (ParamSpec& p : ps) p.tp_sharded = tp_shards(plan, p.name);

  ModelSpec s = ModelSpec::from_params(std::move(ps));
  set_moe_costs(s, cfg.moe, c, t);
  set_decoder_lm_costs(s, cfg.n_layer, c, t);
  s.tp_widths = {cfg.kv_heads(), f};
  s.activation_bytes = [cfg, f, moe_hidden](const RankActivationQuery& rq) {
    const LlamaActivationInput blocks{.batch = rq.batch, .seq = cfg.block_size, .embd = cfg.n_embd,
                                      .heads = cfg.n_head, .kv_heads = cfg.kv_heads(), .hidden = f,
                                      .vocab = cfg.vocab, .layers = rq.layers, .first = false, .last = false,
                                      .tp = rq.tp, .sequence_parallel = rq.sequence_parallel,
                                      .checkpoint = cfg.checkpoint, .selective = cfg.selective, .pipeline = false,
                                      .moe_layers = rq.moe_layers,
                                      .moe = moe_activation_input(cfg.moe, rq.batch * cfg.block_size, cfg.n_embd,
                                                                  moe_hidden, ExpertActivation::swiglu, rq.ep)};
    return rank_activation_bytes(rq, blocks, llama_activation_bytes, llama_backward_transient_bytes,
                                 llama_recompute_bytes);
  };
  return s;
}

}  // namespace strata::nn
