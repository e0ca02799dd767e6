// Reading YAML configs into plain structs with errors that name the key path and line:
// "train.lr: expected a number, got 'abc' (line 12)". Every key that exists in the file
// must have been asked for, so a typo ("lerning_rate") fails loudly with a suggestion
// instead of silently falling back to a default.
#pragma once
#include <yaml-cpp/yaml.h>

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <strata/core/error.h>

namespace strata {

/// Throws ConfigError "<path>: <msg>" (with " (line N)" when line > 0).
[[noreturn]] void config_fail(const std::string& path, const std::string& msg, int line = 0);

/// Applies one "key.path=value" override to `root` (value parsed as YAML, so "[1, 2]",
/// "1e-3" and "true" keep their types). Missing intermediate maps are created.
/// Throws ConfigError on a malformed override or when a prefix is not a mapping.
void apply_config_override(YAML::Node& root, const std::string& assignment);

/// Levenshtein distance (for "did you mean" suggestions).
size_t edit_distance(const std::string& a, const std::string& b);

/// One key a reader asked for through ConfigNode::get/require (see ConfigNode::keys_read):
/// what the schema accepts, recorded as it is read, so that documentation and
/// `strata config show` come from the readers themselves.
struct ConfigKeyRead {
  std::string path;  ///< full key path, "optim.lr"
  std::string type;  ///< "boolean", "integer", "number", "string", "list of integers", ...
  std::optional<std::string> default_text;  ///< the reader's default as YAML text; nullopt: required
  YAML::Node value;  ///< the value the reader got (the default when absent), a scalar or flow list
  bool given = false;  ///< present in the file or a --set
  std::vector<std::string> choices;  ///< the values one_of() allowed, when it checked this key
};

/// A view of one mapping in a config tree: its key path ("train.optim"), its YAML node
/// and the shared record of which keys have been asked for. Cheap to copy. Reading
/// is not thread-safe (configs are read once at startup).
class ConfigNode {
 public:
  /// Parses `yaml_path`, applies `overrides` ("a.b=v") in order. File/parse errors throw
  /// ConfigError naming the file (and line). Only a regular file of at most 16 MiB is
  /// read (a directory, FIFO or device is refused before it is opened).
  static ConfigNode load_file(const std::string& yaml_path, const std::vector<std::string>& overrides = {});
  /// Same from YAML text; `source` names it in errors. Refused with ConfigError naming
  /// the key path: duplicate keys in a mapping, non-scalar keys, a second YAML document,
  /// nesting over 32 levels and trees over 100k values after alias expansion.
  static ConfigNode load_string(const std::string& text, const std::vector<std::string>& overrides = {},
                                const std::string& source = "<string>");

  /// The root/sub-tree node (after overrides).
  const YAML::Node& yaml() const { return node_; }
  /// Dotted path of this node ("" for the root).
  const std::string& path() const { return path_; }
  /// Path of `key` under this node ("train" + "lr" -> "train.lr").
  std::string key_path(const std::string& key) const;
  /// 1-based source line of this node's value, 0 if unknown (e.g. set by --set).
  int line() const;
  /// 1-based line of `key`'s value (0 if absent or unknown).
  int line_of(const std::string& key) const;

  /// True when `key` is present and not null. Marks the key as known.
  bool has(const std::string& key) const;
  /// Value of `key`, or `def` when absent/null. Wrong type -> ConfigError.
  /// T: bool, int, int64_t, uint64_t, float, double, std::string, std::vector<int|int64_t|double|std::string>.
  template <class T>
  T get(const std::string& key, const T& def) const;
  /// Value of `key`; ConfigError "<path>: required key is missing" when absent.
  template <class T>
  T require(const std::string& key) const;
  /// A file path read from `key`: `value` itself when it is absolute, exists relative to
  /// the working directory, or was given by --set; otherwise, when the config came from a
  /// file and the path exists relative to that file's directory, that path (a config
  /// names files shipped beside it). `value` unchanged when neither exists.
  std::string resolve_path(const std::string& key, const std::string& value) const;
  /// Sub-mapping `key`; an absent key gives an empty node whose get() returns defaults.
  /// A present non-mapping value -> ConfigError.
  ConfigNode child(const std::string& key) const;

  /// ConfigError unless lo <= value <= hi (lo_open/hi_open make the bound strict).
  void check_range(const std::string& key, double value, double lo, double hi, bool lo_open = false,
                   bool hi_open = false) const;
  /// ConfigError "<path>: expected one of a|b|c, got 'x'" unless value is allowed.
  void one_of(const std::string& key, const std::string& value, std::initializer_list<const char*> allowed) const;
  /// Throws ConfigError naming `key`'s path and line.
  [[noreturn]] void fail(const std::string& key, const std::string& msg) const;

  /// Walks the whole tree from this node: every mapping key must have been asked for
  /// (has/get/require/child). The first unknown key throws ConfigError with its path,
  /// line and the closest known key at that level.
  void check_unknown_keys() const;

  /// The effective tree (after overrides) as YAML text, for echoing into checkpoints.
  std::string dump() const;

  /// Records `key` for keys_read() as read with `type`, `default_text` and the resolved
  /// `value` (replacing what get() recorded), for a key its reader parses beyond get():
  /// parallel.dp is "integer or auto", resolved to auto when absent; a null `value` says
  /// "absent means unset" and survives dump_resolved() as `~`.
  void note_read(const std::string& key, const std::string& type, const std::string& default_text,
                 const YAML::Node& value) const;
  /// Every key of this tree that get/require asked for so far, in first-read order
  /// (has() alone and child() mappings are not listed; a key read twice keeps its first
  /// read). Shared by all views of one loaded tree.
  std::vector<ConfigKeyRead> keys_read() const;
  /// The resolved config as YAML: every key of keys_read() with the value its reader
  /// used (defaults included), plus keys that were only tested with has() and are present.
  std::string dump_resolved() const;

 private:
  struct Shared;
  ConfigNode(YAML::Node node, std::string path, std::shared_ptr<Shared> shared);
  YAML::Node lookup(const std::string& key) const;  // marks key as asked
  // ConfigError at `full` (a key path), citing the --set that set it or its line.
  [[noreturn]] void fail_path(const std::string& full, const std::string& msg, int line) const;
  // Throws "unknown key; did you mean" when a missing required `key` (or the section
  // holding it) is absent because the file misspells it; returns otherwise.
  void fail_if_misspelt(const std::string& key) const;
  void check_unknown(const YAML::Node& node, const std::string& path) const;
  [[noreturn]] void type_fail(const std::string& key, const YAML::Node& v, const char* expected) const;
  // get() without adding to keys_read() (require() records its own kind of read).
  template <class T>
  T get_unrecorded(const std::string& key, const T& def) const;
  // Adds `key` to the shared record of keys_read() unless it is there already.
  void record(const std::string& key, const char* type, std::optional<std::string> def, YAML::Node value,
              bool given) const;

  YAML::Node node_;
  std::string path_;
  std::shared_ptr<Shared> shared_;
};

}  // namespace strata
