// Samplers decide the order of dataset indices in each epoch. Orders are pure
// functions of (constructor arguments, epoch), so any rank or a resumed run can
// rebuild the order of any epoch without replaying earlier ones.
#pragma once
#include <cstdint>
#include <vector>

namespace strata::data {

/// A permutation of [0, n) drawn by Fisher-Yates from the counter-based Philox
/// generator keyed by (seed, stream). Same (n, seed, stream) -> same permutation on
/// every machine and thread count.
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, uint64_t stream);

/// Produces the index order of one epoch. indices_for_epoch is const and
/// thread-safe (the DataLoader's worker calls it); set_epoch only changes what
/// indices() returns.
class Sampler {
 public:
  virtual ~Sampler() = default;
  /// Number of indices in every epoch.
  virtual int64_t size() const = 0;
  /// The order for `epoch`.
  virtual std::vector<int64_t> indices_for_epoch(int64_t epoch) const = 0;

  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  /// indices_for_epoch(epoch()).
  std::vector<int64_t> indices() const { return indices_for_epoch(epoch_); }

 private:
  int64_t epoch_ = 0;
};

/// 0, 1, ..., n-1 in every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices_for_epoch(int64_t epoch) const override;

 private:
  int64_t n_;
};

/// A fresh permutation of [0, n) each epoch: random_permutation(n, seed, epoch).
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices_for_epoch(int64_t epoch) const override;

 private:
  int64_t n_;
  uint64_t seed_;
};

struct DistributedSamplerOptions {
  int64_t num_replicas = 1;
  int64_t rank = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = false;
};

/// The share of one data-parallel rank, with torch.utils.data.DistributedSampler's
/// semantics. The global order is random_permutation(n, seed, epoch) when shuffling
/// (identical on every rank), else 0..n-1. Without drop_last it is padded by repeating
/// its head until its length is a multiple of num_replicas; with drop_last its tail is
/// cut to a multiple. Rank r takes positions r, r+N, r+2N, ... so every rank gets
/// size() = total/N indices and the ranks together cover the (padded or cut) order.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t n, DistributedSamplerOptions opts);
  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> indices_for_epoch(int64_t epoch) const override;
  /// num_replicas * size(): the padded (or cut) global length.
  int64_t total_size() const { return num_samples_ * opts_.num_replicas; }

 private:
  int64_t n_;
  DistributedSamplerOptions opts_;
  int64_t num_samples_;
};

}  // namespace strata::data
