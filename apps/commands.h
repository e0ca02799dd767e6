// The `strata` subcommands. Each add_*_command registers its CLI11 subcommand (and
// options) on the top-level app and returns the function main() runs when that
// subcommand was given. Commands throw strata errors; only main() catches them.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "apps/config.h"
#include <strata/nn/gpt.h>
#include <strata/parallel/checkpoint/training.h>

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
/// strata launch [--hosts H:N,... | --hostfile F] [-np N] [--max-restarts K] ... -- train ...
/// (apps/launch.cpp): mpirun with restarts after communication failures.
Command add_launch_command(CLI::App& parent);
/// `strata plot RUN_DIR... [--out plot.svg]`: loss, eval and learning-rate curves as SVG.
Command add_plot_command(CLI::App& parent);

/// The config a checkpoint was trained with (its state echo), on the CPU (run.device=cpu,
/// then `sets`): a GPU run's checkpoint evaluates anywhere, as torch.load's map_location.
/// The layout it was trained with is dropped. DataError when the stored YAML is invalid.
TrainConfig config_from_checkpoint(const parallel::Checkpoint& ck, const std::vector<std::string>& sets);

/// A model built from a Hugging Face directory's config.json (model.init_from) and
/// loaded with its weights, f32, in this process; `cfg` is the config that built it.
struct HfModel {
  TrainConfig cfg;
  std::shared_ptr<nn::Module> model;
};
/// For sample and the interop tools. ConfigError when this build has no module for the
/// architecture; DataError naming the file and field or tensor.
HfModel load_hf_model(const std::string& dir);

/// strata tokenizer train|encode|decode (apps/tokenizer_command.cpp)
Command add_tokenizer_command(CLI::App& parent);
/// strata tokenize INPUT... --tokenizer T.json --output X.bin (apps/tokenizer_command.cpp)
Command add_tokenize_command(CLI::App& parent);

/// The strata version string.
const char* version_string();

/// Every floating-point option of `app` and its subcommands refuses NaN and inf ("--x:
/// 'nan' is not a finite number", exit 2): CLI11's range checks let NaN through.
void require_finite_numbers(CLI::App& app);

/// `strata help [CMD...]` and `strata CMD... help` as `strata CMD... --help` (git's and
/// cargo's spelling); other argument lists unchanged.
std::vector<std::string> help_words_as_flags(int argc, const char* const* argv);

}  // namespace strata::apps
