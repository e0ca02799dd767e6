// The MoE layer's planner description (see moe_spec.h).
#include <strata/nn/moe_spec.h>

#include <strata/core/error.h>

namespace strata::nn {

void add_moe_params(std::vector<ParamSpec>& out, const std::string& path, const MoEConfig& cfg, int64_t dim,
                    int64_t hidden, ExpertActivation act, int64_t block) {
  const int64_t e = cfg.experts;
  const bool swiglu = act == ExpertActivation::swiglu;
  add_param(out, path + ".router.weight", {e, dim}, StagePart::block, block);
  const auto grouped = [&](const std::string& at, int64_t n, int64_t h, bool expert) {
    add_param(out, at + ".w1", {n, h, dim}, StagePart::block, block);
    add_param(out, at + ".w2", {n, dim, h}, StagePart::block, block);
    if (swiglu) add_param(out, at + ".w3", {n, h, dim}, StagePart::block, block);
    for (size_t i = out.size() - (swiglu ? 3 : 2); i < out.size(); ++i) out[i].expert = expert;
  };
  grouped(path + ".experts", e, hidden, true);
  if (cfg.shared_experts > 0) grouped(path + ".shared_experts", 1, cfg.shared_experts * hidden, false);
}

void set_moe_costs(ModelSpec& s, const MoEConfig& cfg, int64_t embd, int64_t seq) {
  if (!cfg.enabled()) return;
  STRATA_CHECK(s.expert_params % cfg.experts == 0, "[plan] ", s.expert_params, " expert weights are not ",
               cfg.experts, " equal experts");
  s.experts = cfg.experts;
  s.top_k = cfg.top_k;
  // Per MoE layer a token runs top_k of the E experts: k/E of the expert weights.
  s.active_params = s.total - s.expert_params / cfg.experts * (cfg.experts - cfg.top_k);
  s.a2a_per_sample = seq * cfg.top_k * embd;
}

// Per tensor one MoE block keeps (f32 unless noted; N tokens, M = N·k routed rows with k =
// top_k, E experts, H an expert's width, Hs = shared_experts·H):
//   router:   the scores (N·E, kept by the softmax or sigmoid); with the z-loss also
//             exp(logits - max) (N·E) and the log-sum-exp's input and output (2N);
//   dispatch: the gathered rows (M·C, kept by w1 and w3; under ep the received rows,
//             M·C on a balanced rank) and the routing indices (i64): each row's token
//             (M), each slot's row (N·k) and each slot's expert (N·k);
//   experts:  GELU: w1's output (M·H, kept by GELU) and GELU's (M·H, kept by w2): 2·M·H;
//             SwiGLU: w1's and w3's outputs and their product: 3·M·H;
//   combine:  the experts' outputs per slot (M·C) and the gates (N·k) of the weighted
//             sum; with norm_topk also the gates before the division and their sum
//             (N·k + N);
//   shared:   2·N·Hs (GELU) or 3·N·Hs (SwiGLU) as the experts'.
// The auxiliary loss's (B, E) counts are left out. Total:
//   4·(N·E + M·C + (2|3)·M·H + M·C + N·k [+ N·k + N] [+ N·E + 2N] + (2|3)·N·Hs) + 8·(M + 2·N·k).
int64_t moe_activation_bytes(const MoEActivationInput& a) {
  STRATA_CHECK(a.tokens > 0 && a.embd > 0 && a.experts > 0 && a.top_k > 0 && a.hidden > 0 && a.shared_hidden >= 0,
               "[plan] MoE activation sizes must be positive");
  const int64_t n = a.tokens, m = n * a.top_k, act = a.swiglu ? 3 : 2;
  int64_t f32 = n * a.experts + m * a.embd + act * m * a.hidden + m * a.embd + m;
  if (a.norm_topk) f32 += m + n;
  if (a.z_loss) f32 += n * a.experts + 2 * n;
  f32 += act * n * a.shared_hidden;
  return 4 * f32 + 8 * (m + 2 * m);
}

int64_t moe_backward_transient_bytes(const MoEActivationInput& a) {
  const int64_t m = a.tokens * a.top_k, local = a.experts / (a.ep > 0 ? a.ep : 1);
  return 4 * (2 * m * a.hidden + local * a.hidden * a.embd);
}

MoEActivationInput moe_activation_input(const MoEConfig& cfg, int64_t tokens, int64_t embd, int64_t hidden,
                                        ExpertActivation act, int ep) {
  if (!cfg.enabled()) return {};
  return {.tokens = tokens, .embd = embd, .experts = cfg.experts, .top_k = cfg.top_k, .hidden = hidden,
          .shared_hidden = cfg.shared_experts * hidden, .swiglu = act == ExpertActivation::swiglu,
          .norm_topk = cfg.norm_topk, .z_loss = cfg.z_loss_coef > 0, .ep = ep};
}

}  // namespace strata::nn
