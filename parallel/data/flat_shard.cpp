// Shard arithmetic for ZeRO/FSDP flat units (see flat_shard.h).
#include <strata/parallel/data/flat_shard.h>

#include <algorithm>

#include <strata/core/error.h>

namespace strata::parallel {

FlatUnit make_flat_unit(std::string name, const std::vector<int>& params, const std::vector<int64_t>& numels,
                        int world) {
  STRATA_CHECK(world >= 1, "[flat_unit] world size must be >= 1, got ", world);
  STRATA_CHECK(params.size() == numels.size(), "[flat_unit] ", params.size(), " parameters but ", numels.size(),
               " element counts");
  FlatUnit u;
  u.name = std::move(name);
  u.params = params;
  u.numels = numels;
  u.world = world;
  for (int64_t n : numels) {
    STRATA_CHECK(n >= 0, "[flat_unit] negative element count ", n, " in unit '", u.name, "'");
    u.offsets.push_back(u.numel);
    u.numel += n;
  }
  u.shard = (u.numel + world - 1) / world;
  return u;
}

std::vector<ShardSlice> shard_slices(const FlatUnit& u, int rank) {
  STRATA_CHECK(rank >= 0 && rank < u.world, "[flat_unit] rank ", rank, " outside world of ", u.world);
  const int64_t lo = int64_t(rank) * u.shard, hi = lo + u.shard;
  std::vector<ShardSlice> out;
  for (size_t i = 0; i < u.params.size(); ++i) {
    const int64_t b = std::max(lo, u.offsets[i]), e = std::min(hi, u.offsets[i] + u.numels[i]);
    if (b < e) out.push_back({u.params[i], b - u.offsets[i], e - u.offsets[i], b - lo});
  }
  return out;
}

}  // namespace strata::parallel
