// ZeRO's decisions as data and pure functions: what each stage shards (ZeroPolicy, the one
// place a stage number is interpreted) and which parameters form which flat unit, in
// which order the units are reduced (plan_zero_units). Tested alone, no model needed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <strata/core/dtype.h>
#include <strata/parallel/data/flat_shard.h>

namespace strata::parallel {

/// What one ZeRO stage shards over the data-parallel ranks. Built by for_stage(); the
/// runtime and the checkpoint code read these flags instead of comparing stage numbers.
struct ZeroPolicy {
  int stage = 1;
  bool shards_optimizer = true;  ///< optimizer state of this rank's slice only (every stage)
  bool shards_grads = false;     ///< stage >= 2: the full .grad lives only until its unit is reduce-scattered
  bool shards_params = false;    ///< stage 3: parameters gathered around each unit's forward/backward
  /// Units follow modules (the FSDP wrap policy, root first) rather than byte caps.
  bool units_by_module() const { return shards_params; }
  /// Stage 1 keeps full gradients in persistent flat buffers (.grad are views of them).
  bool persistent_flat_grads() const { return !shards_grads; }
  /// strata::Error unless stage is 1, 2 or 3.
  static ZeroPolicy for_stage(int stage);
};

/// One trainable parameter as the planner sees it (registration order).
struct ZeroPlanParam {
  std::string name;
  int64_t numel = 0;
  DType dtype = DType::f32;
};

/// Sizing of the units.
struct ZeroUnitSizing {
  int world = 1;                  ///< ranks each unit is padded for
  int64_t cap_bytes = 25 << 20;   ///< size-based units (stages 1-2): at most this many bytes
  int64_t first_cap_bytes = 1 << 20;  ///< the first unit backward completes (ready earliest); at most cap_bytes
  int64_t last_cap_bytes = 1 << 20;   ///< the last one (ready only when backward ends); at most cap_bytes
  /// Module-based units (stage 3): module paths, each a unit of the parameters whose
  /// names start with "<path>."; the rest form the root unit.
  std::vector<std::string> wrap;
};

/// The layout every rank derives identically.
struct ZeroUnitPlan {
  std::vector<FlatUnit> units;        ///< stage 3: root first, then `wrap` order; else backward order
  std::vector<std::string> modules;   ///< per unit: its wrapped module path ("" for root and size units)
  std::vector<DType> dtypes;          ///< per unit (f32 for an empty unit)
  std::vector<int> launch_order;      ///< units in the order backward completes them
  std::vector<int> unit_of;           ///< per parameter: its unit
  std::vector<int> entry_of;          ///< per parameter: its entry in that unit's layout
};

/// Groups parameters like DDP buckets, but never splits one: walking them backwards
/// (registration reversed, the order backward produces gradients), the first group
/// takes parameters while they fit in `first_cap` elements, the last group (the
/// first-registered parameters) while they fit in `last_cap`, and the middle is cut
/// greedily at `cap`. Every group holds at least one parameter (a parameter larger than
/// its cap forms a group alone). Groups are returned in backward order, each listing
/// parameter indices last-registered first. first_cap = last_cap = cap is plain greedy.
std::vector<std::vector<int>> group_params_by_cap(const std::vector<int64_t>& numels, int64_t cap,
                                                  int64_t first_cap, int64_t last_cap);
/// group_params_by_cap(numels, cap, cap, cap).
std::vector<std::vector<int>> group_params_by_cap(const std::vector<int64_t>& numels, int64_t cap_elems);

/// The units of `params` under `policy`: module units from sizing.wrap when
/// policy.units_by_module() (launch order: wrapped units last-first, root last), else
/// group_params_by_cap on element counts derived from the byte caps (launch order =
/// unit order). A unit holds one dtype: size units are split where it changes; a module
/// unit mixing dtypes is an Error naming both parameters. Pure; throws on bad sizes.
ZeroUnitPlan plan_zero_units(const std::vector<ZeroPlanParam>& params, const ZeroPolicy& policy,
                             const ZeroUnitSizing& sizing);

}  // namespace strata::parallel
