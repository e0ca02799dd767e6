// "module." prefix handling for wrapped-model checkpoints (see state_dict_keys.h).
#include <strata/parallel/checkpoint/state_dict_keys.h>

#include <set>

#include <strata/parallel/data/data_parallel.h>

namespace strata::parallel {
namespace {

std::set<std::string> keys_of(const nn::NamedTensors& sd) {
  std::set<std::string> k;
  for (const auto& [name, t] : sd) k.insert(name);
  return k;
}

bool all_prefixed(const nn::NamedTensors& sd, const std::string& prefix) {
  if (sd.empty()) return false;
  for (const auto& [name, t] : sd)
    if (name.rfind(prefix, 0) != 0) return false;
  return true;
}

}  // namespace

nn::NamedTensors add_prefix(const nn::NamedTensors& sd, const std::string& prefix) {
  nn::NamedTensors out;
  out.reserve(sd.size());
  for (const auto& [name, t] : sd) out.emplace_back(prefix + name, t);
  return out;
}

nn::NamedTensors strip_prefix(const nn::NamedTensors& sd, const std::string& prefix) {
  nn::NamedTensors out;
  out.reserve(sd.size());
  for (const auto& [name, t] : sd) {
    if (name.rfind(prefix, 0) != 0)
      STRATA_THROW(DataError, "[state_dict] key '", name, "' does not start with '", prefix,
                   "'; it is not from a wrapped model");
    out.emplace_back(name.substr(prefix.size()), t);
  }
  return out;
}

nn::Module& unwrap(nn::Module& m) {
  nn::Module* cur = &m;
  while (auto* dp = dynamic_cast<DataParallel*>(cur)) cur = &dp->module();
  return *cur;
}

int load_state_dict_any(nn::Module& target, const nn::NamedTensors& sd) {
  const std::set<std::string> want = keys_of(target.state_dict());
  constexpr int kMaxDepth = 4;
  if (keys_of(sd) != want) {
    nn::NamedTensors cur = sd;
    for (int d = 1; d <= kMaxDepth && all_prefixed(cur, kWrapPrefix); ++d) {
      cur = strip_prefix(cur);
      if (keys_of(cur) == want) {
        target.load_state_dict(cur);
        return d;
      }
    }
    cur = sd;
    for (int d = 1; d <= kMaxDepth && !sd.empty(); ++d) {
      cur = add_prefix(cur);
      if (keys_of(cur) == want) {
        target.load_state_dict(cur);
        return -d;
      }
    }
  }
  target.load_state_dict(sd);
  return 0;
}

}  // namespace strata::parallel
