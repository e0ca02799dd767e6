// strata ckpt: tools for checkpoints. `ckpt consolidate` turns a checkpoint of any layout
// and version (parallel/checkpoint/reader.h) into one plain safetensors file; `ckpt
// export --format hf` into a Hugging Face model directory (apps/hf/hf_writer.h).
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <strata/parallel/checkpoint/training.h>
#include "apps/commands.h"
#include "apps/hf/hf_writer.h"
#include "apps/output_file.h"
#include <strata/parallel/checkpoint/reader.h>
#include <strata/tensor/file_io.h>
#include <strata/tensor/safetensors.h>

namespace strata::apps {
namespace {
namespace fs = std::filesystem;

// ConfigError (exit 2) unless `out` is a new path or an existing regular file (not a
// symlink, device, FIFO or directory) outside the checkpoint directory `ckpt`:
// consolidate renames over `out`. Checked before the checkpoint is opened.
void check_out_path(const std::string& out, const std::string& ckpt) {
  check_output_path(out, "--out");
  std::error_code ec;
  const fs::path dir = fs::weakly_canonical(fs::absolute(ckpt, ec), ec);
  const fs::path target = fs::weakly_canonical(fs::absolute(out, ec), ec);
  for (fs::path p = target.parent_path(); !ec && !p.empty(); p = p.parent_path()) {
    if (p == dir)
      STRATA_THROW(ConfigError, "--out '", out, "' is inside the checkpoint directory '", ckpt,
                   "' being consolidated: write it elsewhere");
    if (p == p.root_path()) break;
  }
}

// ConfigError if an existing `out` is one of the checkpoint's files under another name.
void check_out_not_input(const std::string& out, const parallel::CheckpointReader& rd) {
  struct stat st {};
  if (::lstat(out.c_str(), &st) != 0) return;
  for (const std::string& f : rd.files()) {
    struct stat fst {};
    if (::stat(f.c_str(), &fst) == 0 && fst.st_dev == st.st_dev && fst.st_ino == st.st_ino)
      STRATA_THROW(ConfigError, "--out '", out, "' is the checkpoint's own file '", f, "' (a hard link)");
  }
}

// The Hugging Face architecture of a checkpoint's model: its config's model keys, the
// shapes from the tensors themselves. DataError for a model transformers has no class for.
hf::HfModelSpec hf_spec_of(const parallel::Checkpoint& ck, const TrainConfig& cfg) {
  const parallel::CheckpointReader& rd = *ck.reader;
  if (cfg.model.token_model() && cfg.model.moe.enabled())
    STRATA_THROW(DataError, "checkpoint '", ck.dir, "' holds a mixture-of-experts model (model.moe): --format hf "
                 "exports dense GPT2LMHeadModel and LlamaForCausalLM models only");
  if (cfg.model.type == "llama") {
    hf::HfModelSpec s;
    s.architecture = "LlamaForCausalLM";
    s.model_type = "llama";
    const char* emb = "tok_embeddings.weight";
    if (!rd.contains(emb) || rd.global_shape(emb).size() != 2)
      STRATA_THROW(DataError, "checkpoint '", ck.dir, "': tensor '", emb, "' is missing or not 2-D");
    s.vocab = rd.global_shape(emb)[0];
    s.n_embd = rd.global_shape(emb)[1];
    s.block_size = cfg.model.block_size;
    s.n_layer = cfg.model.n_layer;
    s.n_head = cfg.model.n_head;
    s.n_kv_head = cfg.model.n_kv_head > 0 ? cfg.model.n_kv_head : cfg.model.n_head;
    const char* w1 = "layers.0.feed_forward.w1.weight";
    if (!rd.contains(w1) || rd.global_shape(w1).size() != 2)
      STRATA_THROW(DataError, "checkpoint '", ck.dir, "': tensor '", w1, "' is missing or not 2-D");
    s.intermediate_size = rd.global_shape(w1)[0];
    s.norm_eps = cfg.model.norm_eps;
    s.rope_theta = cfg.model.rope_theta;
    if (cfg.model.rope_scaling) {
      const RopeScalingSection& r = *cfg.model.rope_scaling;
      s.rope_scaling = hf::RopeScaling{r.factor, r.low_freq_factor, r.high_freq_factor, r.original_max_position_embeddings};
    }
    s.tie_weights = cfg.model.tie_weights;
    return s;
  }
  if (cfg.model.type != "gpt")
    STRATA_THROW(DataError, "checkpoint '", ck.dir, "' holds a model.type ", cfg.model.type,
                 " model: --format hf exports gpt (as GPT2LMHeadModel) and llama (as LlamaForCausalLM)");
  if (!cfg.model.bias)
    STRATA_THROW(DataError, "checkpoint '", ck.dir, "' holds a gpt with model.bias false: GPT2LMHeadModel always has "
                 "biases, so it has no Hugging Face form");
  hf::HfModelSpec s;
  s.architecture = "GPT2LMHeadModel";
  s.model_type = "gpt";
  for (const char* n : {"wte.weight", "wpe.weight"})
    if (!rd.contains(n) || rd.global_shape(n).size() != 2)
      STRATA_THROW(DataError, "checkpoint '", ck.dir, "': tensor '", n, "' is missing or not 2-D");
  s.vocab = rd.global_shape("wte.weight")[0];
  s.n_embd = rd.global_shape("wte.weight")[1];
  s.block_size = rd.global_shape("wpe.weight")[0];
  s.n_layer = cfg.model.n_layer;
  s.n_head = s.n_kv_head = cfg.model.n_head;
  s.intermediate_size = 4 * s.n_embd;
  s.norm_eps = 1e-5;
  s.tie_weights = cfg.model.tie_weights;
  return s;
}

}  // namespace

Command add_ckpt_command(CLI::App& parent) {
  struct Opts {
    std::string checkpoint;
    std::string out;
  };
  struct ExportOpts {
    std::string checkpoint, out, format, max_shard_size = "5GB", dtype = "float32";
    bool overwrite = false;
  };
  auto o = std::make_shared<Opts>();
  auto x = std::make_shared<ExportOpts>();
  CLI::App* cmd = parent.add_subcommand("ckpt", "Checkpoint tools (consolidate a checkpoint into one file, export it)");
  cmd->require_subcommand(1);
  CLI::App* cons = cmd->add_subcommand(
      "consolidate", "Write every tensor of a checkpoint, at its global shape, into one safetensors file");
  cons->add_option("--checkpoint", o->checkpoint,
                   "Checkpoint directory (with index.json; v1 state.json also read), or a run dir (its LATEST)")
      ->required();
  cons->add_option("-o,--out", o->out, "Output .safetensors file (written atomically)")->required();
  CLI::App* exp = cmd->add_subcommand(
      "export", "Write a checkpoint's model (any layout) as a Hugging Face model directory that transformers loads");
  exp->add_option("--checkpoint", x->checkpoint, "Checkpoint directory, or a run dir (its LATEST)")->required();
  exp->add_option("--format", x->format, "Output format: hf (config.json + safetensors)")->required()->check(
      CLI::IsMember({"hf"}));
  exp->add_option("-o,--out", x->out, "Output directory (written beside it, then renamed into place)")->required();
  exp->add_option("--max-shard-size", x->max_shard_size,
                  "Largest safetensors file, e.g. 5GB (the default, as save_pretrained), 200MB; above it the weights "
                  "are split into shards listed by model.safetensors.index.json");
  exp->add_option("--dtype", x->dtype, "Stored dtype: float32 (default), bfloat16 or float16")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));
  exp->add_flag("--overwrite", x->overwrite, "Replace an existing non-empty --out directory");
  return {cmd, [o, cons, x, exp] {
            if (exp->parsed()) {
              hf::HfExportOptions opts;
              opts.max_shard_bytes = hf::parse_shard_size(x->max_shard_size, "--max-shard-size");
              opts.dtype = x->dtype == "bfloat16" ? DType::bf16 : x->dtype == "float16" ? DType::f16 : DType::f32;
              opts.overwrite = x->overwrite;
              check_output_dir(x->out, "--out", x->overwrite);  // before anything is read
              const parallel::Checkpoint ck = parallel::open_checkpoint(x->checkpoint);
              const hf::HfModelSpec spec = hf_spec_of(ck, config_from_checkpoint(ck, {}));
              const hf::HfExportSummary r = hf::export_hf(*ck.reader, spec, x->out, opts);
              std::printf("exported %s (step %lld) as %s: %d tensors, %.3f MB in %d safetensors file%s, into %s\n",
                          ck.dir.c_str(), (long long)ck.state.step, spec.architecture.c_str(), r.tensors,
                          double(r.bytes) / 1e6, r.files, r.files == 1 ? "" : "s", x->out.c_str());
              return 0;
            }
            if (!cons->parsed()) return 2;
            struct stat st {};
            if (::stat(o->checkpoint.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
              // A file, not a checkpoint directory: a valid safetensors file is what consolidate makes.
              const SafetensorsHeader h = read_safetensors_header(o->checkpoint);  // DataError unless one
              std::printf("%s is one safetensors file (%zu tensors): already consolidated, nothing to do\n",
                          o->checkpoint.c_str(), h.entries.size());
              return 0;
            }
            check_out_path(o->out, o->checkpoint);  // before anything is opened
            std::error_code ec;  // a run dir stands for its LATEST checkpoint, as in eval and sample
            const std::string dir =
                fs::is_directory(o->checkpoint, ec) ? parallel::resolve_checkpoint_dir(o->checkpoint) : o->checkpoint;
            {
              if (dir != o->checkpoint) check_out_path(o->out, dir);
              const parallel::CheckpointReader rd(dir);
              check_out_not_input(o->out, rd);
              bool whole = rd.files().size() == 1 && rd.version() >= 2;
              for (const std::string& n : rd.names())
                whole = whole && (rd.info(n).pieces.empty() || (rd.info(n).pieces.size() == 1 && rd.info(n).pieces[0].key == n));
              if (whole)
                std::printf("note: %s is already one safetensors file of whole tensors (%s); writing a copy\n",
                            dir.c_str(), rd.files()[0].c_str());
            }
            parallel::consolidate(dir, o->out);
            const SafetensorsHeader h = read_safetensors_header(o->out);  // summary from what was written
            const uint64_t bytes = h.entries.empty() ? 0 : h.entries.back().end;
            std::printf("consolidated %zu tensors (%.3f MB) from %s shard files (zero stage %s) into %s\n",
                        h.entries.size(), double(bytes) / 1e6, h.metadata.at("strata_world_size").c_str(),
                        h.metadata.at("strata_zero_stage").c_str(), o->out.c_str());
            return 0;
          }};
}

}  // namespace strata::apps
