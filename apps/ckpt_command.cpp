// strata ckpt: tools for checkpoints. `ckpt consolidate` turns a checkpoint of any layout
// and version (parallel/checkpoint_reader.h) into one plain safetensors file.
#include <cstdio>
#include <memory>
#include <string>

#include "apps/commands.h"
#include "parallel/checkpoint_reader.h"
#include "tensor/safetensors.h"

namespace strata::apps {

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
  cons->add_option("--checkpoint", o->checkpoint, "Checkpoint directory (with index.json; v1 state.json also read)")
      ->required();
  cons->add_option("-o,--out", o->out, "Output .safetensors file (written atomically)")->required();
  return {cmd, [o, cons] {
            if (!cons->parsed()) return 2;
            {
              const parallel::CheckpointReader rd(o->checkpoint);
              bool whole = rd.files().size() == 1 && rd.version() >= 2;
              for (const std::string& n : rd.names())
                whole = whole && (rd.info(n).pieces.empty() || (rd.info(n).pieces.size() == 1 && rd.info(n).pieces[0].key == n));
              if (whole)
                std::printf("note: %s is already one safetensors file of whole tensors (%s); writing a copy\n",
                            o->checkpoint.c_str(), rd.files()[0].c_str());
            }
            parallel::consolidate(o->checkpoint, o->out);
            const SafetensorsHeader h = read_safetensors_header(o->out);  // summary from what was written
            const uint64_t bytes = h.entries.empty() ? 0 : h.entries.back().end;
            std::printf("consolidated %zu tensors (%.3f MB) from %s shard files (zero stage %s) into %s\n",
                        h.entries.size(), double(bytes) / 1e6, h.metadata.at("strata_world_size").c_str(),
                        h.metadata.at("strata_zero_stage").c_str(), o->out.c_str());
            return 0;
          }};
}

}  // namespace strata::apps
