// strata plan: the layout a config's parallel section resolves to at N ranks (degrees,
// mesh, strategy on dp) and the per-rank memory of DDP and ZeRO stages 1-3 for its model,
// predicted by parallel::plan_memory before anything is trained or launched.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/config.h"
#include "apps/factory.h"
#include "apps/layout.h"
#include "apps/memory_report.h"
#include <strata/core/error.h>
#include <strata/parallel/context_parallel.h>
#include <strata/parallel/pipeline_schedule.h>
#include <strata/parallel/pipeline_stage.h>

namespace strata::apps {
namespace {

// pp > 1: the stages, the schedule as a chart (one row per pp rank, F/B cells with the
// micro-batch number, from the simulator with unit-cost forwards and backwards), the
// bubble formula and the peak in-flight micro-batches per rank.
void print_pipeline_plan(const TrainConfig& cfg, const parallel::ParallelDims& dims, const nn::Module& model) {
  const auto& pl = cfg.parallel.pipeline;
  const parallel::ScheduleShape shape{pl.schedule, dims.pp, pl.microbatches, pl.virtual_stages};
  const parallel::PipelinePlan plan = model_pp_plan(model, cfg.parallel.pp_layers);
  if (!plan.empty()) {
    std::printf("pipeline stages (%d, blocks of %s):", shape.stages(), plan.blocks.c_str());
    for (const auto& st : parallel::plan_stages(model, plan, shape.stages()))
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

}  // namespace

Command add_plan_command(CLI::App& parent) {
  struct Opts {
    std::string config;
    std::vector<std::string> sets;
    int ranks = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = parent.add_subcommand(
      "plan", "Resolve the parallel layout at N ranks and predict per-rank memory of DDP and ZeRO-1/2/3");
  cmd->add_option("-c,--config", o->config, "YAML config file")->required();
  cmd->add_option("--ranks", o->ranks, "World size N (mpirun -np N)")->required();
  cmd->add_option("--set", o->sets, "Override a config key (repeatable)")->type_name("KEY=VALUE");
  return {cmd, [o] {
            const TrainConfig cfg = TrainConfig::load(o->config, o->sets);
            if (o->ranks < 1 || o->ranks > 1 << 20)
              STRATA_THROW(ConfigError, "--ranks: expected a world size in [1, 1048576], got ", o->ranks);
            const parallel::ParallelDims dims = resolve_dims(cfg, o->ranks);
            Generator gen(cfg.run.seed);
            const auto model = build_model(cfg, gen);  // only to count Ψ
            parallel::MemoryPlanInput in = memory_plan_input(cfg, *model, dims.dp * dims.cp, dims.zero_stage);  // cp: replicas too
            const bool sp = cfg.parallel.sequence_parallel && dims.tp > 1;
            in.tp = dims.tp;
            if (dims.tp > 1) {
              in.tp_sharded_elements = parallel::tp_sharded_elements(*model, model_tp_plan(*model, sp));
              if (in.ddp_bucket_bytes > 0) in.ddp_bucket_bytes = parallel::tp_rank_elements(in) * in.bytes_per_element;
            }
            const int64_t psi = in.param_elements;
            std::printf("config: %s | model: %s, Ψ = %lld parameters x %lld bytes = %s | optim: %s, %d state "
                        "tensor(s) per parameter\n",
                        o->config.c_str(), cfg.model.type.c_str(), (long long)psi, (long long)in.bytes_per_element,
                        format_bytes_psi(psi * in.bytes_per_element, psi).c_str(), cfg.optim.name.c_str(),
                        in.optimizer_states);
            std::printf("layout at %d rank(s): %s | mesh %s | on dp: %s | %lld samples per dp rank per step\n",
                        o->ranks, dims.str().c_str(), dims.mesh_shape().str().c_str(), dims.dp_strategy().c_str(),
                        (long long)(cfg.train.batch_size / dims.dp));
            if (dims.tp > 1)
              std::printf("tensor parallel over %d: %lld of Ψ sharded, %lld replicated -> %lld parameters per rank%s\n",
                          dims.tp, (long long)in.tp_sharded_elements, (long long)(psi - in.tp_sharded_elements),
                          (long long)parallel::tp_rank_elements(in), sp ? " | sequence parallel" : "");
            if (cfg.model.type == "gpt" && dims.tp > 1 && cfg.model.block_size % dims.tp == 0) {  // a sequence to split
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
            if (dims.cp > 1) print_cp_plan(cfg, dims);  // context parallel (issue 17)
            std::printf("predicted static bytes per rank at %d rank(s) (MiB and multiples of Ψ; DDP buckets %s; "
                        "shards padded to a multiple of %d; activations not included):\n",
                        dims.dp * dims.cp,
                        cfg.parallel.ddp.gradient_as_bucket_view ? "none (gradient_as_bucket_view)"
                                                                 : "one flat copy of the grads",
                        dims.dp * dims.cp);
            std::printf("%s", format_plan_table(in, dims.zero_stage).c_str());
            if (dims.pp > 1) print_pipeline_plan(cfg, dims, *model);
            return 0;
          }};
}

}  // namespace strata::apps
