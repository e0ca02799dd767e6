// Entry point of the `strata` CLI: parses the subcommand, runs it, and is the one
// place that catches strata errors and maps them to exit codes (config 2, data 1, comm 3).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <regex>
#include <vector>

#include "apps/commands.h"
#include "apps/trace_command.h"
#include <strata/comm/mpi.h>
#include <strata/core/config.h>
#include <strata/core/error.h>
#include <strata/core/threads.h>

int main(int argc, char** argv) {
  using namespace strata::apps;
  strata::tune_environment_and_reexec(argv);  // OpenBLAS kernels + OpenMP spin (see core/threads.h)
  CLI::App app{"strata: a C++ training framework (CPU, OpenBLAS)", "strata"};
  app.require_subcommand(1);
  app.option_defaults()->always_capture_default();  // --help shows every option's default
  app.set_version_flag("--version", std::string("strata ") + version_string());
  const std::vector<Command> commands = {add_train_command(app), add_eval_command(app), add_sample_command(app),
                                         add_bench_command(app), add_info_command(app), add_plan_command(app),
                                         add_ckpt_command(app), add_plot_command(app),
                                         add_config_command(app), add_trace_command(app),
                                         add_launch_command(app), add_tokenizer_command(app),
                                         add_tokenize_command(app)};
  app.footer(
      "Examples:\n"
      "  strata train --config configs/fashion_mlp.yaml\n"
      "  mpirun -np 2 strata train --config configs/gpt_char_ddp.yaml --set optim.lr=3e-4\n"
      "  strata launch --hosts node1:4,node2:4 -- train --config configs/gpt_char_ddp.yaml\n"
      "  strata plan --config configs/gpt_char.yaml --ranks 8\n"
      "  strata eval --checkpoint runs/fashion_mlp\n"
      "  strata sample --checkpoint runs/gpt_char --prompt 'The ' --tokens 200\n"
      "  strata tokenizer train /usr/share/games/fortunes --vocab-size 2048 -o tokenizer.json\n"
      "  strata tokenize /usr/share/games/fortunes --tokenizer tokenizer.json -o fortunes.bin\n"
      "  strata help train");
  require_finite_numbers(app);
  // `strata help train`, `strata train help`: the --help of that command.
  std::vector<std::string> words = help_words_as_flags(argc, argv);
  // `strata launch -np N`, mpirun's spelling, as --np N (CLI11 reads -np as -n p).
  for (size_t i = 2; words.size() > 1 && words[1] == "launch" && i < words.size() && words[i] != "--"; ++i)
    if (words[i] == "-np") words[i] = "--np";
  std::vector<const char*> args;
  for (const std::string& w : words) args.push_back(w.c_str());
  argc = int(args.size());
  try {
    app.parse(argc, args.data());
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help / --version
    if (argc > 1 && args[1][0] != '-') {  // an unknown command: suggest the closest one
      const std::string given = args[1];
      const CLI::App* best = nullptr;
      size_t best_d = 3;  // at most 2 edits away
      for (const Command& c : commands) {
        const size_t d = strata::edit_distance(given, c.app->get_name());
        if (d == 0) best = nullptr, best_d = 0;  // a known command: the error is elsewhere
        if (d < best_d) best = c.app, best_d = d;
      }
      if (best_d > 0 && best) {
        std::fprintf(stderr, "strata: error: unknown command '%s'; did you mean '%s'?\nRun 'strata --help' for usage.\n",
                     given.c_str(), best->get_name().c_str());
        return 2;
      }
    }
    // CLI11's open ranges print DBL_MAX in full (309 digits): say "inf".
    const std::string msg = std::regex_replace(std::string(e.what()), std::regex(R"(\d{40,}(\.\d+)?)"), "inf");
    std::fprintf(stderr, "strata: error: %s\nRun 'strata --help' for usage.\n", msg.c_str());
    return 2;
  }
  try {
    for (const Command& c : commands)
      if (c.app->parsed()) return c.run();
    return 2;
  } catch (const strata::ConfigError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "strata: error: %s\n", e.what());
    return 2;
  } catch (const strata::CommError& e) {
    // Name the rank: under mpirun every rank's stderr is interleaved.
    std::fflush(stdout);
    std::fprintf(stderr, "strata: error: rank %d: communication failed: %s\n", strata::comm::launcher_rank(), e.what());
    return strata::comm::kCommFailureExitCode;
  } catch (const strata::DataError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "strata: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "strata: error: %s\n", e.what());
    return 1;
  }
}
