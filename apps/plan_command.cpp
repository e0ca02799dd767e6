// strata plan: the layouts of a config at N ranks. When the config fixes the layout
// (parallel.dp, tp, pp or zero_stage set) it prints that layout: degrees, mesh, strategy on
// dp and the per-rank memory of DDP and ZeRO stages 1-3 (parallel::plan_memory); otherwise
// every valid (dp, tp, pp, zero, schedule) layout ranked by apps/plan_search.h. Nothing is
// allocated: the model is its family's description of the config.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/config.h"
#include "apps/factory.h"
#include "apps/flops.h"
#include "apps/layout.h"
#include "apps/memory_report.h"
#include "apps/model_family.h"
#include "apps/plan_search.h"
#include "apps/plan_table.h"
#include <strata/core/config.h>
#include <strata/core/error.h>
#include <strata/parallel/context/context_parallel.h>
#include <strata/parallel/pipeline/schedule.h>
#include <strata/parallel/pipeline/stage.h>

namespace strata::apps {
namespace {

// pp > 1: the stages, the schedule as a chart (one row per pp rank, F/B cells with the
// micro-batch number, from the simulator with unit-cost forwards and backwards), the
// bubble formula and the peak in-flight micro-batches per rank.
void print_pipeline_plan(const TrainConfig& cfg, const parallel::ParallelDims& dims, const nn::ModelSpec& model) {
  const auto& pl = cfg.parallel.pipeline;
  const parallel::ScheduleShape shape{pl.schedule, dims.pp, pl.microbatches, pl.virtual_stages};
  if (model.has_pp_plan()) {
    std::printf("pipeline stages (%d, blocks of h):", shape.stages());
    for (const auto& st : parallel::split_stages(model.block_params, model.first_params, model.last_params,
                                                 shape.stages(), cfg.parallel.pp_layers))
      std::printf(" %d: [%lld, %lld) on rank %d%s", st.stage, (long long)st.begin, (long long)st.end, shape.owner(st.stage),
                  st.stage + 1 < shape.stages() ? "," : "\n");
  }
  const parallel::ScheduleSim sim = parallel::simulate(shape, parallel::build_schedules(shape));
  STRATA_CHECK(sim.error.empty(), "[plan] the schedule does not run: ", sim.error);
  std::printf("pipeline schedule %s, %d micro-batch(es) of %lld sample(s):\n%s", parallel::schedule_name(shape.kind),
              shape.microbatches, (long long)(cfg.train.batch_size / dims.dp / shape.microbatches),
              parallel::schedule_chart(shape, sim).c_str());
}

// Context parallelism: activations per rank (the GPT's formula, cp_activation_bytes) at
// cp 1 and at cp, and the K/V bytes ring attention sends per attention layer per step.
void print_cp_plan(const TrainConfig& cfg, const parallel::ParallelDims& dims) {
  const int64_t b = cfg.train.batch_size / dims.dp, t = cfg.model.block_size, c = cfg.model.n_embd / dims.tp;
  parallel::CpActivationInput a{.batch = b, .seq = t, .embd = cfg.model.n_embd, .heads = cfg.model.n_head,
                                .layers = cfg.model.n_layer, .vocab = gpt_vocab(cfg), .bytes_per_element = 4, .cp = 1};
  const int64_t one = parallel::cp_activation_bytes(a);
  a.cp = dims.cp;
  const int64_t per = parallel::cp_activation_bytes(a);
  std::printf("context parallel over %d (%s split, ring attention): activations per rank per step %s at cp 1 -> %s "
              "(/ %.2f)\n",
              dims.cp, cfg.parallel.cp_split.c_str(), format_bytes_psi(one, 0).c_str(), format_bytes_psi(per, 0).c_str(),
              per > 0 ? double(one) / double(per) : 0.0);
  const parallel::CpLayerBytes kv = parallel::cp_layer_bytes(b, t, c, dims.cp, 4);
  std::printf("ring attention sends per attention layer per step per rank: forward %s ((cp-1) x K/V block of %s), "
              "backward %s (K/V again + dK/dV home); x %lld layers = %s per step\n",
              format_bytes_psi(kv.forward, 0).c_str(), format_bytes_psi(kv.forward / (dims.cp - 1), 0).c_str(),
              format_bytes_psi(kv.backward, 0).c_str(), (long long)cfg.model.n_layer,
              format_bytes_psi((kv.forward + kv.backward) * cfg.model.n_layer, 0).c_str());
}

// A mixture of experts: total and active parameters, the expert weights and what one
// rank holds of them at `eps` (the whole model's, every MoE layer).
void print_moe_plan(const nn::ModelSpec& model, const std::vector<int>& eps, int64_t bytes_per_element) {
  if (!model.has_moe()) return;
  std::printf("mixture of experts: %lld MoE layer(s) of %lld experts, top_k %lld | parameters: total %lld, active "
              "%lld per token (%.1f%%) | expert weights %lld (%s); per rank (params; grads and optimizer state "
              "alike, replicated over dp / ep):",
              (long long)model.moe_layers(), (long long)model.experts, (long long)model.top_k, (long long)model.total,
              (long long)model.active_params, 100.0 * double(model.active_params) / double(model.total),
              (long long)model.expert_params, bytes_str(model.expert_params * bytes_per_element).c_str());
  for (size_t i = 0; i < eps.size(); ++i) {
    const int64_t rank = model.expert_params / eps[i];
    std::printf("%s at ep %d %lld (%s)", i ? "," : "", eps[i], (long long)rank, bytes_str(rank * bytes_per_element).c_str());
  }
  std::printf("\n");
}

}  // namespace

Command add_plan_command(CLI::App& parent) {
  struct Opts {
    std::string config;
    std::vector<std::string> sets;
    int ranks = 0;
    std::string memory_per_rank;
    double gflops = 0, bandwidth = 12.5;
    int microbatches = 0;
    size_t top = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = parent.add_subcommand(
      "plan", "Rank every (dp, tp, pp, zero, schedule) layout of N ranks by predicted step time, or show the "
              "configured layout's per-rank memory under DDP and ZeRO-1/2/3");
  cmd->add_option("-c,--config", o->config, "YAML config file")->required();
  cmd->add_option("--ranks", o->ranks, "World size N (mpirun -np N)")->required();
  cmd->add_option("--set", o->sets, "Override a config key (repeatable)")->type_name("KEY=VALUE");
  cmd->add_option("--memory-per-rank", o->memory_per_rank, "Mark layouts whose bytes per rank exceed this (80G = 80 GiB)")
      ->type_name("SIZE");
  cmd->add_option("--gflops", o->gflops,
                  "Sustained GFLOP/s per rank for the step-time model (default: measured here, strata bench gemm's "
                  "1024^3 product at the current thread count)");
  cmd->add_option("--bandwidth", o->bandwidth, "GB/s each rank sends at, every dimension alike (default 12.5: 100 Gbit/s)");
  cmd->add_option("--microbatches", o->microbatches,
                  "Micro-batches per step at pp > 1 (default: one sample each, the smallest bubble)");
  cmd->add_option("--top", o->top, "List only the best N layouts (default: all)");
  return {cmd, [o] {
            const TrainConfig cfg = TrainConfig::load(o->config, o->sets);
            if (o->ranks < 1 || o->ranks > 1 << 20)
              STRATA_THROW(ConfigError, "--ranks: expected a world size in [1, 1048576], got ", o->ranks);
            PlanAssumptions a;
            if (o->gflops < 0) STRATA_THROW(ConfigError, "--gflops: expected a positive GFLOP/s, got ", o->gflops);
            if (!(o->bandwidth > 0)) STRATA_THROW(ConfigError, "--bandwidth: expected a positive GB/s, got ", o->bandwidth);
            if (o->microbatches < 0) STRATA_THROW(ConfigError, "--microbatches: expected >= 1, got ", o->microbatches);
            if (!o->memory_per_rank.empty()) a.memory_per_rank = parse_bytes("--memory-per-rank", o->memory_per_rank);
            a.flops_per_s = o->gflops > 0 ? o->gflops * 1e9 : measured_gemm_flops();
            a.bytes_per_s = o->bandwidth * 1e9;
            a.microbatches = o->microbatches;
            const nn::ModelSpec model = model_family(cfg).spec(cfg);  // from the config: nothing is allocated
            if (!layout_fixed(cfg)) {
              const std::vector<LayoutPlan> plans = plan_layouts(cfg, o->ranks, a);
              size_t fit = 0;
              for (const LayoutPlan& p : plans) fit += p.fits ? 1 : 0;
              std::printf("config: %s | model: %s, Ψ = %lld parameters | optim: %s | batch %lld | %d rank(s)\n",
                          o->config.c_str(), cfg.model.type.c_str(), (long long)model.total, cfg.optim.name.c_str(),
                          (long long)cfg.train.batch_size, o->ranks);
              std::vector<int> eps;  // every ep the search may use
              for (int ep = 1; ep <= o->ranks && model.has_moe(); ++ep)
                if (o->ranks % ep == 0 && model.experts % ep == 0) eps.push_back(ep);
              print_moe_plan(model, eps, precision_state_dtype(cfg.run.precision) ? 2 : 4);
              std::printf("step model: %.1f GFLOP/s per rank (%s), %.2f GB/s per rank; step = (compute + tp + pp%s "
                          "comm) / (1 - bubble) + dp comm\n",
                          a.flops_per_s / 1e9, o->gflops > 0 ? "--gflops" : "measured GEMM", a.bytes_per_s / 1e9,
                          model.has_moe() ? " + ep" : "");
              std::printf("%zu layout(s)", plans.size());
              if (a.memory_per_rank > 0)
                std::printf(", %zu fit %s per rank", fit, bytes_str(a.memory_per_rank).c_str());
              std::printf("; bytes per rank (the pipeline rank holding the most), bytes each sends per step:\n%s",
                          format_layouts(plans, a, o->top).c_str());
              const LayoutPlan* choice = nullptr;  // the fastest that fits and that this build runs
              for (const LayoutPlan& p : plans)
                if (p.fits && p.note.empty()) {
                  choice = &p;
                  break;
                }
              if (choice != nullptr)
                std::printf("choice: dp %d x tp %d x pp %d, zero_stage %d%s%s%s%s%s\n", choice->dims.dp, choice->dims.tp,
                            choice->dims.pp, choice->dims.zero_stage,
                            choice->dims.ep > 1 ? (", ep " + std::to_string(choice->dims.ep)).c_str() : "",
                            choice->dims.hybrid() ? (", dp_shard " + std::to_string(choice->dims.shard_size())).c_str() : "",
                            choice->dims.pp > 1 ? ", pp_schedule " : "",
                            choice->dims.pp > 1 ? parallel::schedule_name(choice->schedule) : "",
                            choice->dims.pp > 1 ? (", microbatches " + std::to_string(choice->microbatches)).c_str()
                                                : "");
              else
                std::printf("choice: none fits%s\n", a.memory_per_rank > 0 ? " (see --memory-per-rank)" : "");
              return 0;
            }
            const parallel::ParallelDims dims = resolve_dims(cfg, o->ranks);
            // f32 parameters (autocast keeps f32 masters) unless run.precision is bf16_params;
            // cp ranks are replicas too.
            parallel::MemoryPlanInput in =
                memory_plan_input(cfg, model.total, 4, dims.hybrid() ? dims.shard_size() * dims.cp : dims.dp * dims.cp,
                                  dims.zero_stage);
            const bool sp = cfg.parallel.sequence_parallel && dims.tp > 1;
            in.tp = dims.tp;
            if (dims.tp > 1) in.tp_sharded_elements = model.tp_sharded;
            if (model.has_moe() && dims.ep > 1) {  // experts / ep per rank, outside DDP and ZeRO
              in.expert_elements = parallel::ep_rank_expert_elements(model.expert_params, dims.ep);
              in.param_elements -= model.expert_params - in.expert_elements;
            }
            if (in.ddp_bucket_bytes > 0) in.ddp_bucket_bytes = parallel::dense_rank_elements(in) * in.bytes_per_element;
            const int64_t psi = model.total;  // the whole model (a rank holds less under ep)
            std::printf("config: %s | model: %s, Ψ = %lld parameters x %lld bytes = %s | optim: %s, %d state "
                        "tensor(s) per parameter\n",
                        o->config.c_str(), cfg.model.type.c_str(), (long long)psi, (long long)in.bytes_per_element,
                        format_bytes_psi(psi * in.bytes_per_element, psi).c_str(), cfg.optim.name.c_str(),
                        in.optimizer_states);
            std::printf("layout at %d rank(s): %s | mesh %s | on dp: %s | %lld samples per dp rank per step\n",
                        o->ranks, dims.str().c_str(), dims.mesh_shape().str().c_str(), dims.dp_strategy().c_str(),
                        (long long)(cfg.train.batch_size / dims.dp));
            print_moe_plan(model, {dims.ep}, in.bytes_per_element);
            if (dims.tp > 1)
              std::printf("tensor parallel over %d: %lld of Ψ sharded, %lld replicated -> %lld parameters per rank%s\n",
                          dims.tp, (long long)in.tp_sharded_elements, (long long)(psi - in.tp_sharded_elements),
                          (long long)parallel::tp_rank_elements(in), sp ? " | sequence parallel" : "");
            const bool sequences = model_family(cfg).sequences.sequence_parallel;
            if (sequences && dims.tp > 1 && cfg.model.block_size % dims.tp == 0) {  // a sequence to split
              parallel::SequenceRegionInput r{.batch = cfg.train.batch_size / dims.dp, .seq = cfg.model.block_size,
                                              .embd = cfg.model.n_embd, .layers = cfg.model.n_layer,
                                              .bytes_per_element = in.bytes_per_element,
                                              .dropout = cfg.model.dropout > 0, .tp = dims.tp};
              const int64_t plain = parallel::sequence_region_activation_bytes(r);
              r.sequence_parallel = true;
              std::printf("LayerNorm/dropout activations per rank per step: %s without sequence parallelism, %s "
                          "with it%s\n",
                          format_bytes_psi(plain, 0).c_str(),
                          format_bytes_psi(parallel::sequence_region_activation_bytes(r), 0).c_str(),
                          sp ? " (configured)" : "");
            }
            if (dims.cp > 1) print_cp_plan(cfg, dims);  // context parallel
            std::printf("predicted static bytes per rank at %d rank(s) (MiB and multiples of Ψ%s; DDP buckets %s; "
                        "shards padded to a multiple of %d%s; activations not included):\n",
                        dims.dp * dims.cp,
                        in.expert_elements > 0
                            ? (", here the " + std::to_string(in.param_elements) + " parameters a rank holds").c_str()
                            : "",
                        cfg.parallel.ddp.gradient_as_bucket_view ? "none (gradient_as_bucket_view)"
                                                                 : "one flat copy of the grads",
                        in.world_size, dims.hybrid() ? ", ZeRO rows within HSDP's shard groups" : "");
            std::printf("%s", format_plan_table(in, dims.zero_stage).c_str());
            if (dims.pp > 1) print_pipeline_plan(cfg, dims, model);
            if (!cfg.parallel.thread_replicas()) {  // the planner's row: activations, bytes sent, bubble
              const auto& pl = cfg.parallel.pipeline;
              const LayoutPlan row = plan_layout(cfg, model, dims, pl.schedule, pl.microbatches, pl.virtual_stages, a);
              std::printf("this layout in the planner (activations of the in-flight micro-batches included):\n%s",
                          format_layouts({row}, a, 0).c_str());
            }
            return 0;
          }};
}

}  // namespace strata::apps
