// strata plan: the per-rank memory of DDP and ZeRO stages 1-3 for a config's model at N
// ranks, predicted by parallel::plan_memory before anything is trained or launched.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/config.h"
#include "apps/factory.h"
#include "apps/memory_report.h"
#include "core/error.h"

namespace strata::apps {

Command add_plan_command(CLI::App& parent) {
  struct Opts {
    std::string config;
    std::vector<std::string> sets;
    int ranks = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = parent.add_subcommand(
      "plan", "Predict per-rank memory (params, grads, optimizer, comm) of DDP and ZeRO-1/2/3 at N ranks");
  cmd->add_option("-c,--config", o->config, "YAML config file")->required();
  cmd->add_option("--ranks", o->ranks, "Data-parallel world size N")->required();
  cmd->add_option("--set", o->sets, "Override a config key (repeatable)")->type_name("KEY=VALUE");
  return {cmd, [o] {
            const TrainConfig cfg = TrainConfig::load(o->config, o->sets);
            if (o->ranks < 1 || o->ranks > 1 << 20)
              STRATA_THROW(ConfigError, "--ranks: expected a world size in [1, 1048576], got ", o->ranks);
            Generator gen(cfg.run.seed);
            const auto model = build_model(cfg, gen);  // only to count Ψ
            const parallel::MemoryPlanInput in = memory_plan_input(cfg, *model, o->ranks, cfg.parallel.zero_stage);
            const int64_t psi = in.param_elements;
            std::printf("config: %s | model: %s, Ψ = %lld parameters x %lld bytes = %s | optim: %s, %d state "
                        "tensor(s) per parameter | parallel.mode %s, zero_stage %d\n",
                        o->config.c_str(), cfg.model.type.c_str(), (long long)psi, (long long)in.bytes_per_element,
                        format_bytes_psi(psi * in.bytes_per_element, psi).c_str(), cfg.optim.name.c_str(),
                        in.optimizer_states, cfg.parallel.mode.c_str(), cfg.parallel.zero_stage);
            std::printf("predicted static bytes per rank at %d rank(s) (MiB and multiples of Ψ; DDP buckets %s; "
                        "shards padded to a multiple of %d; activations not included):\n",
                        o->ranks,
                        cfg.parallel.ddp.gradient_as_bucket_view ? "none (gradient_as_bucket_view)"
                                                                 : "one flat copy of the grads",
                        o->ranks);
            std::printf("%s", format_plan_table(in, cfg.parallel.zero_stage).c_str());
            return 0;
          }};
}

}  // namespace strata::apps
