// The `strata` subcommands. Each add_*_command registers its CLI11 subcommand (and
// options) on the top-level app and returns the function main() runs when that
// subcommand was given. Commands throw strata errors; only main() catches them.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace strata::apps {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

/// strata train --config X.yaml [--set k=v]... [--resume DIR]
Command add_train_command(CLI::App& parent);
/// strata eval --checkpoint DIR [--config X.yaml] [--set k=v]...
Command add_eval_command(CLI::App& parent);
/// strata sample --checkpoint DIR [--prompt S] [--tokens N] [--temperature T] [--top-k K] [--seed S]
Command add_sample_command(CLI::App& parent);
/// strata plan --config X.yaml --ranks N [--set k=v]... (apps/plan_command.cpp)
Command add_plan_command(CLI::App& parent);
/// strata info
Command add_info_command(CLI::App& parent);
/// strata bench gemm|train|comm ... (apps/bench.cpp)
Command add_bench_command(CLI::App& parent);
/// strata ckpt consolidate --checkpoint DIR --out FILE (apps/ckpt_command.cpp)
Command add_ckpt_command(CLI::App& parent);
/// strata config show --config X.yaml [--set k=v]... | config reference (apps/config_command.cpp)
Command add_config_command(CLI::App& parent);
/// `strata plot RUN_DIR... [--out plot.svg]`: loss, eval and learning-rate curves as SVG.
Command add_plot_command(CLI::App& parent);

/// The strata version string.
const char* version_string();

}  // namespace strata::apps
