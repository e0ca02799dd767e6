// The process-wide dataset registry: a name -> factory map behind a mutex. Entries are
// never removed, so a returned factory pointer stays valid for the process's lifetime.
#include <strata/data/registry.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <mutex>

#include <strata/core/error.h>

namespace strata::data {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<DatasetFactory>> factories;
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

const std::vector<std::string>& builtin_dataset_names() {
  static const std::vector<std::string> names = {"fashion_mnist", "text", "synthetic", "tokens", "idx", "npy"};
  return names;
}

bool is_builtin_dataset(const std::string& name) {
  const auto& b = builtin_dataset_names();
  return std::find(b.begin(), b.end(), name) != b.end();
}

void register_dataset(const std::string& name, DatasetFactory factory) {
  STRATA_CHECK(!name.empty(), "[register_dataset] the name must not be empty");
  for (char c : name)
    STRATA_CHECK(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.',
                 "[register_dataset] '", name, "': use letters, digits, '_', '-' and '.' only");
  STRATA_CHECK(!is_builtin_dataset(name), "[register_dataset] '", name, "' is a built-in dataset; pick another name");
  STRATA_CHECK(bool(factory), "[register_dataset] '", name, "': the factory is empty");
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  STRATA_CHECK(!r.factories.count(name), "[register_dataset] '", name, "' is already registered");
  r.factories.emplace(name, std::make_unique<DatasetFactory>(std::move(factory)));
}

const DatasetFactory* find_dataset(const std::string& name) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  const auto it = r.factories.find(name);
  return it == r.factories.end() ? nullptr : it->second.get();
}

std::vector<std::string> registered_datasets() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<std::string> out;
  for (const auto& [name, f] : r.factories) out.push_back(name);
  return out;
}

}  // namespace strata::data
