// The shard arithmetic of ZeRO/FSDP as pure functions: where each parameter sits in a
// flat unit, how a unit is padded to a multiple of the world size and which slice of
// which parameter lands in each rank's shard. Tested alone (which parameters form a
// unit is zero_plan.h's business).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata::parallel {

/// A group of parameters flattened into one buffer of `padded()` elements: parameter
/// params[i] occupies elements [offsets[i], offsets[i] + numels[i]); the tail after
/// `numel` is zero padding so that every rank owns exactly `shard` elements (rank r:
/// elements [r*shard, (r+1)*shard)). Any parameter count works, divisible or not.
struct FlatUnit {
  std::string name;              ///< "h.0", "root", "bucket3": for logs and errors
  std::vector<int> params;       ///< indices into the model's parameter list, layout order
  std::vector<int64_t> offsets;  ///< per entry of params: first element in the unit
  std::vector<int64_t> numels;   ///< per entry of params: element count
  int64_t numel = 0;             ///< sum of numels
  int64_t shard = 0;             ///< ceil(numel / world): elements each rank owns
  int world = 1;
  int64_t padded() const { return shard * int64_t(world); }
};

/// Lays out `params` (indices) with element counts `numels` (same order) back to back.
FlatUnit make_flat_unit(std::string name, const std::vector<int>& params, const std::vector<int64_t>& numels,
                        int world);

/// Elements [param_begin, param_end) of the row-major flattened parameter `param` sit
/// at [shard_offset, shard_offset + (param_end - param_begin)) of one rank's shard.
struct ShardSlice {
  int param = 0;
  int64_t param_begin = 0;
  int64_t param_end = 0;
  int64_t shard_offset = 0;
  int64_t size() const { return param_end - param_begin; }
};

/// The parameter slices of `u` owned by `rank` (in layout order, non-empty ones only).
std::vector<ShardSlice> shard_slices(const FlatUnit& u, int rank);

}  // namespace strata::parallel
