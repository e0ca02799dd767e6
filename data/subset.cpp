// Index remapping for SubsetDataset and the seeded validation split.
#include <strata/data/subset.h>

#include <algorithm>
#include <cmath>

#include <strata/core/error.h>
#include <strata/data/sampler.h>

namespace strata::data {
namespace {
constexpr uint64_t kSplitStream = 0x76616C73706C6974ull;  // "valsplit": not an epoch of any sampler
}  // namespace

SubsetDataset::SubsetDataset(std::shared_ptr<const Dataset> base, int64_t offset, int64_t count)
    : base_(std::move(base)), offset_(offset), count_(count) {
  STRATA_CHECK(offset >= 0 && count >= 0 && offset + count <= base_->size(), "[subset] range [", offset, ", ",
               offset + count, ") is not inside a dataset of ", base_->size(), " samples");
}

SubsetDataset::SubsetDataset(std::shared_ptr<const Dataset> base, std::vector<int64_t> indices)
    : base_(std::move(base)), count_(int64_t(indices.size())), indices_(std::move(indices)) {
  detail::check_indices("subset", indices_, base_->size());
}

Batch SubsetDataset::get_batch(const std::vector<int64_t>& indices) const {
  detail::check_indices("subset", indices, count_);
  std::vector<int64_t> mapped(indices.size());
  for (size_t i = 0; i < indices.size(); ++i)
    mapped[i] = indices_.empty() ? indices[i] + offset_ : indices_[size_t(indices[i])];
  return base_->get_batch(mapped);
}

int64_t val_count(int64_t n, double val_fraction) {
  STRATA_CHECK(val_fraction >= 0.0 && val_fraction < 1.0, "[split] val_fraction must be in [0, 1), got ",
               val_fraction);
  if (val_fraction == 0.0) return 0;
  return std::max<int64_t>(1, std::llround(double(n) * val_fraction));
}

TrainValSplit random_split(std::shared_ptr<const Dataset> all, double val_fraction, uint64_t seed) {
  const int64_t n = all->size(), n_val = val_count(n, val_fraction);
  if (n_val == 0) return {std::move(all), nullptr};
  STRATA_CHECK(n_val < n, "[split] val_fraction ", val_fraction, " of ", n, " samples leaves none to train on");
  std::vector<int64_t> perm = random_permutation(n, seed, kSplitStream);
  std::vector<int64_t> val(perm.begin(), perm.begin() + n_val), train(perm.begin() + n_val, perm.end());
  std::sort(val.begin(), val.end());
  std::sort(train.begin(), train.end());
  return {std::make_shared<SubsetDataset>(all, std::move(train)), std::make_shared<SubsetDataset>(all, std::move(val))};
}

}  // namespace strata::data
