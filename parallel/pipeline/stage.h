// The pipeline split of a model into stages, without knowing the model: the model's side
// (which children run first and last, how a stage runs, the activation it sends) comes as
// a PipelinePlan from the model's family (nn/), as the TP plan does. Each rank
// keeps its stages' modules under their global names and drops the rest.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <strata/nn/module.h>
#include <strata/nn/parallel_plan.h>
#include <strata/tensor/tensor.h>

namespace strata::parallel {

// The plan's types are the model family's data (nn/parallel_plan.h).
using nn::ActivationSpec;
using nn::PipelinePlan;
using nn::PipelineStageSpec;

/// The blocks of each of `stages` stages: `explicit_layers` when given (ConfigError naming
/// parallel.pp_layers unless it has one entry >= 1 per stage summing to the block count),
/// else contiguous ranges minimising the largest stage's parameter count, with
/// `first_params` / `last_params` charged to stages 0 and stages-1. ConfigError naming
/// parallel.pp when there are fewer blocks than stages.
std::vector<PipelineStageSpec> split_stages(const std::vector<int64_t>& block_params, int64_t first_params,
                                            int64_t last_params, int stages,
                                            const std::vector<int64_t>& explicit_layers = {});

/// The stages of `model` under `plan` (block and first/last parameter counts read from the
/// model). ConfigError naming the key when the split is impossible.
std::vector<PipelineStageSpec> plan_stages(const nn::Module& model, const PipelinePlan& plan, int stages);

/// Drops from `model` every block and first/last child that none of `mine` runs
/// (replaced by a placeholder without parameters, so the names of what stays are
/// unchanged: a rank holding blocks 5-7 lists "h.5.attn.c_attn.weight"; the placeholder
/// keeps the dropped part's parameterless generator modules). Throws when a top-level child with
/// parameters belongs to no part of the plan.
void keep_stages(nn::Module& model, const PipelinePlan& plan, const std::vector<PipelineStageSpec>& mine);

/// Per entry of model.generators(): 1 when this rank runs it, 0 when it belongs to a part
/// keep_stages dropped (kept only so every rank lists the same generators).
std::vector<char> owned_generators(nn::Module& model);

}  // namespace strata::parallel
