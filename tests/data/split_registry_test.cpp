// The seeded validation split (disjoint, complete, reproducible, seed-dependent) and
// the dataset registry's rules (names, duplicates, built-ins).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <strata/data/registry.h>
#include <strata/data/subset.h>
#include <strata/data/synthetic.h>
#include "test_util.h"

using namespace strata;
using namespace strata::data;

namespace {

/// Which base samples a subset covers: SyntheticClassification's input is a pure
/// function of the index, so each sample's first value identifies it.
std::vector<float> firsts(const Dataset& ds) {
  std::vector<int64_t> all(size_t(ds.size()));
  for (size_t i = 0; i < all.size(); ++i) all[i] = int64_t(i);
  const Batch b = ds.get_batch(all);
  std::vector<float> out;
  for (int64_t i = 0; i < ds.size(); ++i) out.push_back(b.input.data<float>()[i * 4]);
  return out;
}

std::shared_ptr<const Dataset> base(int64_t n) {
  return std::make_shared<SyntheticClassification>(
      SyntheticClassificationOptions{.size = n, .sample_shape = {4}, .num_classes = 3, .seed = 1});
}

}  // namespace

TEST(Split, RandomSplitIsDisjointCompleteAndSeeded) {
  auto all = base(100);
  const auto s = random_split(all, 0.2, 5);
  ASSERT_EQ(s.train->size(), 80);
  ASSERT_EQ(s.val->size(), 20);
  const auto tr = firsts(*s.train), va = firsts(*s.val), everything = firsts(*all);
  std::multiset<float> uni(tr.begin(), tr.end());
  uni.insert(va.begin(), va.end());
  EXPECT_EQ(uni, std::multiset<float>(everything.begin(), everything.end()));
  // Val is not the tail: a seeded random draw, the same for the same seed only.
  EXPECT_NE(va, std::vector<float>(everything.end() - 20, everything.end()));
  EXPECT_EQ(firsts(*random_split(all, 0.2, 5).val), va);
  EXPECT_NE(firsts(*random_split(all, 0.2, 6).val), va);
  // 0 carves nothing; a fraction that leaves nothing is refused.
  EXPECT_EQ(random_split(all, 0.0, 5).val, nullptr);
  EXPECT_EQ(val_count(100, 0.001), 1);
  EXPECT_THROW(random_split(base(2), 0.9, 0), Error);
  EXPECT_THROW(val_count(10, 1.0), Error);
}

TEST(Split, SubsetRangeAndIndexList) {
  auto all = base(10);
  const auto everything = firsts(*all);
  SubsetDataset range(all, 3, 4), list(all, std::vector<int64_t>{9, 0, 9});
  EXPECT_EQ(firsts(range), std::vector<float>(everything.begin() + 3, everything.begin() + 7));
  EXPECT_EQ(firsts(list), (std::vector<float>{everything[9], everything[0], everything[9]}));
  EXPECT_THROW(range.get_batch({4}), Error);
  EXPECT_THROW(SubsetDataset(all, 8, 3), Error);
  EXPECT_THROW(SubsetDataset(all, std::vector<int64_t>{10}), Error);
}

TEST(Registry, RegisterFindAndRules) {
  const DatasetFactory f = [](const DatasetRequest& r) {
    return DatasetSplits{.train = base(r.options.get<int64_t>("n", 8))};
  };
  register_dataset("split_registry_test.tiny", f);
  const DatasetFactory* got = find_dataset("split_registry_test.tiny");
  ASSERT_NE(got, nullptr);
  const ConfigNode opts = ConfigNode::load_string("n: 12").child("unused");  // absent mapping: defaults
  EXPECT_EQ((*got)({.name = "x", .options = opts}).train->size(), 8);
  const ConfigNode root = ConfigNode::load_string("n: 12");
  EXPECT_EQ((*got)({.name = "x", .options = root}).train->size(), 12);
  EXPECT_EQ(find_dataset("split_registry_test.other"), nullptr);
  const auto names = registered_datasets();
  EXPECT_NE(std::find(names.begin(), names.end(), "split_registry_test.tiny"), names.end());
  EXPECT_THROW(register_dataset("split_registry_test.tiny", f), Error);  // duplicate
  EXPECT_THROW(register_dataset("text", f), Error);                      // built-in
  EXPECT_THROW(register_dataset("npy", f), Error);
  EXPECT_THROW(register_dataset("", f), Error);
  EXPECT_THROW(register_dataset("has space", f), Error);
  EXPECT_THROW(register_dataset("split_registry_test.empty", DatasetFactory{}), Error);
}
