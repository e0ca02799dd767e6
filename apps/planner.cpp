// The layout planner (see planner.h): parameter shapes from the config, per-layout bytes,
// bytes sent, bubble and the step-time model, and the table `strata plan` prints.
#include "apps/planner.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "apps/factory.h"
#include "apps/layout.h"
#include <strata/core/config.h>
#include <strata/core/error.h>
#include <strata/parallel/pipeline/stage.h>

namespace strata::apps {

int64_t ParamShape::numel() const { return shape_numel(shape); }

namespace {

void add_linear(std::vector<ParamShape>& out, const std::string& path, int64_t in, int64_t outf, bool bias) {
  out.push_back({path + ".weight", {outf, in}});
  if (bias) out.push_back({path + ".bias", {outf}});
}

void add_layer_norm(std::vector<ParamShape>& out, const std::string& path, int64_t dim, bool bias) {
  out.push_back({path + ".weight", {dim}});
  if (bias) out.push_back({path + ".bias", {dim}});
}

// nn::MLP: net = Sequential(Flatten, [Linear, activation, Dropout if p > 0] per hidden, Linear).
std::vector<ParamShape> mlp_shapes(const TrainConfig& cfg) {
  std::vector<ParamShape> out;
  int64_t width = shape_numel(input_shape(cfg)), i = 1;  // net.0 is the Flatten
  for (int64_t h : cfg.model.hidden) {
    add_linear(out, "net." + std::to_string(i), width, h, true);
    i += cfg.model.dropout > 0 ? 3 : 2;
    width = h;
  }
  add_linear(out, "net." + std::to_string(i), width, num_classes(cfg), true);
  return out;
}

// nn::CNN: features = [Conv2d 3x3 (bias without BN), BatchNorm2d?, ReLU, MaxPool2d] per
// channel count; classifier = Sequential(Flatten, Linear, ReLU, Dropout?, Linear).
std::vector<ParamShape> cnn_shapes(const TrainConfig& cfg) {
  const auto& m = cfg.model;
  const Shape in = input_shape(cfg);
  const int64_t blocks = int64_t(m.channels.size());
  if (in.size() != 3 || in[1] != in[2] || in[1] % (int64_t(1) << blocks) != 0)  // as build_model
    config_fail("model.type", "cnn needs square images [C, H, W] (or [H, W]) whose side is divisible by 2^" +
                                  std::to_string(blocks) + " (model.channels has " + std::to_string(blocks) +
                                  " blocks); the data's samples have shape " + shape_str(in));
  std::vector<ParamShape> out;
  int64_t c = in[0], side = in[1], i = 0;
  for (int64_t ch : m.channels) {
    const std::string conv = "features." + std::to_string(i++);
    out.push_back({conv + ".weight", {ch, c, 3, 3}});
    if (m.batch_norm) {  // Conv2d has no bias under BatchNorm
      const std::string bn = "features." + std::to_string(i++);
      out.push_back({bn + ".weight", {ch}});
      out.push_back({bn + ".bias", {ch}});
    } else {
      out.push_back({conv + ".bias", {ch}});
    }
    i += 2;  // ReLU, MaxPool2d
    c = ch;
    side /= 2;
  }
  add_linear(out, "classifier.1", c * side * side, m.fc_hidden, true);
  add_linear(out, m.dropout > 0 ? "classifier.4" : "classifier.3", m.fc_hidden, num_classes(cfg), true);
  return out;
}

// nn::GPT: wte, wpe, h.i.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj},
// ln_f, and lm_head when untied (bias-free).
std::vector<ParamShape> gpt_shapes(const TrainConfig& cfg) {
  const auto& m = cfg.model;
  const int64_t c = m.n_embd, v = gpt_vocab(cfg);
  std::vector<ParamShape> out;
  out.reserve(size_t(12 * m.n_layer + 5));
  out.push_back({"wte.weight", {v, c}});
  out.push_back({"wpe.weight", {m.block_size, c}});
  for (int64_t l = 0; l < m.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    add_layer_norm(out, h + "ln_1", c, m.bias);
    add_linear(out, h + "attn.c_attn", c, 3 * c, m.bias);
    add_linear(out, h + "attn.c_proj", c, c, m.bias);
    add_layer_norm(out, h + "ln_2", c, m.bias);
    add_linear(out, h + "mlp.c_fc", c, 4 * c, m.bias);
    add_linear(out, h + "mlp.c_proj", 4 * c, c, m.bias);
  }
  add_layer_norm(out, "ln_f", c, m.bias);
  if (!m.tie_weights) out.push_back({"lm_head.weight", {v, c}});
  return out;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Whether model_tp_plan() (without sequence parallelism, which shards no parameter) splits
// this GPT parameter: colwise c_attn / c_fc (weight and bias), rowwise c_proj (the weight;
// a row layer's bias is whole), the vocabulary-parallel wte and lm_head.
bool gpt_tp_sharded(const std::string& name) {
  return name == "wte.weight" || name == "lm_head.weight" || ends_with(name, "attn.c_attn.weight") ||
         ends_with(name, "attn.c_attn.bias") || ends_with(name, "mlp.c_fc.weight") ||
         ends_with(name, "mlp.c_fc.bias") || ends_with(name, ".c_proj.weight");
}

}  // namespace

std::vector<ParamShape> model_param_shapes(const TrainConfig& cfg) {
  if (cfg.model.type == "mlp") return mlp_shapes(cfg);
  if (cfg.model.type == "cnn") return cnn_shapes(cfg);
  return gpt_shapes(cfg);
}

ModelCounts count_model(const TrainConfig& cfg) {
  const std::vector<ParamShape> ps = model_param_shapes(cfg);
  ModelCounts c;
  for (const ParamShape& p : ps) c.params += p.numel();
  c.flops_per_sample = plan_flops_per_sample(cfg, ps);
  if (cfg.model.type == "mlp") {  // the input, then per Linear its output and its activation's
    c.activations_per_sample = shape_numel(input_shape(cfg));
    for (const ParamShape& p : ps)
      if (p.shape.size() == 2) c.activations_per_sample += 2 * p.shape[0];
  } else if (cfg.model.type == "cnn") {  // per block conv, BN, ReLU outputs and the pooled one
    const Shape in = input_shape(cfg);
    int64_t side = in[2];
    c.activations_per_sample = shape_numel(in);
    for (const ParamShape& p : ps)
      if (p.shape.size() == 4) {
        c.activations_per_sample += p.shape[0] * side * side * (cfg.model.batch_norm ? 3 : 2) + p.shape[0] * side * side / 4;
        side /= 2;
      } else if (p.shape.size() == 2) {
        c.activations_per_sample += 2 * p.shape[0];
      }
  }
  if (cfg.model.type == "mlp") {
    // model_tp_plan: hidden Linears in pairs (colwise, rowwise); the output layer and an
    // odd last hidden layer stay whole. Linears come as (weight, bias) pairs of entries.
    const size_t linears = ps.size() / 2;
    for (size_t i = 0; i + 2 < linears; i += 2) {
      c.tp_sharded += ps[2 * i].numel() + ps[2 * i + 1].numel();  // colwise: weight and bias
      c.tp_sharded += ps[2 * (i + 1)].numel();                     // rowwise: the weight
      c.tp_exchange_per_sample += ps[2 * i].shape[1] + ps[2 * (i + 1)].shape[0];
    }
    c.has_tp_plan = c.tp_sharded > 0;
  } else if (cfg.model.type == "gpt") {
    c.has_tp_plan = c.has_pp_plan = true;
    c.block_params.assign(size_t(cfg.model.n_layer), 0);
    c.block_tp_sharded.assign(size_t(cfg.model.n_layer), 0);
    for (const ParamShape& p : ps) {
      const int64_t n = p.numel(), s = gpt_tp_sharded(p.name) ? n : 0;
      c.tp_sharded += s;
      if (p.name.rfind("h.", 0) == 0) {
        const size_t l = size_t(std::stoll(p.name.substr(2)));
        c.block_params[l] += n;
        c.block_tp_sharded[l] += s;
      } else if (p.name == "wpe.weight" || p.name == "wte.weight") {
        c.first_params += n;
        c.first_tp_sharded += s;
      } else {  // ln_f, lm_head
        c.last_params += n;
        c.last_tp_sharded += s;
      }
    }
    if (cfg.model.tie_weights) {  // the last stage holds the tied wte as its head
      const int64_t wte = gpt_vocab(cfg) * cfg.model.n_embd;
      c.last_params += wte;
      c.last_tp_sharded += wte;
      c.tied_params = c.tied_tp_sharded = wte;
    }
  }
  return c;
}

double plan_flops_per_sample(const TrainConfig& cfg, const std::vector<ParamShape>& params) {
  const auto& m = cfg.model;
  if (m.type == "gpt") {  // flops.cpp: (6N + 12 L C T) T
    int64_t n = 0;
    for (const ParamShape& p : params) n += p.numel();
    const double t = double(m.block_size);
    return (6.0 * double(n) + 12.0 * double(m.n_layer) * double(m.n_embd) * t) * t;
  }
  double forward = 0;
  int64_t spatial = 28;
  if (m.type == "cnn") spatial = input_shape(cfg)[2];
  for (const ParamShape& p : params) {
    if (p.shape.size() == 2) {
      forward += 2.0 * double(p.numel());
    } else if (p.shape.size() == 4) {
      forward += 2.0 * double(p.numel()) * double(spatial * spatial);
      spatial /= 2;
    }
  }
  return 3.0 * forward;
}

}  // namespace strata::apps

// ---------------------------------------------------------------- activations
namespace strata::apps {

// Per tensor the autograd graph keeps (N = b·T rows, C = n_embd, H heads, f32 = 4 bytes;
// "/tp" where tensor parallelism splits it, "/sp" where sequence parallelism does):
//   block:  its input x (N·C/sp, kept by ln_1), ln_1's mean and rstd (2N/sp) and output
//           (N·C/sp), qkv (3N·C/tp), the attention probabilities (b·H/tp·T·T) and output
//           y (N·C/tp), the residual sum h (N·C/sp, kept by ln_2), ln_2's stats and
//           output (as ln_1's), c_fc's output (4N·C/tp, kept by GELU) and GELU's
//           (4N·C/tp, kept by c_proj): 16 N·C + 4N + b·H·T² without tp. Under SP a
//           LayerNorm output is kept only all-gathered (N·C, by the column-parallel
//           linear after it), so it stays N·C while x, h and the statistics shrink. With
//           dropout p > 0 the attention runs unfused: the scaled q (N·C/tp), the softmax
//           output and the dropped probabilities (2 b·H/tp·T² instead of 1) and u8 masks
//           (b·H/tp·T², and N·C/sp for each of the 2 residual dropouts).
//   first:  the positions (T i64) and the embeddings' dropout mask (N·C/sp u8).
//   last:   ln_f's input and stats (N·C/sp, 2N/sp) and output (N·C, gathered under SP),
//           and the loss's probabilities (N·V/tp).
// With model.checkpoint_activations a block keeps only its input (N·C/sp) until its
// backward recomputes it; the recomputation holds one block's worth at a time.
// Megatron-LM's count (16-bit, s·b·h·(34 + 5·a·s/h) bytes per layer) is the same list in
// 2-byte elements, less the LayerNorm statistics and our scaled-q copy (docs/planner.md).
int64_t gpt_activation_bytes(const ActivationInput& a) {
  STRATA_CHECK(a.batch > 0 && a.seq > 0 && a.embd > 0 && a.heads > 0 && a.vocab > 0 && a.layers >= 0 && a.tp >= 1,
               "[plan] activation sizes must be positive");
  const bool sp = a.sequence_parallel && a.tp > 1;
  const int64_t tp = a.tp, spd = sp ? tp : 1;
  const int64_t n = a.batch * a.seq, nc = n * a.embd, att = a.batch * (a.heads / tp) * a.seq * a.seq;
  // Under SP a LayerNorm's output shard is all-gathered and only the gathered N·C is kept
  // (by the column-parallel linear), so its output counts N·C with or without SP.
  int64_t block = nc / spd + 2 * n / spd + nc      // x, ln_1 stats and output
                  + 3 * nc / tp + att + nc / tp    // qkv, probabilities, y
                  + nc / spd + 2 * n / spd + nc    // h, ln_2
                  + 8 * nc / tp;                   // c_fc and GELU outputs
  int64_t block_u8 = 0;
  if (a.dropout) {
    block += nc / tp + att;
    block_u8 += att + 2 * nc / spd;
  }
  int64_t bytes = 0;
  if (a.checkpoint)
    bytes = a.layers * (nc / spd) * 4 + (a.layers > 0 ? block * 4 + block_u8 : 0);
  else
    bytes = a.layers * (block * 4 + block_u8);
  if (a.first) bytes += a.seq * 8 + (a.dropout ? nc / spd : 0);
  if (a.last) bytes += (nc / spd + 2 * n / spd + nc + n * (a.vocab / tp)) * 4;
  if (a.pipeline) bytes += (a.last ? n * (a.vocab / tp) : nc) * 4;
  return bytes;
}

// What a backward holds on top of the stored activations, at its largest: in a block's MLP,
// GELU's backward holds the gradients of its output and of c_fc's (4N·C/tp each), and
// c_fc's weight gradient (4C²/tp) exists before it is accumulated. Once per rank (one
// backward runs at a time); the freeing of the backwarded micro-batch's own activations
// as its backward proceeds is not subtracted (PlannerMemory measures each rank's peak).
int64_t gpt_backward_transient_bytes(const ActivationInput& a) {
  const int64_t n = a.batch * a.seq, tp = a.tp;
  return (8 * n * a.embd / tp + 4 * a.embd * a.embd / tp) * 4;
}

// ---------------------------------------------------------------- layouts
int peak_in_flight(const parallel::ScheduleShape& s, int rank) {
  switch (s.kind) {
    case parallel::ScheduleKind::gpipe: return s.microbatches;
    case parallel::ScheduleKind::one_f_one_b:
    case parallel::ScheduleKind::zb_h1:  // 1F1B's order (its deferred W inputs are not counted)
      return std::min(s.microbatches, s.pp - rank);
    case parallel::ScheduleKind::interleaved:  // Megatron's warm-up forwards, then one more before the first backward
      return std::min(s.microbatches * s.virtual_stages, (s.pp - rank - 1) * 2 + (s.virtual_stages - 1) * s.pp + 1);
  }
  return s.microbatches;
}

namespace {

constexpr int64_t kF32 = 4;

int64_t ring_all_reduce(int64_t k, int64_t n) { return n > 1 ? 2 * (n - 1) * k / n : 0; }

// Why this build's parallelize() refuses a layout ("" when it runs it).
// (parallelize() in parallel/parallelize.cpp; drop a line when it composes them.)
// pp x ZeRO-3 runs (parallelize keeps a stage's units gathered for the whole pipeline
// step), but its peak is the gathered stage, which this table's ZeRO-3 row does not model.
std::string unmodelled(const parallel::ParallelDims& d) {
  if (d.pp > 1 && d.zero_stage == 3) return "pp x ZeRO-3";
  return "";
}

}  // namespace

LayoutPlan plan_layout(const TrainConfig& cfg, const ModelCounts& counts, const parallel::ParallelDims& dims,
                       parallel::ScheduleKind schedule, int microbatches, int virtual_stages,
                       const PlanAssumptions& a) {
  LayoutPlan p;
  p.dims = dims;
  p.note = unmodelled(dims);
  const auto& m = cfg.model;
  const bool gpt = m.type == "gpt";
  const int64_t batch_dp = cfg.train.batch_size / dims.dp;  // samples per dp rank per step
  const int pp = dims.pp;
  const int v = pp > 1 ? virtual_stages : 1;
  const int mb = pp > 1 ? microbatches : int(std::max<int64_t>(1, cfg.train.grad_accum_steps));
  p.schedule = schedule;
  p.microbatches = mb;
  p.virtual_stages = v;
  const int64_t b = batch_dp / mb;  // samples per micro-batch
  const int64_t c = m.n_embd, t = m.block_size;
  const int64_t mb_bytes = b * t * c * kF32;  // one (b, T, C) f32 activation

  // The stages (blocks [begin, end)) and each rank's in-flight micro-batches.
  std::vector<parallel::PipelineStageSpec> stages;
  std::vector<int> in_flight(size_t(pp), 1);
  if (pp > 1) {
    const parallel::ScheduleShape shape{schedule, pp, mb, v};
    const std::string bad = shape.invalid();
    if (!bad.empty()) config_fail(bad.substr(0, bad.find(' ')), bad.substr(bad.find(' ') + 1));
    const bool configured = cfg.parallel.dims.pp == pp && cfg.parallel.pipeline.virtual_stages == v;
    stages = parallel::split_stages(counts.block_params, counts.first_params, counts.last_params, pp * v,
                                    configured ? cfg.parallel.pp_layers : std::vector<int64_t>{});
    for (int r = 0; r < pp; ++r) in_flight[size_t(r)] = peak_in_flight(shape, r);
    p.bubble = parallel::bubble_formula(shape);
  } else if (gpt) {
    stages.push_back({.stage = 0, .stages = 1, .begin = 0, .end = m.n_layer});
  }

  const int states = parallel::optimizer_state_count(cfg.optim.name, cfg.optim.momentum);
  const bool sp = cfg.parallel.sequence_parallel && dims.tp > 1;
  int64_t worst = -1;
  for (int r = 0; r < pp; ++r) {
    int64_t elements = 0, sharded = 0, act = 0, layers_max = 0;
    bool first = false, last = false;
    int64_t pp_sent = 0;
    if (stages.empty()) {  // mlp, cnn: the whole model on every rank
      elements = counts.params;
      sharded = counts.tp_sharded;
    } else {
      for (const auto& st : stages) {
        if (st.stage % pp != r) continue;
        for (int64_t l = st.begin; l < st.end; ++l) {
          elements += counts.block_params[size_t(l)];
          sharded += counts.block_tp_sharded[size_t(l)];
        }
        first = first || st.first();
        last = last || st.last();
        layers_max = std::max(layers_max, st.end - st.begin);
        // Per micro-batch it sends its output forward (unless last) and its input's
        // gradient back (unless first).
        pp_sent += int64_t(mb) * mb_bytes * ((st.last() ? 0 : 1) + (st.first() ? 0 : 1));
      }
      if (first) elements += counts.first_params, sharded += counts.first_tp_sharded;
      if (last) elements += counts.last_params, sharded += counts.last_tp_sharded;
      if (first && last) elements -= counts.tied_params, sharded -= counts.tied_tp_sharded;
    }
    parallel::MemoryPlanInput in;
    in.param_elements = elements;
    in.bytes_per_element = kF32;  // f32 parameters, grads and state (autocast keeps f32 masters)
    in.optimizer_states = states;
    in.world_size = dims.dp;
    in.zero_stage = dims.zero_stage;
    in.tp = dims.tp;
    in.tp_sharded_elements = dims.tp > 1 ? sharded : 0;
    if (precision_state_dtype(cfg.run.precision)) in = parallel::sixteen_bit_states(in);  // 16-bit params, f32 masters
    const int64_t rank_elements = parallel::tp_rank_elements(in);
    in.ddp_bucket_bytes = dims.dp > 1 && dims.zero_stage == 0 && !cfg.parallel.ddp.gradient_as_bucket_view
                              ? rank_elements * in.bytes_per_element
                              : 0;
    const parallel::MemoryPlan mem = parallel::plan_memory(in);
    if (gpt) {
      // Interleaved: a rank's chunks are alike; each in-flight (micro-batch, chunk) keeps
      // one chunk's activations (the first/last extras counted once each).
      const ActivationInput ai{.batch = b, .seq = t, .embd = c, .heads = m.n_head, .vocab = gpt_vocab(cfg),
                               .layers = layers_max, .first = false, .last = false, .tp = dims.tp,
                               .sequence_parallel = sp, .dropout = m.dropout > 0,
                               .checkpoint = m.checkpoint_activations, .pipeline = false};
      act = int64_t(in_flight[size_t(r)]) * gpt_activation_bytes(ai);
      ActivationInput ends = ai;
      ends.layers = 0;
      ends.first = first;
      ends.last = last;
      ends.pipeline = pp > 1;  // a rank's stages: its output (or the logits) per in-flight micro-batch
      if (first || last || pp > 1) act += int64_t(in_flight[size_t(r)]) * gpt_activation_bytes(ends);
      if (layers_max > 0) act += gpt_backward_transient_bytes(ai);
    } else {
      act = b * counts.activations_per_sample * kF32;  // mlp, cnn: an estimate (ModelCounts)
    }
    // dp: DDP all-reduces the grads (2 (N-1)/N), ZeRO-1/2 reduce-scatter the grads and
    // all-gather the params ((N-1)/N twice), ZeRO-3 gathers twice and reduce-scatters.
    const int64_t padded = parallel::shard_elements(rank_elements, dims.dp) * dims.dp * kF32;
    const int64_t dp_sent = dims.zero_stage == 3 ? 3 * (dims.dp - 1) * padded / dims.dp
                                                 : ring_all_reduce(dims.zero_stage > 0 ? padded : rank_elements * kF32,
                                                                   dims.dp);
    // tp: per micro-batch 2 all-reduces of (b, T, C) per block each way, the embedding's
    // (first) and the head input's (last), and the loss's 3 of b·T values (last).
    int64_t tp_sent = 0;
    if (dims.tp > 1 && gpt) {
      int64_t blocks = 0;
      for (const auto& st : stages)
        if (st.stage % pp == r) blocks += st.end - st.begin;
      tp_sent = int64_t(mb) * ((4 * blocks + (first ? 1 : 0) + (last ? 1 : 0)) * ring_all_reduce(mb_bytes, dims.tp) +
                               (last ? 3 * ring_all_reduce(b * t * kF32, dims.tp) : 0));
    } else if (dims.tp > 1) {  // mlp: per hidden pair, forward its output's, backward its input's
      tp_sent = int64_t(mb) * ring_all_reduce(b * counts.tp_exchange_per_sample * kF32, dims.tp);
    }
    p.dp_bytes = std::max(p.dp_bytes, dp_sent);
    p.tp_bytes = std::max(p.tp_bytes, tp_sent);
    p.pp_bytes = std::max(p.pp_bytes, pp_sent);
    p.pp_ranks.push_back({.memory = mem, .activations = act, .in_flight = in_flight[size_t(r)]});
    if (mem.total() + act > worst) {
      worst = mem.total() + act;
      p.memory = mem;
      p.activations = act;
      p.in_flight = in_flight[size_t(r)];
    }
  }
  const double flops = counts.flops_per_sample * double(cfg.train.batch_size) / double(dims.world());
  p.compute_s = a.flops_per_s > 0 ? flops / a.flops_per_s : 0;
  const double inner = a.bytes_per_s > 0 ? double(p.tp_bytes + p.pp_bytes) / a.bytes_per_s : 0;
  const double outer = a.bytes_per_s > 0 ? double(p.dp_bytes) / a.bytes_per_s : 0;
  p.comm_s = inner + outer;
  // The bubble stretches everything inside the pipeline flush; dp's exchange follows it.
  p.step_s = (p.compute_s + inner) / (1.0 - p.bubble) + outer;
  p.fits = a.memory_per_rank <= 0 || p.total() <= a.memory_per_rank;
  return p;
}

}  // namespace strata::apps

namespace strata::apps {

std::vector<LayoutPlan> plan_layouts(const TrainConfig& cfg, int ranks, const PlanAssumptions& a) {
  const ModelCounts counts = count_model(cfg);
  std::vector<LayoutPlan> out;
  for (int tp = 1; tp <= ranks; ++tp) {
    if (ranks % tp != 0 || (tp > 1 && (!counts.has_tp_plan || counts.tp_sharded % tp != 0))) continue;
    if (tp > 1 && cfg.model.type == "mlp") {  // every paired hidden width splits into tp
      bool ok = true;
      for (size_t i = 0; i + 1 < cfg.model.hidden.size(); i += 2) ok = ok && cfg.model.hidden[i] % tp == 0;
      if (!ok) continue;
    }
    for (int pp = 1; pp * tp <= ranks; ++pp) {
      if ((ranks / tp) % pp != 0 || (pp > 1 && !counts.has_pp_plan)) continue;
      parallel::ParallelDims dims{.dp = ranks / tp / pp, .tp = tp, .pp = pp, .zero_stage = 0};
      try {  // the checks `strata train` makes: heads and vocabulary by tp, blocks by pp, batch by dp
        TrainConfig c = cfg;
        c.parallel.dims = dims;
        c.parallel.pipeline.microbatches = 1;
        c.parallel.pipeline.virtual_stages = 1;
        dims = resolve_dims(c, ranks);
      } catch (const ConfigError&) {
        continue;
      }
      const int64_t batch_dp = cfg.train.batch_size / dims.dp;
      struct Sched {
        parallel::ScheduleKind kind;
        int v;
      };
      std::vector<Sched> scheds;
      int m = 1;
      if (pp > 1) {
        m = a.microbatches > 0 ? a.microbatches : int(batch_dp);
        if (batch_dp % m != 0) continue;
        scheds = {{parallel::ScheduleKind::gpipe, 1}, {parallel::ScheduleKind::one_f_one_b, 1}};
        if (m % pp == 0 && cfg.model.n_layer >= 2 * pp) scheds.push_back({parallel::ScheduleKind::interleaved, 2});
      } else {
        scheds = {{parallel::ScheduleKind::one_f_one_b, 1}};  // unused at pp 1
      }
      for (int zero = 0; zero <= (dims.dp > 1 ? 3 : 0); ++zero) {
        dims.zero_stage = zero;
        for (const Sched& s : scheds) out.push_back(plan_layout(cfg, counts, dims, s.kind, m, s.v, a));
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const LayoutPlan& x, const LayoutPlan& y) {
    if (x.fits != y.fits) return x.fits;
    if (x.step_s != y.step_s) return x.step_s < y.step_s;
    return x.total() < y.total();
  });
  return out;
}

std::string bytes_str(int64_t b) {
  char buf[32];
  const double d = double(b);
  if (d >= 1024.0 * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f GiB", d / (1024.0 * 1024 * 1024));
  else if (d >= 1024.0 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f MiB", d / (1024.0 * 1024));
  else if (d >= 1024.0)
    std::snprintf(buf, sizeof buf, "%.2f KiB", d / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%lld B", (long long)b);
  return buf;
}

namespace {

std::string schedule_str(const LayoutPlan& p) {
  if (p.dims.pp == 1) return "-";
  std::string s = parallel::schedule_name(p.schedule);
  s += " m" + std::to_string(p.microbatches);
  if (p.virtual_stages > 1) s += " v" + std::to_string(p.virtual_stages);
  return s;
}

std::string seconds_str(double s) {
  char buf[32];
  if (s <= 0) return "-";
  if (s < 1e-3)
    std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  else if (s < 1)
    std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

}  // namespace

std::string format_layouts(const std::vector<LayoutPlan>& plans, const PlanAssumptions& a, size_t limit) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%3s  %-4s %-4s %-4s %-4s %-16s %10s %10s %10s %10s %4s %10s | %10s %10s %10s | %6s %10s  %s\n",
                "#", "dp", "tp", "pp", "zero", "schedule", "params", "grads", "optim+buf", "activ", "mb", "total",
                "dp sent", "tp sent", "pp sent", "bubble", "step", "fits");
  out += line;
  size_t n = 0;
  bool starred = false;
  for (const LayoutPlan& p : plans) {
    if (limit > 0 && n >= limit) break;
    ++n;
    const std::string fits = a.memory_per_rank <= 0 ? "-" : p.fits ? "yes" : "NO";
    std::snprintf(line, sizeof line,
                  "%3zu  %-4d %-4d %-4d %-4d %-16s %10s %10s %10s %10s %4d %10s | %10s %10s %10s | %6.3f %10s  %s%s\n", n,
                  p.dims.dp, p.dims.tp, p.dims.pp, p.dims.zero_stage, schedule_str(p).c_str(),
                  bytes_str(p.memory.params).c_str(), bytes_str(p.memory.grads).c_str(),
                  bytes_str(p.memory.optimizer + p.memory.comm).c_str(), bytes_str(p.activations).c_str(), p.in_flight,
                  bytes_str(p.total()).c_str(), bytes_str(p.dp_bytes).c_str(), bytes_str(p.tp_bytes).c_str(),
                  bytes_str(p.pp_bytes).c_str(), p.bubble, seconds_str(p.step_s).c_str(), fits.c_str(),
                  p.note.empty() ? "" : " *");
    out += line;
    if (!p.note.empty()) starred = true;
  }
  if (starred)
    out += "* pp with ZeRO-3: each stage's units stay gathered for the whole pipeline step, a peak this "
           "row does not model; listed, never chosen\n";
  if (limit > 0 && plans.size() > limit)
    out += "... " + std::to_string(plans.size() - limit) + " more (--top 0 lists all)\n";
  return out;
}

bool layout_fixed(const TrainConfig& cfg) {
  const auto& d = cfg.parallel.dims;
  return d.dp != parallel::ParallelDims::kAuto || d.tp != 1 || d.pp != 1 || d.cp != 1 || d.zero_stage != 0 ||
         cfg.parallel.thread_replicas();
}

}  // namespace strata::apps
