// Samplers: permutations, determinism per (seed, epoch), and DistributedSampler
// against a direct transcription of torch.utils.data.DistributedSampler.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include <strata/core/error.h>
#include <strata/data/sampler.h>

using namespace strata;
using namespace strata::data;

namespace {

std::vector<int64_t> iota_vec(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t(0));
  return v;
}

/// PyTorch's DistributedSampler.__iter__, written as it reads in Python.
std::vector<int64_t> torch_reference(std::vector<int64_t> indices, int64_t r, int64_t rank, bool drop_last) {
  const int64_t n = int64_t(indices.size());
  int64_t num_samples;
  if (drop_last && n % r != 0) {
    num_samples = (n - r + r - 1) / r;  // ceil((n - r) / r)
    if (n < r) num_samples = 0;
  } else {
    num_samples = (n + r - 1) / r;
  }
  const int64_t total = num_samples * r;
  if (!drop_last) {
    const int64_t padding = total - n;
    if (padding <= n) {
      indices.insert(indices.end(), indices.begin(), indices.begin() + padding);
    } else {
      std::vector<int64_t> rep;
      for (int64_t k = 0; k < (padding + n - 1) / n; ++k) rep.insert(rep.end(), indices.begin(), indices.end());
      indices.insert(indices.end(), rep.begin(), rep.begin() + padding);
    }
  } else {
    indices.resize(size_t(total));
  }
  std::vector<int64_t> out;
  for (int64_t q = rank; q < total; q += r) out.push_back(indices[size_t(q)]);
  return out;
}

}  // namespace

TEST(Sampler, Sequential) {
  SequentialSampler s(5);
  EXPECT_EQ(s.size(), 5);
  EXPECT_EQ(s.indices_for_epoch(3), iota_vec(5));
  EXPECT_TRUE(SequentialSampler(0).indices().empty());
}

TEST(Sampler, RandomIsAPermutationDeterministicPerSeedAndEpoch) {
  RandomSampler s(1000, 42);
  auto e0 = s.indices_for_epoch(0), e1 = s.indices_for_epoch(1);
  auto sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota_vec(1000));
  sorted = e1;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota_vec(1000));
  EXPECT_NE(e0, iota_vec(1000));
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, RandomSampler(1000, 42).indices_for_epoch(0));
  EXPECT_NE(e0, RandomSampler(1000, 43).indices_for_epoch(0));
  s.set_epoch(1);
  EXPECT_EQ(s.indices(), e1);
  EXPECT_TRUE(RandomSampler(0, 1).indices().empty());
  EXPECT_EQ(RandomSampler(1, 1).indices(), (std::vector<int64_t>{0}));
}

TEST(Sampler, RandomPermutationIsUniform) {
  // All 6 orders of 3 items over 6000 epochs: each expected 1000 times (sd ~ 29).
  std::map<std::vector<int64_t>, int> seen;
  for (int e = 0; e < 6000; ++e) ++seen[random_permutation(3, 7, uint64_t(e))];
  ASSERT_EQ(seen.size(), 6u);
  for (const auto& [perm, count] : seen) {
    EXPECT_GT(count, 850);
    EXPECT_LT(count, 1150);
  }
  // Position of item 0 in a permutation of 10 is uniform.
  std::vector<int> pos(10, 0);
  for (int e = 0; e < 5000; ++e) {
    auto p = random_permutation(10, 99, uint64_t(e));
    ++pos[size_t(std::find(p.begin(), p.end(), 0) - p.begin())];
  }
  for (int c : pos) {
    EXPECT_GT(c, 380);
    EXPECT_LT(c, 620);
  }
}

TEST(Sampler, DistributedMatchesTorchSemantics) {
  for (int64_t n : {0, 1, 2, 5, 10, 11, 12, 13}) {
    for (int64_t r : {1, 2, 3, 4}) {
      for (bool shuffle : {false, true}) {
        for (bool drop_last : {false, true}) {
          const auto global = shuffle ? RandomSampler(n, 5).indices_for_epoch(2) : iota_vec(n);
          std::multiset<int64_t> all;
          int64_t count = -1;
          for (int64_t rank = 0; rank < r; ++rank) {
            DistributedSampler s(n, {.num_replicas = r, .rank = rank, .seed = 5, .shuffle = shuffle,
                                     .drop_last = drop_last});
            const auto got = s.indices_for_epoch(2);
            const std::string ctx = "n=" + std::to_string(n) + " r=" + std::to_string(r) + " rank=" +
                                    std::to_string(rank) + " shuffle=" + std::to_string(shuffle) +
                                    " drop_last=" + std::to_string(drop_last);
            EXPECT_EQ(got, torch_reference(global, r, rank, drop_last)) << ctx;
            EXPECT_EQ(int64_t(got.size()), s.size()) << ctx;
            if (count < 0) count = s.size();
            EXPECT_EQ(s.size(), count) << ctx << ": every rank gets the same count";
            all.insert(got.begin(), got.end());
          }
          if (drop_last) {
            EXPECT_EQ(int64_t(all.size()), (n / r) * r);
            EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), all.size()) << "no repeats with drop_last";
          } else {
            EXPECT_EQ(int64_t(all.size()), (n + r - 1) / r * r);
            for (int64_t i = 0; i < n; ++i) EXPECT_GE(all.count(i), 1u) << "index " << i << " n=" << n << " r=" << r;
          }
        }
      }
    }
  }
}

TEST(Sampler, DistributedPaddingWrapsAndEpochReshuffles) {
  // n=10 over 4 ranks: padded to 12 with the first two of the order.
  const auto order = iota_vec(10);
  DistributedSampler r0(10, {.num_replicas = 4, .rank = 0, .shuffle = false});
  DistributedSampler r1(10, {.num_replicas = 4, .rank = 1, .shuffle = false});
  DistributedSampler r2(10, {.num_replicas = 4, .rank = 2, .shuffle = false});
  EXPECT_EQ(r0.indices(), (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(r1.indices(), (std::vector<int64_t>{1, 5, 9}));
  EXPECT_EQ(r2.indices(), (std::vector<int64_t>{2, 6, 0}));
  EXPECT_EQ(r2.total_size(), 12);
  DistributedSampler d2(10, {.num_replicas = 4, .rank = 2, .shuffle = false, .drop_last = true});
  EXPECT_EQ(d2.indices(), (std::vector<int64_t>{2, 6}));
  // 2 items over 5 ranks: the order repeats to fill 5 slots.
  DistributedSampler tiny(2, {.num_replicas = 5, .rank = 4, .shuffle = false});
  EXPECT_EQ(tiny.indices(), (std::vector<int64_t>{0}));

  DistributedSampler s(100, {.num_replicas = 3, .rank = 1, .seed = 9});
  auto a = s.indices();
  s.set_epoch(1);
  EXPECT_NE(s.indices(), a);
  s.set_epoch(0);
  EXPECT_EQ(s.indices(), a);
  EXPECT_THROW(DistributedSampler(10, {.num_replicas = 2, .rank = 2}), Error);
}
