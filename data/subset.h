// Views of part of a dataset: a contiguous range (the held-out tail of an ordered
// stream) or a seeded random selection (a validation split carved from a training set,
// as torch.utils.data.random_split does). No sample data is copied.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <strata/data/dataset.h>

namespace strata::data {

/// Sample i of the subset is sample map(i) of `base`. Same batch layout as `base`.
/// Thread-safety: immutable; get_batch is as thread-safe as base's.
class SubsetDataset : public Dataset {
 public:
  /// Samples [offset, offset + count) of base (checked against base->size()).
  SubsetDataset(std::shared_ptr<const Dataset> base, int64_t offset, int64_t count);
  /// Samples indices[0], indices[1], ... of base (each checked against base->size()).
  SubsetDataset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices);

  int64_t size() const override { return count_; }
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  const Dataset& base() const { return *base_; }

 private:
  std::shared_ptr<const Dataset> base_;
  int64_t offset_ = 0, count_ = 0;
  std::vector<int64_t> indices_;  // empty: the range [offset_, offset_ + count_)
};

/// A training set and the validation samples carved from it.
struct TrainValSplit {
  std::shared_ptr<const Dataset> train;
  std::shared_ptr<const Dataset> val;
};

/// Number of validation samples for n samples: round(n * val_fraction), at least 1 when
/// val_fraction > 0. val_fraction must be in [0, 1).
int64_t val_count(int64_t n, double val_fraction);

/// Draws val_count(all->size(), val_fraction) samples of `all` at random (a permutation
/// fixed by `seed`, the same on every rank and run) as val; the rest, in their original
/// order, are train. val is null when val_fraction is 0. Throws strata::Error when
/// nothing would be left to train on.
TrainValSplit random_split(std::shared_ptr<const Dataset> all, double val_fraction, uint64_t seed);

}  // namespace strata::data
