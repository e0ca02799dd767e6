// Epoch orders: sequential, random (Philox Fisher-Yates) and the per-rank share of
// DistributedSampler.
#include <strata/data/sampler.h>

#include <numeric>

#include <strata/core/error.h>
#include <strata/core/rng.h>

namespace strata::data {

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, uint64_t stream) {
  STRATA_CHECK(n >= 0, "[random_permutation] n must be >= 0, got ", n);
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t(0));
  // Key = seed; counters start at a block derived from `stream` so each stream
  // (epoch) reads its own, non-overlapping region of the Philox sequence.
  const auto h = philox4x32({uint32_t(stream), uint32_t(stream >> 32), 0x5EEDu, 0x5A3Fu},
                            {uint32_t(seed), uint32_t(seed >> 32)});
  const Generator gen((uint64_t(h[0]) << 32) | h[1]);
  // Draw k (k = 0..n-2) picks j in [0, i] for i = n-1-k; two 64-bit draws per block.
  std::array<uint32_t, 4> w{};
  for (int64_t k = 0; k + 1 < n; ++k) {
    if (k % 2 == 0) w = gen.block(uint64_t(k / 2));
    const int h2 = int(k % 2) * 2;
    const uint64_t r = (uint64_t(w[size_t(h2)]) << 32) | w[size_t(h2 + 1)];
    const int64_t i = n - 1 - k;
    const int64_t j = int64_t(r % uint64_t(i + 1));
    std::swap(p[size_t(i)], p[size_t(j)]);
  }
  return p;
}

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  STRATA_CHECK(n >= 0, "[SequentialSampler] size must be >= 0, got ", n);
}

std::vector<int64_t> SequentialSampler::indices_for_epoch(int64_t) const {
  std::vector<int64_t> p(static_cast<size_t>(n_));
  std::iota(p.begin(), p.end(), int64_t(0));
  return p;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  STRATA_CHECK(n >= 0, "[RandomSampler] size must be >= 0, got ", n);
}

std::vector<int64_t> RandomSampler::indices_for_epoch(int64_t epoch) const {
  return random_permutation(n_, seed_, uint64_t(epoch));
}

DistributedSampler::DistributedSampler(int64_t n, DistributedSamplerOptions opts) : n_(n), opts_(opts) {
  STRATA_CHECK(n >= 0, "[DistributedSampler] size must be >= 0, got ", n);
  STRATA_CHECK(opts.num_replicas >= 1, "[DistributedSampler] num_replicas must be >= 1, got ", opts.num_replicas);
  STRATA_CHECK(opts.rank >= 0 && opts.rank < opts.num_replicas, "[DistributedSampler] rank ", opts.rank,
               " out of range [0, ", opts.num_replicas, ")");
  const int64_t r = opts.num_replicas;
  num_samples_ = opts.drop_last ? n / r : (n + r - 1) / r;
}

std::vector<int64_t> DistributedSampler::indices_for_epoch(int64_t epoch) const {
  std::vector<int64_t> order;
  if (opts_.shuffle) {
    order = random_permutation(n_, opts_.seed, uint64_t(epoch));
  } else {
    order.resize(size_t(n_));
    std::iota(order.begin(), order.end(), int64_t(0));
  }
  const int64_t total = total_size();
  std::vector<int64_t> out;
  out.reserve(size_t(num_samples_));
  // Position q of the padded order is order[q mod n] (padding wraps around the head).
  for (int64_t q = opts_.rank; q < total; q += opts_.num_replicas) out.push_back(order[size_t(q % n_)]);
  return out;
}

}  // namespace strata::data
