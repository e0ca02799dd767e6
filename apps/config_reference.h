// The documentation of every config key (type, default, meaning), kept beside the
// readers in apps/config.cpp and checked against what they read (ConfigNode::keys_read),
// so docs/config.md, which `strata config reference` prints, cannot drift from the schema.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include <strata/core/config.h>

namespace strata::apps {

/// One documented key. `type` and `default_text` are written for people, but
/// check_config_reads() holds them to the readers: `type` lists, separated by " or ", every
/// type a reader reads the key as ("list of integers (mlp) or integer (cnn)"), and
/// `default_text` lists, separated by "; ", every default a reader uses ("0 (sgd); 0.01
/// (adamw)"); a parenthesised note ending an alternative is ignored.
struct ConfigKeyDoc {
  const char* path;          ///< "optim.lr"
  const char* type;          ///< "number"
  const char* default_text;  ///< "0.001", or "required"
  const char* meaning;       ///< one or two sentences of markdown
};

/// Every documented key, grouped by section in the order the readers read them.
const std::vector<ConfigKeyDoc>& config_key_docs();

/// docs/config.md: one table per section (key, type, default, meaning).
std::string config_reference_markdown();

/// Compares keys that readers asked for (the union over several loaded configs) with
/// config_key_docs(). Returns one line per problem, naming the key and what to add or
/// change (empty when they agree):
///  - a key read but not documented, with its type and default ready to paste;
///  - a documented type or default that does not cover what the reader read;
///  - a value one_of() accepts for a key that the key's meaning does not name in code
///    style (`gpt`);
///  - with `all_read`, a documented key that no loaded config read.
std::vector<std::string> check_config_reads(const std::vector<ConfigKeyRead>& reads, bool all_read);

/// The values one_of() accepted for each key among `reads` (selector keys such as
/// model.type and data.dataset), for loading one config per value.
std::map<std::string, std::set<std::string>> choices_of(const std::vector<ConfigKeyRead>& reads);

}  // namespace strata::apps
