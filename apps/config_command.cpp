// strata config show | reference: a config with every default filled in, and the
// reference of every key (docs/config.md), both from what the config readers read.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/config.h"
#include "apps/config_reference.h"

namespace strata::apps {

Command add_config_command(CLI::App& parent) {
  struct Opts {
    std::string config;
    std::vector<std::string> sets;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = parent.add_subcommand("config", "Show a resolved config, or the reference of every config key");
  cmd->require_subcommand(1);
  CLI::App* show = cmd->add_subcommand("show", "Print the config as the trainer reads it, every default filled in");
  show->add_option("-c,--config", o->config, "YAML config file")->required();
  show->add_option("--set", o->sets, "Override a config key: --set optim.lr=1e-3 (repeatable)")->type_name("KEY=VALUE");
  CLI::App* reference = cmd->add_subcommand("reference", "Print every config key with type, default and meaning "
                                                         "(markdown; docs/config.md)");
  return {cmd, [o, show, reference] {
            if (reference->parsed()) {
              std::printf("%s", config_reference_markdown().c_str());
              return 0;
            }
            if (!show->parsed()) return 2;
            const ConfigNode root = ConfigNode::load_file(o->config, o->sets);
            (void)TrainConfig::from_node(root);  // the same reads and checks as strata train
            std::printf("# %s resolved: every key the trainer reads, defaults filled in\n%s", o->config.c_str(),
                        root.dump_resolved().c_str());
            return 0;
          }};
}

}  // namespace strata::apps
