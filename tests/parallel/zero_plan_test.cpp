// ZeRO's pure planning (parallel/data/zero_plan.h) without a model: what each stage shards,
// which parameters form which unit with DDP-like sizing (small first and last units),
// padding per unit, dtype splits, FSDP module units and the order units are reduced in.
#include <strata/parallel/data/zero_plan.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include <strata/core/error.h>

namespace strata::parallel {
namespace {

TEST(ZeroPolicy, StagesAreData) {
  const ZeroPolicy s1 = ZeroPolicy::for_stage(1), s2 = ZeroPolicy::for_stage(2), s3 = ZeroPolicy::for_stage(3);
  EXPECT_TRUE(s1.shards_optimizer && s2.shards_optimizer && s3.shards_optimizer);
  EXPECT_FALSE(s1.shards_grads);
  EXPECT_TRUE(s2.shards_grads && s3.shards_grads);
  EXPECT_FALSE(s1.shards_params || s2.shards_params);
  EXPECT_TRUE(s3.shards_params);
  EXPECT_TRUE(s1.persistent_flat_grads());
  EXPECT_FALSE(s2.persistent_flat_grads());
  EXPECT_TRUE(s3.units_by_module());
  EXPECT_FALSE(s2.units_by_module());
  EXPECT_THROW(ZeroPolicy::for_stage(0), Error);
  EXPECT_THROW(ZeroPolicy::for_stage(4), Error);
}

TEST(ZeroPlan, FirstAndLastGroupsAreSmall) {
  // Backward order: 7, 6, ..., 0. First cap 10 takes 7 and 6 (4 + 5); last cap 8 takes 0 and 1
  // (3 + 5 = 8); the middle (5, 4, 3, 2 = 20, 20, 2, 30) is cut greedily at 25.
  const std::vector<int64_t> numels = {3, 5, 30, 2, 20, 20, 5, 4};
  const auto g = group_params_by_cap(numels, 25, 10, 8);
  ASSERT_EQ(g.size(), 5u);
  EXPECT_EQ(g[0], (std::vector<int>{7, 6}));
  EXPECT_EQ(g[1], (std::vector<int>{5}));
  EXPECT_EQ(g[2], (std::vector<int>{4, 3}));
  EXPECT_EQ(g[3], (std::vector<int>{2}));  // larger than the cap: alone
  EXPECT_EQ(g[4], (std::vector<int>{1, 0}));
  // Every parameter exactly once.
  std::vector<int> all;
  for (const auto& x : g) all.insert(all.end(), x.begin(), x.end());
  std::sort(all.begin(), all.end());
  std::vector<int> want(numels.size());
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(all, want);
}

TEST(ZeroPlan, GroupsByCapEdgeCases) {
  EXPECT_TRUE(group_params_by_cap({}, 4, 2, 2).empty());
  EXPECT_EQ(group_params_by_cap({9}, 4, 2, 2), (std::vector<std::vector<int>>{{0}}));  // too big: alone
  // Everything fits in the first group: no last group.
  EXPECT_EQ(group_params_by_cap({1, 1, 1}, 10, 10, 10), (std::vector<std::vector<int>>{{2, 1, 0}}));
  EXPECT_THROW(group_params_by_cap({1}, 0), Error);
  EXPECT_THROW(group_params_by_cap({1}, 4, 0, 4), Error);
}

std::vector<ZeroPlanParam> params_of(const std::vector<int64_t>& numels, DType dt = DType::f32) {
  std::vector<ZeroPlanParam> out;
  for (size_t i = 0; i < numels.size(); ++i) {
    std::string name = std::to_string(i);  // "p" + to_string(i) trips GCC 12's -Wrestrict false positive
    name.insert(name.begin(), 'p');
    out.push_back({name, numels[i], dt});
  }
  return out;
}

TEST(ZeroPlan, SizeUnitsPaddedPerUnitInBackwardOrder) {
  // f32: caps in bytes = 4 x elements. first 40 B = 10 elements, last 32 B = 8, cap 100 B = 25.
  const auto params = params_of({3, 5, 30, 2, 20, 20, 5, 4});
  const ZeroUnitSizing sz{.world = 3, .cap_bytes = 100, .first_cap_bytes = 40, .last_cap_bytes = 32, .wrap = {}};
  const ZeroUnitPlan p = plan_zero_units(params, ZeroPolicy::for_stage(2), sz);
  ASSERT_EQ(p.units.size(), 5u);
  EXPECT_EQ(p.units[0].params, (std::vector<int>{7, 6}));
  EXPECT_EQ(p.units[0].numel, 9);
  EXPECT_EQ(p.units[0].shard, 3);  // 9 / 3
  EXPECT_EQ(p.units[2].params, (std::vector<int>{4, 3}));
  EXPECT_EQ(p.units[2].offsets, (std::vector<int64_t>{0, 20}));
  EXPECT_EQ(p.units[2].shard, 8);  // 22 -> padded to 24
  EXPECT_EQ(p.units[4].params, (std::vector<int>{1, 0}));
  for (size_t k = 0; k < p.units.size(); ++k) {
    EXPECT_EQ(p.units[k].name, "bucket" + std::to_string(k));
    EXPECT_TRUE(p.modules[k].empty());
    EXPECT_LT(p.units[k].padded() - p.units[k].numel, 3);
  }
  EXPECT_EQ(p.launch_order, (std::vector<int>{0, 1, 2, 3, 4}));
  for (size_t i = 0; i < params.size(); ++i) {
    const FlatUnit& u = p.units[size_t(p.unit_of[i])];
    EXPECT_EQ(u.params[size_t(p.entry_of[i])], int(i));
  }
}

TEST(ZeroPlan, FirstAndLastCapsNeverExceedTheCap) {
  // A 25 MiB first cap with a 40-byte unit cap: the first unit is at most 10 elements.
  const auto params = params_of({6, 6, 6, 6});
  const ZeroUnitSizing sz{.world = 2, .cap_bytes = 40, .first_cap_bytes = 25 << 20, .last_cap_bytes = 25 << 20, .wrap = {}};
  const ZeroUnitPlan p = plan_zero_units(params, ZeroPolicy::for_stage(1), sz);
  ASSERT_EQ(p.units.size(), 4u);
  for (const auto& u : p.units) EXPECT_EQ(u.numel, 6);
}

TEST(ZeroPlan, SizeUnitsSplitWhereTheDtypeChanges) {
  auto params = params_of({4, 4, 4});
  params[1].dtype = DType::f64;
  const ZeroUnitSizing sz{.world = 2, .cap_bytes = 1 << 20, .first_cap_bytes = 1 << 20, .last_cap_bytes = 1 << 20, .wrap = {}};
  const ZeroUnitPlan p = plan_zero_units(params, ZeroPolicy::for_stage(2), sz);
  ASSERT_EQ(p.units.size(), 3u);
  EXPECT_EQ(p.units[1].params, (std::vector<int>{1}));
  EXPECT_EQ(p.dtypes[1], DType::f64);
  EXPECT_EQ(p.dtypes[0], DType::f32);
}

TEST(ZeroPlan, ModuleUnitsRootFirstReducedLast) {
  const std::vector<ZeroPlanParam> params = {{"wte.weight", 64, DType::f32},  {"h.0.w", 10, DType::f32},
                                             {"h.0.b", 3, DType::f32},        {"h.1.w", 10, DType::f32},
                                             {"h.10.w", 7, DType::f32},       {"ln_f.weight", 8, DType::f32}};
  const ZeroUnitSizing sz{.world = 4, .cap_bytes = 4, .first_cap_bytes = 4, .last_cap_bytes = 4,
                          .wrap = {"h.0", "h.1", "h.10"}};
  const ZeroUnitPlan p = plan_zero_units(params, ZeroPolicy::for_stage(3), sz);
  ASSERT_EQ(p.units.size(), 4u);
  EXPECT_EQ(p.units[0].name, "root");
  EXPECT_EQ(p.units[0].params, (std::vector<int>{0, 5}));
  EXPECT_EQ(p.units[0].shard, 18);  // 72 / 4
  EXPECT_EQ(p.units[1].params, (std::vector<int>{1, 2}));
  EXPECT_EQ(p.units[2].params, (std::vector<int>{3}));  // "h.1." is not a prefix of "h.10.w"
  EXPECT_EQ(p.units[3].params, (std::vector<int>{4}));
  EXPECT_EQ(p.modules, (std::vector<std::string>{"", "h.0", "h.1", "h.10"}));
  EXPECT_EQ(p.launch_order, (std::vector<int>{3, 2, 1, 0}));  // backward: last block first, root last
}

TEST(ZeroPlan, ModuleUnitMixingDtypesNamesBoth) {
  std::vector<ZeroPlanParam> params = {{"h.0.w", 4, DType::f32}, {"h.0.b", 4, DType::f64}};
  const ZeroUnitSizing sz{.world = 2, .cap_bytes = 4, .first_cap_bytes = 4, .last_cap_bytes = 4, .wrap = {"h.0"}};
  try {
    plan_zero_units(params, ZeroPolicy::for_stage(3), sz);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("h.0.b"), std::string::npos) << m;
    EXPECT_NE(m.find("h.0.w"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace strata::parallel
