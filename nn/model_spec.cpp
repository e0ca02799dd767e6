// The counts of a model description (see model_spec.h).
#include <strata/nn/model_spec.h>

#include <strata/core/error.h>

namespace strata::nn {

void add_param(std::vector<ParamSpec>& out, const std::string& name, Shape shape, StagePart part, int64_t block) {
  out.push_back({.name = name, .shape = std::move(shape), .tp_sharded = false, .part = part, .block = block,
                 .expert = false});
}

void set_decoder_lm_costs(ModelSpec& s, int64_t layers, int64_t c, int64_t t) {
  const double td = double(t);
  s.flops_per_sample = (6.0 * double(s.active_params) + 12.0 * double(layers) * double(c) * td) * td;
  s.stage_output_per_sample = t * c;
  s.tp_per_block = {{.per_sample = t * c, .count = 4}};
  if (s.has_moe()) s.tp_per_moe_block = {{.per_sample = t * c, .count = 2}};
  s.tp_first = {{.per_sample = t * c, .count = 1}};
  s.tp_last = {{.per_sample = t * c, .count = 1}, {.per_sample = t, .count = 3}};
}

ModelSpec ModelSpec::from_params(std::vector<ParamSpec> params) {
  ModelSpec s;
  s.params = std::move(params);
  for (const ParamSpec& p : s.params) {
    const int64_t n = p.numel(), sh = p.tp_sharded ? n : 0;
    s.total += n;
    s.tp_sharded += sh;
    STRATA_CHECK(!(p.expert && p.tp_sharded), "[ModelSpec] ", p.name, " is an expert weight and tp-sharded");
    if (p.expert) s.expert_params += n;
    switch (p.part) {
      case StagePart::whole: break;
      case StagePart::block:
        STRATA_CHECK(p.block >= 0, "[ModelSpec] ", p.name, " is in a block but has no block index");
        if (size_t(p.block) >= s.block_params.size()) {
          s.block_params.resize(size_t(p.block) + 1, 0);
          s.block_tp_sharded.resize(size_t(p.block) + 1, 0);
          s.block_expert_params.resize(size_t(p.block) + 1, 0);
        }
        s.block_params[size_t(p.block)] += n;
        s.block_tp_sharded[size_t(p.block)] += sh;
        if (p.expert) s.block_expert_params[size_t(p.block)] += n;
        break;
      case StagePart::first:
        s.first_params += n;
        s.first_tp_sharded += sh;
        break;
      case StagePart::last:
        s.last_params += n;
        s.last_tp_sharded += sh;
        break;
      case StagePart::tied:  // the first stage's, and the last's head
        s.first_params += n;
        s.first_tp_sharded += sh;
        s.last_params += n;
        s.last_tp_sharded += sh;
        s.tied_params += n;
        s.tied_tp_sharded += sh;
        break;
    }
    STRATA_CHECK(!p.expert || p.part == StagePart::block || p.part == StagePart::whole, "[ModelSpec] expert weight ",
                 p.name, " outside the blocks");
  }
  s.active_params = s.total;
  return s;
}

}  // namespace strata::nn
