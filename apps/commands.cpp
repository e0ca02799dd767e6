// strata train / eval / sample / info.
#include "apps/commands.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <strata/parallel/checkpoint/layout_io.h>
#include <strata/parallel/checkpoint/training.h>
#include "apps/config.h"
#include "apps/factory.h"
#include "apps/hf/hf_reader.h"
#include "apps/output_file.h"
#include "apps/run_dir.h"
#include "apps/plot.h"
#include "apps/trace_command.h"
#include "apps/trainer.h"
#include "apps/utf8_writer.h"
#include <strata/autograd/grad_mode.h>
#include <strata/comm/mpi.h>
#include <strata/core/json_limits.h>
#include <strata/core/threads.h>
#include <strata/nn/gpt.h>
#include <strata/nn/llama.h>
#include <strata/tensor/file_io.h>
#include <strata/tensor/cpu/simd_level.h>
#include <strata/tensor/cpu/gemm.h>
#ifdef STRATA_WITH_CUDA
#include <strata/tensor/cuda/runtime.h>
#endif

namespace strata::apps {
namespace fs = std::filesystem;

const char* version_string() {
#ifdef STRATA_VERSION
  return STRATA_VERSION;
#else
  return "0.1.0";
#endif
}

TrainConfig config_from_checkpoint(const parallel::Checkpoint& ck, const std::vector<std::string>& sets) {
  const std::string src = ck.dir + "/" + parallel::kStateFile + " (config)";
  std::vector<std::string> on_cpu = {"run.device=cpu"};
  on_cpu.insert(on_cpu.end(), sets.begin(), sets.end());
  // The layout the checkpoint was trained with does not matter here (eval and sample run
  // in this process), and checkpoints of older versions spell it parallel.mode.
  YAML::Node stored;
  try {
    stored = YAML::Load(ck.state.config_yaml);
  } catch (const YAML::Exception& e) {
    STRATA_THROW(DataError, "checkpoint '", ck.state_file, "': the config it stores (training_state.config) is not valid YAML: ",
                 e.what());
  }
  if (stored.IsMap()) stored.remove("parallel");
  TrainConfig c = TrainConfig::from_node(ConfigNode::load_string(YAML::Dump(stored), on_cpu, src));
  c.source = src;
  return c;
}

namespace {

// A run dir holding an earlier run (metrics.jsonl or checkpoints/) is refused unless the
// run resumes (train.resume) or --overwrite removes that run's files: otherwise its
// metrics would be truncated and LATEST moved while its old checkpoints stay beside the
// new ones. Every rank checks before any rank writes (the world forms first).
void prepare_run_dir(const TrainConfig& cfg, bool overwrite) {
  if (!holds_earlier_run(cfg.run.dir) || !cfg.train.resume.empty()) return;
  if (!overwrite)
    config_fail("run.dir", "'" + cfg.run.dir + "' holds an earlier run (metrics.jsonl / checkpoints/): pass --resume " +
                               cfg.run.dir + " (or --resume auto) to continue it, --overwrite to start over, or set "
                               "another run.dir");
  if (comm::launcher_rank() == 0) remove_earlier_run(cfg.run.dir);  // rank 0 removes them
}

}  // namespace

Command add_train_command(CLI::App& parent) {
  struct Opts {
    std::string config;
    std::vector<std::string> sets;
    std::string resume;
    bool overwrite = false;
    bool memory_report = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = parent.add_subcommand("train", "Train a model from a YAML config");
  cmd->add_option("-c,--config", o->config, "YAML config file")->required();
  cmd->add_option("--set", o->sets, "Override a config key: --set optim.lr=1e-3 (repeatable)")
      ->type_name("KEY=VALUE");
  cmd->add_option("--resume", o->resume,
                  "Resume from a checkpoint or run dir, or 'auto': run.dir's newest checkpoint if it has one "
                  "(same as --set train.resume=...)");
  cmd->add_flag("--overwrite", o->overwrite,
                "Start over in a run.dir that holds an earlier run (its metrics.jsonl and checkpoints/ are removed)");
  cmd->add_flag("--memory-report", o->memory_report,
                "Print the allocator's bytes per category against the planner's prediction at the end");
  return {cmd, [o] {
            std::vector<std::string> sets = o->sets;
            if (!o->resume.empty()) sets.push_back("train.resume=" + o->resume);
            TrainConfig cfg = TrainConfig::load(o->config, sets);
            // Rank 0 holds the run directory for the whole run, before anything in it changes.
            std::optional<RunDirLock> lock;
            if (comm::launcher_rank() == 0) lock.emplace(cfg.run.dir);
            prepare_run_dir(cfg, o->overwrite);
            std::unique_ptr<Trainer> trainer;
            try {
              trainer = std::make_unique<Trainer>(std::move(cfg), TrainerOptions{.memory_report = o->memory_report});
              trainer->train();
            } catch (const CommError& e) {
              // Report here, while the Trainer (and its process group) is alive: after a
              // failure, destroying the last MPI group ends the process with this status.
              std::fflush(stdout);
              const int rank = trainer ? trainer->rank() : comm::launcher_rank();
              std::fprintf(stderr, "strata: error: rank %d: communication failed: %s\n", rank, e.what());
              std::fflush(stderr);
              // Under mpirun the launcher terminates the remaining ranks about 1 s after the
              // first abnormal exit: end now with the documented status rather than after
              // tearing the Trainer down (its process group could not finalize anyway).
              if (comm::launched_by_mpi()) std::_Exit(comm::kCommFailureExitCode);
              return comm::kCommFailureExitCode;
            }
            return 0;
          }};
}

Command add_eval_command(CLI::App& parent) {
  struct Opts {
    std::string config;
    std::string checkpoint;
    std::vector<std::string> sets;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = parent.add_subcommand("eval", "Evaluate a checkpoint on the config's test/val split");
  cmd->add_option("--checkpoint", o->checkpoint, "Checkpoint dir (or run dir with checkpoints/LATEST)")->required();
  cmd->add_option("-c,--config", o->config, "YAML config (default: the config stored in the checkpoint)");
  cmd->add_option("--set", o->sets, "Override a config key (repeatable)")->type_name("KEY=VALUE");
  return {cmd, [o] {
            // Validate the config first (exit 2 beats exit 1 for a bad key), then the checkpoint.
            std::optional<TrainConfig> cfg;
            if (!o->config.empty()) cfg = TrainConfig::load(o->config, o->sets);
            const parallel::Checkpoint ck = parallel::read_checkpoint(o->checkpoint, false);
            if (!cfg) cfg = config_from_checkpoint(ck, o->sets);
            cfg->train.resume.clear();
            cfg->parallel = {};  // any checkpoint (DDP, ZeRO, thread replicas) evaluates in this process
            Trainer trainer(*cfg, {.verbose = false, .write_files = false});
            parallel::load_into(ck, trainer.model(), nullptr);
            const EvalResult r = trainer.evaluate();
            const std::string split = trainer.data().eval_split;
            std::printf("checkpoint: %s (step %lld)\n", ck.dir.c_str(), (long long)ck.state.step);
            if (r.accuracy) std::printf("%s accuracy: %.4f\n", split.c_str(), *r.accuracy);
            std::printf("%s loss: %.4f", split.c_str(), r.loss);
            if (trainer.data().bigram_entropy) std::printf(" (bigram entropy: %.4f)", *trainer.data().bigram_entropy);
            std::printf("\n%s samples: %lld\n", split.c_str(), (long long)r.samples);
            if (!std::isfinite(r.loss))  // diverged weights (loaded with STRATA_ALLOW_NONFINITE): exit 1
              STRATA_THROW(DataError, "checkpoint '", ck.dir, "': the ", split, " loss is not finite (", r.loss, ")");
            return 0;
          }};
}

// The tokenizer a `tokens` dataset was written with: tools/make_tokens.py leaves
// tokenizer.json ({"tokenizer": "bytes" | "tiktoken:gpt2" | ...}) beside its .bin files.
// "" when there is none (token files from elsewhere).
static std::string token_files_tokenizer(const std::string& data_path) {
  std::error_code ec;
  fs::path dir = fs::is_directory(data_path, ec) ? fs::path(data_path) : fs::path(data_path).parent_path();
  const fs::path meta = dir / "tokenizer.json";
  if (!fs::is_regular_file(meta, ec)) return "";
  const nlohmann::json j = parse_json_file_text(read_file_text(meta.string()), meta.string());
  // A Hugging Face tokenizer.json beside the files is not this note; data.tokenizer names one.
  if (j.is_object() && j.contains("model") && !j.contains("tokenizer")) return "";
  if (!j.is_object() || !j.contains("tokenizer") || !j["tokenizer"].is_string())
    STRATA_THROW(DataError, meta.string(), ": expected {\"tokenizer\": \"<name>\"}");
  return j["tokenizer"].get<std::string>();
}

// Token ids from "--prompt-ids 3,17 5" (commas or spaces).
static std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  std::string cur;
  for (char c : text + " ") {
    if (c == ',' || std::isspace(static_cast<unsigned char>(c))) {
      if (!cur.empty()) {
        size_t used = 0;
        try {
          ids.push_back(std::stoll(cur, &used));
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != cur.size()) STRATA_THROW(ConfigError, "--prompt-ids: '", cur, "' is not a token id");
      }
      cur.clear();
    } else {
      cur += c;
    }
  }
  return ids;
}

HfModel load_hf_model(const std::string& dir) {
  // The model keys come from config.json alone (model.init_from); the data and optim
  // sections only have to be valid for a language model (nothing trains).
  const hf::HfModelSpec spec = hf::read_hf_config(dir);
  YAML::Node y;
  y["model"]["init_from"] = dir;
  y["data"]["dataset"] = "synthetic";
  y["data"]["kind"] = "tokens";
  y["data"]["vocab_size"] = spec.vocab;
  y["optim"]["lr"] = 1e-3;
  HfModel out{TrainConfig::from_node(ConfigNode::load_string(YAML::Dump(y), {}, dir + " (config.json)")), nullptr};
  Generator init(out.cfg.run.seed);
  out.model = build_model(out.cfg, init);
  const hf::HfModelDir src(dir, DType::f32);
  parallel::load_replicated(src, *out.model, nullptr, nullptr);
  return out;
}

Command add_sample_command(CLI::App& parent) {
  struct Opts {
    std::string checkpoint;
    std::string prompt = "\n", prompt_ids;
    int64_t tokens = 200;
    double temperature = 1.0;
    int64_t top_k = 0;
    uint64_t seed = 0;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = parent.add_subcommand("sample", "Generate text from a GPT or Llama checkpoint (or a Hugging Face model directory)");
  cmd->add_option("--checkpoint", o->checkpoint, "Checkpoint dir (or run dir)")->required();
  CLI::Option* prompt_opt = cmd->add_option("--prompt", o->prompt, "Text to continue (byte-level models, or encoded with data.tokenizer)");
  cmd->add_option("--prompt-ids", o->prompt_ids,
                  "Token ids to continue (models trained on `tokens` files of another tokenizer), e.g. '464,3290'");
  cmd->add_option("--tokens", o->tokens, "Tokens to generate")->check(CLI::NonNegativeNumber);
  cmd->add_option("--temperature", o->temperature, "Softmax temperature; 0 = greedy")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", o->top_k, "Sample only from the k most likely tokens; 0 = all")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", o->seed, "Sampling seed");
  cmd->add_option("--threads", o->threads, "Threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  return {cmd, [o, prompt_opt] {
            set_num_threads(o->threads);
            // A Hugging Face model directory samples as it is; else a strata checkpoint.
            const bool hf_dir = hf::is_hf_model_dir(o->checkpoint);
            std::optional<parallel::Checkpoint> ck;
            TrainConfig cfg;
            std::shared_ptr<nn::Module> model;
            if (hf_dir) {
              HfModel m = load_hf_model(o->checkpoint);
              model = m.model;
              cfg.model = m.cfg.model;
              cfg.data.dataset = "hf";  // token ids in and out
            } else {
              ck = parallel::read_checkpoint(o->checkpoint, false);
              cfg = config_from_checkpoint(*ck, {});
              if (cfg.model.type != "gpt" && cfg.model.type != "llama")
                STRATA_THROW(ConfigError, "model.type: 'strata sample' needs a gpt or llama checkpoint, '", ck->dir,
                             "' holds a ", cfg.model.type);
              Generator init(cfg.run.seed);
              model = build_model(cfg, init);
              parallel::load_into(*ck, *model, nullptr);
            }
            int64_t vocab = 0, block = 0;
            if (const auto* g = dynamic_cast<const nn::GPT*>(model.get())) {
              vocab = g->config().vocab;
              block = g->config().block_size;
            } else if (const auto* l = dynamic_cast<const nn::Llama*>(model.get())) {
              vocab = l->config().vocab;
              block = l->config().block_size;
            } else {
              STRATA_THROW(ConfigError, "model.type: 'strata sample' needs a gpt or llama model, '", o->checkpoint,
                           "' holds a ", cfg.model.type);
            }
            model->eval();
            NoGradGuard no_grad;
            // Byte-level models (the text corpus, or token files make_tokens.py wrote from bytes)
            // read and write text; other token models read and write ids.
            // data.tokenizer: the prompt is encoded and the output decoded with it.
            const auto tok = config_tokenizer(cfg);
            const std::string tokenizer =
                !tok && cfg.data.dataset == "tokens" ? token_files_tokenizer(cfg.data.path) : "";
            const bool bytes = !tok && (cfg.data.dataset == "text" || tokenizer == "bytes");
            const bool text_io = bytes || tok;
            std::vector<int64_t> ctx;
            if (!o->prompt_ids.empty()) {
              ctx = parse_ids(o->prompt_ids);
              for (int64_t id : ctx)
                if (id < 0 || id >= vocab)
                  STRATA_THROW(ConfigError, "--prompt-ids: ", id, " is outside the model's vocabulary of ", vocab);
            } else if (tok) {
              for (uint32_t id : tok->encode(o->prompt, false)) {
                if (int64_t(id) >= vocab)
                  STRATA_THROW(ConfigError, "--prompt: token ", id, " of data.tokenizer is outside the model's vocabulary of ", vocab);
                ctx.push_back(id);
              }
            } else {
              if (!bytes && prompt_opt->count() > 0)
                STRATA_THROW(ConfigError, "--prompt: this model was trained on token ids",
                             tokenizer.empty() ? std::string() : " (tokenizer " + tokenizer + ")",
                             ", not bytes: give --prompt-ids");
              for (unsigned char c : bytes ? o->prompt : std::string()) {
                if (int64_t(c) >= vocab)
                  STRATA_THROW(ConfigError, "--prompt: byte ", int(c), " is outside the model's vocabulary of ", vocab);
                ctx.push_back(c);
              }
            }
            if (!text_io)
              std::fprintf(stderr, "strata sample: printing token ids%s\n",
                           tokenizer.empty()
                               ? ""
                               : (" (decode: ... | python3 tools/make_tokens.py --decode " + tokenizer + ")").c_str());
            if (ctx.empty()) ctx.push_back(0);
            Utf8Writer text(stdout);  // a byte model may emit invalid UTF-8: escaped as \xNN
            // Token bytes through the writer: a token may end inside a UTF-8 character.
            auto put_token = [&](int64_t id) {
              if (bytes) {
                text.put(static_cast<unsigned char>(id));
              } else {
                const uint32_t one = uint32_t(id);
                for (unsigned char c : tok->decode_bytes({&one, 1})) text.put(c);
              }
            };
            if (text_io)
              for (int64_t c : ctx) put_token(c);
            Generator gen(o->seed);
            std::vector<float> probs(static_cast<size_t>(vocab));
            for (int64_t i = 0; i < o->tokens; ++i) {
              const int64_t t = std::min<int64_t>(int64_t(ctx.size()), block);
              std::vector<int64_t> window(ctx.end() - t, ctx.end());
              Tensor logits = model->forward(ops::from_vector(window, {1, t}));  // (1, t, V)
              const std::vector<float> last = ops::select(ops::select(logits, 0, 0), 0, t - 1).to_vector<float>();
              int64_t next = 0;
              if (o->temperature == 0.0) {
                next = int64_t(std::max_element(last.begin(), last.end()) - last.begin());
              } else {
                // softmax(last / T) restricted to the top-k logits.
                float cutoff = -INFINITY;
                if (o->top_k > 0 && o->top_k < vocab) {
                  std::vector<float> sorted = last;
                  std::nth_element(sorted.begin(), sorted.begin() + (o->top_k - 1), sorted.end(), std::greater<>());
                  cutoff = sorted[size_t(o->top_k - 1)];
                }
                const float mx = *std::max_element(last.begin(), last.end());
                double total = 0;
                for (int64_t v = 0; v < vocab; ++v) {
                  probs[size_t(v)] = last[size_t(v)] < cutoff ? 0.0f
                                                              : std::exp(float((last[size_t(v)] - mx) / o->temperature));
                  total += probs[size_t(v)];
                }
                double u = double(gen.uniform(gen.reserve(1), 0)) * total;
                next = vocab - 1;
                for (int64_t v = 0; v < vocab; ++v) {
                  u -= probs[size_t(v)];
                  if (u < 0) {
                    next = v;
                    break;
                  }
                }
              }
              ctx.push_back(next);
              if (text_io)
                put_token(next);
              else
                std::printf("%lld ", (long long)next);
              std::fflush(stdout);
            }
            text.finish();
            std::printf("\n");
            return 0;
          }};
}

Command add_plot_command(CLI::App& parent) {
  struct Opts {
    std::vector<std::string> runs;
    std::string out = "plot.svg", trace;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = parent.add_subcommand("plot", "Plot runs' loss, eval and learning-rate curves (one SVG; runs overlay)");
  cmd->add_option("runs", o->runs, "Run dirs (each holds metrics.jsonl)");
  cmd->add_option("--trace", o->trace, "A merged trace (strata trace merge): draw its timeline as a Gantt chart");
  cmd->add_option("-o,--out", o->out, "SVG file to write");
  return {cmd, [o] {
            if (o->trace.empty() == o->runs.empty())
              STRATA_THROW(ConfigError, "strata plot: give run dirs or --trace MERGED.json (one of them)");
            check_output_path(o->out, "--out");  // before any run is read
            if (!o->trace.empty()) {
              write_output_file(o->out, "--out", plot_trace_svg(read_trace(o->trace)));
              std::printf("wrote %s (timeline of %s)\n", o->out.c_str(), o->trace.c_str());
              return 0;
            }
            std::vector<RunCurves> runs;
            for (const std::string& d : o->runs) runs.push_back(read_run_curves(d));
            write_output_file(o->out, "--out", plot_runs_svg(runs));
            std::printf("wrote %s (%zu run(s))\n", o->out.c_str(), runs.size());
            return 0;
          }};
}

Command add_info_command(CLI::App& parent) {
  CLI::App* cmd = parent.add_subcommand("info", "Version, BLAS, threads and compiled backends");
  return {cmd, [] {
            std::printf("strata %s\n", version_string());
            std::printf("blas: %s\n", cpu::blas_info());
            std::printf("gemm: %s\n", cpu::gemm_backend_info().c_str());
            std::printf("cpu kernels: %s\n", cpu::cpu_kernels_info());
            std::printf("threads: %d (hardware threads: %u)\n", get_num_threads(), std::thread::hardware_concurrency());
            std::printf("backends:\n  cpu: yes\n  mpi: yes\n");
#ifdef STRATA_WITH_CUDA
            std::printf("  cuda: yes (runtime %s, driver %s, kernels for sm %s)\n",
                        cuda::version_string(cuda::runtime_version()).c_str(),
                        cuda::version_string(cuda::driver_version()).c_str(), cuda::compiled_architectures());
            for (const std::string& line : cuda::describe_devices()) std::printf("    %s\n", line.c_str());
#else
            std::printf("  cuda: no (not compiled in this build)\n");
#endif
            return 0;
          }};
}

void require_finite_numbers(CLI::App& app) {
  const CLI::Validator finite(
      [](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (end != s.c_str() && *end == 0 && !std::isfinite(v)) return "'" + s + "' is not a finite number";
        return "";
      },
      "FINITE");
  for (CLI::Option* o : app.get_options())
    if (o->get_type_name().find("FLOAT") != std::string::npos) o->transform(finite);  // before any range check
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) require_finite_numbers(*sub);
}

std::vector<std::string> help_words_as_flags(int argc, const char* const* argv) {
  std::vector<std::string> args(argv, argv + argc);
  if (args.size() >= 2 && args[1] == "help") {  // strata help [CMD...]
    args.erase(args.begin() + 1);
    args.push_back("--help");
  } else if (args.size() >= 3 && args.back() == "help") {  // strata CMD... help
    args.back() = "--help";
  }
  return args;
}

}  // namespace strata::apps
