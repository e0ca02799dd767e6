// Fuzz entry points for the config loader. config(): YAML parsing, the tree checks
// (duplicates, depth, alias bombs) and every typed read, child(), require() with its
// misspelling hint, the unknown-key check and dump(), on whatever keys the input has
// (core only, so the libFuzzer binary stays small).
#include <string>
#include <vector>

#include <strata/core/config.h>
#include "fuzz_targets.h"

namespace strata::fuzz {
namespace {

template <class T>
void try_get(const ConfigNode& n, const std::string& key) {
  try {
    (void)n.get<T>(key, T{});
  } catch (const ConfigError&) {
  }
}

// Reads every key of `n` as every supported type and recurses into sub-mappings, for at
// most `budget` keys in all: load_string admits up to 100k values (aliases expanded),
// and a dozen failing reads of each would make one input take seconds.
void read_all(const ConfigNode& n, int& budget) {
  if (!n.yaml().IsMap()) return;
  std::vector<std::string> keys;
  for (auto it = n.yaml().begin(); it != n.yaml().end(); ++it) keys.push_back(it->first.Scalar());
  for (const auto& k : keys) {
    if (--budget < 0) return;
    try_get<bool>(n, k);
    try_get<int>(n, k);
    try_get<int64_t>(n, k);
    try_get<uint64_t>(n, k);
    try_get<float>(n, k);
    try_get<double>(n, k);
    try_get<std::string>(n, k);
    try_get<std::vector<int>>(n, k);
    try_get<std::vector<int64_t>>(n, k);
    try_get<std::vector<double>>(n, k);
    try_get<std::vector<std::string>>(n, k);
    try {
      n.check_range(k, n.get<double>(k, 0.0), 0.0, 1.0);
    } catch (const ConfigError&) {
    }
    try {
      read_all(n.child(k), budget);
    } catch (const ConfigError&) {
    }
  }
  try {
    (void)n.require<double>("lr");  // absent in most inputs: the misspelling hint walks the tree
  } catch (const ConfigError&) {
  }
}

}  // namespace

int config(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const ConfigNode root = ConfigNode::load_string(text, {}, "fuzz.yaml");
    int budget = 500;
    read_all(root, budget);
    root.check_unknown_keys();
    (void)root.dump();
  } catch (const ConfigError&) {
  }
  return 0;
}

}  // namespace strata::fuzz
