// The GPT's planner description (see gpt_spec.h): shapes from the config, the parts the
// TP plan and the pipeline split give them, FLOPs and activation bytes.
#include <strata/nn/gpt_spec.h>

#include <algorithm>

#include <string>

#include <strata/core/error.h>
#include <strata/nn/gpt_plans.h>

namespace strata::nn {

// Per tensor the autograd graph keeps (N = b·T rows, C = n_embd, H heads, f32 = 4 bytes;
// "/tp" where tensor parallelism splits it, "/sp" where sequence parallelism does):
//   block:  its input x (N·C/sp, kept by ln_1), ln_1's mean and rstd (2N/sp) and output
//           (N·C/sp), qkv (3N·C/tp), the fused attention's rows' log-sum-exp (b·H/tp·T)
//           and output y (N·C/tp), the residual sum h (N·C/sp, kept by ln_2), ln_2's stats
//           and output (as ln_1's), c_fc's output (4N·C/tp, kept by GELU) and GELU's
//           (4N·C/tp, kept by c_proj): 16 N·C + 4N + b·H·T without tp. Under SP a
//           LayerNorm output is kept only all-gathered (N·C, by the column-parallel
//           linear after it), so it stays N·C while x, h and the statistics shrink. With
//           dropout p > 0 the attention runs unfused: the scaled q (N·C/tp), the softmax
//           output and the dropped probabilities (2 b·H/tp·T² instead of the log-sum-exp)
//           and u8 masks (b·H/tp·T², and N·C/sp for each of the 2 residual dropouts).
//   first:  the positions (T i64) and the embeddings' dropout mask (N·C/sp u8).
//   last:   ln_f's input and stats (N·C/sp, 2N/sp) and output (N·C, gathered under SP),
//           and the loss's probabilities (N·V/tp).
// With model.checkpoint_activations full a block keeps only its input (N·C/sp) until its
// backward recomputes it; the recomputation holds one block's worth at a time. With
// selective the attention core's tensors (the log-sum-exp; with dropout the probabilities,
// the scaled q, the dropped probabilities and their mask) are not kept, and one block's are
// recomputed at a time in backward.
// An MoE block (moe_layers of them) keeps moe_activation_bytes() (moe_spec.cpp) instead of
// c_fc's and GELU's outputs (8N·C/tp) and the MLP's dropout mask (N·C/sp u8); the MoE is
// never tp-split.
// Megatron-LM's count (16-bit, s·b·h·(34 + 5·a·s/h) bytes per layer) is the same list in
// 2-byte elements, less the LayerNorm statistics and our scaled-q copy (docs/planner.md).
int64_t gpt_activation_bytes(const GptActivationInput& a) {
  STRATA_CHECK(a.batch > 0 && a.seq > 0 && a.embd > 0 && a.heads > 0 && a.vocab > 0 && a.layers >= 0 && a.tp >= 1,
               "[plan] activation sizes must be positive");
  const bool sp = a.sequence_parallel && a.tp > 1;
  const int64_t tp = a.tp, spd = sp ? tp : 1;
  const int64_t n = a.batch * a.seq, nc = n * a.embd, att = a.batch * (a.heads / tp) * a.seq * a.seq;
  const int64_t stats = a.dropout ? att : a.batch * (a.heads / tp) * a.seq;  // probabilities or log-sum-exp
  // Under SP a LayerNorm's output shard is all-gathered and only the gathered N·C is kept
  // (by the column-parallel linear), so its output counts N·C with or without SP.
  int64_t block = nc / spd + 2 * n / spd + nc      // x, ln_1 stats and output
                  + 3 * nc / tp + stats + nc / tp  // qkv, the core's statistics, y
                  + nc / spd + 2 * n / spd + nc    // h, ln_2
                  + 8 * nc / tp;                   // c_fc and GELU outputs
  int64_t block_u8 = 0;
  if (a.dropout) {
    block += nc / tp + att;
    block_u8 += att + 2 * nc / spd;
  }
  // The attention core's own tensors: its statistics, and with dropout the scaled q, the
  // dropped probabilities and their mask.
  const int64_t core = stats + (a.dropout ? nc / tp + att : 0), core_u8 = a.dropout ? att : 0;
  STRATA_CHECK(a.moe_layers >= 0 && a.moe_layers <= a.layers, "[plan] ", a.moe_layers, " MoE blocks of ", a.layers);
  // An MoE block's MLP part, less the dense one's.
  const int64_t moe_delta =
      a.moe_layers > 0 ? moe_activation_bytes(a.moe) - 8 * nc / tp * 4 - (a.dropout ? nc / spd : 0) : 0;
  int64_t bytes = 0;
  if (a.checkpoint)
    bytes = a.layers * (nc / spd) * 4;
  else if (a.selective)
    bytes = a.layers * ((block - core) * 4 + block_u8 - core_u8) + a.moe_layers * moe_delta;
  else
    bytes = a.layers * (block * 4 + block_u8) + a.moe_layers * moe_delta;
  if (a.first) bytes += a.seq * 8 + (a.dropout ? nc / spd : 0);
  if (a.last) bytes += (nc / spd + 2 * n / spd + nc + n * (a.vocab / tp)) * 4;
  if (a.pipeline) bytes += (a.last ? n * (a.vocab / tp) : nc) * 4;
  return bytes;
}

int64_t gpt_recompute_bytes(const GptActivationInput& a) {
  if ((!a.checkpoint && !a.selective) || a.layers == 0) return 0;
  const int64_t tp = a.tp, nc = a.batch * a.seq * a.embd, att = a.batch * (a.heads / tp) * a.seq * a.seq;
  const int64_t stats = a.dropout ? att : a.batch * (a.heads / tp) * a.seq;
  if (a.selective) return (stats + (a.dropout ? nc / tp + att : 0)) * 4 + (a.dropout ? att : 0);  // one core
  return one_block_recompute_bytes(a, gpt_activation_bytes);
}

// What a backward holds on top of the stored activations, at its largest. In a block: the
// residual stream's pending gradient (N·C/sp) and an MLP weight gradient (4C²/tp) before it
// is accumulated; the MLP's own gradients take no new memory (GELU's is written over c_fc's
// output and c_proj's input gradient over GELU's output: SavedTensor::take). On the last
// stage the loss's gradient (N·V) while its probabilities are still held, when larger.
// Once per rank (one backward runs at a time); what the backward frees before its largest
// transient (the head's tensors before the blocks' backward, the backwarded micro-batch's
// own activations as it proceeds) is not subtracted (PlannerMemory measures each rank's
// peak).
int64_t gpt_backward_transient_bytes(const GptActivationInput& a) {
  const int64_t n = a.batch * a.seq, tp = a.tp, sp = a.sequence_parallel && tp > 1 ? tp : 1;
  return backward_transient_bytes((n * a.embd / sp + 4 * a.embd * a.embd / tp) * 4, a);
}

namespace {


// A Linear (out, in) and its bias; a LayerNorm's weight and bias.
void add_linear(std::vector<ParamSpec>& out, const std::string& path, int64_t in, int64_t outf, bool bias,
                StagePart part, int64_t block) {
  add_param(out, path + ".weight", {outf, in}, part, block);
  if (bias) add_param(out, path + ".bias", {outf}, part, block);
}

void add_layer_norm(std::vector<ParamSpec>& out, const std::string& path, int64_t dim, bool bias, StagePart part,
                    int64_t block = -1) {
  add_param(out, path + ".weight", {dim}, part, block);
  if (bias) add_param(out, path + ".bias", {dim}, part, block);
}

}  // namespace

ModelSpec gpt_spec(const GPTConfig& cfg) {
  const int64_t c = cfg.n_embd, v = cfg.vocab, t = cfg.block_size;
  const int64_t moe_hidden = cfg.moe.hidden > 0 ? cfg.moe.hidden : 4 * c;  // as GPTBlock builds it
  std::vector<ParamSpec> ps;
  ps.reserve(size_t(12 * cfg.n_layer + 5));
  add_param(ps, "wte.weight", {v, c}, cfg.tie_weights ? StagePart::tied : StagePart::first);
  add_param(ps, "wpe.weight", {t, c}, StagePart::first);
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    add_layer_norm(ps, h + "ln_1", c, cfg.bias, StagePart::block, l);
    add_linear(ps, h + "attn.c_attn", c, 3 * c, cfg.bias, StagePart::block, l);
    add_linear(ps, h + "attn.c_proj", c, c, cfg.bias, StagePart::block, l);
    add_layer_norm(ps, h + "ln_2", c, cfg.bias, StagePart::block, l);
    if (cfg.moe.moe_block(l)) {
      add_moe_params(ps, h + "mlp", cfg.moe, c, moe_hidden, ExpertActivation::gelu, l);
      continue;
    }
    add_linear(ps, h + "mlp.c_fc", c, 4 * c, cfg.bias, StagePart::block, l);
    add_linear(ps, h + "mlp.c_proj", 4 * c, c, cfg.bias, StagePart::block, l);
  }
  add_layer_norm(ps, "ln_f", c, cfg.bias, StagePart::last);
  if (!cfg.tie_weights) add_param(ps, "lm_head.weight", {v, c}, StagePart::last);
  const TpPlan plan = gpt_tp_plan(cfg);  // sequence parallelism shards no parameter
  for (ParamSpec& p : ps) p.tp_sharded = tp_shards(plan, p.name);

