// strata ckpt: tools for checkpoints. `ckpt consolidate` turns a checkpoint of any layout
// and version (parallel/checkpoint/reader.h) into one plain safetensors file.
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <strata/parallel/checkpoint/training.h>
#include "apps/commands.h"
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

}  // namespace

Command add_ckpt_command(CLI::App& parent) {
  struct Opts {
    std::string checkpoint;
    std::string out;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = parent.add_subcommand("ckpt", "Checkpoint tools (consolidate a checkpoint into one file)");
  cmd->require_subcommand(1);
  CLI::App* cons = cmd->add_subcommand(
      "consolidate", "Write every tensor of a checkpoint, at its global shape, into one safetensors file");
  cons->add_option("--checkpoint", o->checkpoint,
                   "Checkpoint directory (with index.json; v1 state.json also read), or a run dir (its LATEST)")
      ->required();
  cons->add_option("-o,--out", o->out, "Output .safetensors file (written atomically)")->required();
  return {cmd, [o, cons] {
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