  ModelSpec s = ModelSpec::from_params(std::move(ps));
  set_moe_costs(s, cfg.moe, c, t);
  set_decoder_lm_costs(s, cfg.n_layer, c, t);
  s.activation_bytes = [cfg, moe_hidden](const RankActivationQuery& q) {
    // Interleaved: a rank's chunks are alike; each in-flight (micro-batch, chunk) keeps
    // one chunk's activations (the first/last extras counted once each).
    const GptActivationInput blocks{.batch = q.batch, .seq = cfg.block_size, .embd = cfg.n_embd, .heads = cfg.n_head,
                                    .vocab = cfg.vocab, .layers = q.layers, .first = false, .last = false, .tp = q.tp,
                                    .sequence_parallel = q.sequence_parallel, .dropout = cfg.dropout > 0,
                                    .checkpoint = cfg.checkpoint, .selective = cfg.selective, .pipeline = false,
                                    .moe_layers = q.moe_layers,
                                    .moe = moe_activation_input(cfg.moe, q.batch * cfg.block_size, cfg.n_embd,
                                                                moe_hidden, ExpertActivation::gelu, q.ep)};
    return rank_activation_bytes(q, blocks, gpt_activation_bytes, gpt_backward_transient_bytes, gpt_recompute_bytes);
  };
  return s;
}

}  // namespace strata::nn
