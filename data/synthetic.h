// Datasets generated from a seed, for tests and benchmarks. Every value comes from the
// counter-based Philox generator at a counter fixed by (sample, position), so sample i
// is the same whatever order, batch or thread asks for it.
#pragma once
#include <cstdint>
#include <vector>

#include <strata/data/dataset.h>

namespace strata::data {

struct SyntheticClassificationOptions {
  int64_t size = 1024;
  /// Shape of one input: (D) for an MLP, (C,H,W) for the image variant.
  Shape sample_shape = {32};
  int64_t num_classes = 10;
  uint64_t seed = 0;
};

/// A learnable classification set. With D = numel(sample_shape) and g = Generator(seed):
/// input element j of sample i is g.normal(0, i*D + j) (standard normal);
/// weight W (K,D) has W[k,d] = g.normal(kWeightBase, k*D + d);
/// target of sample i = argmax_k (W x_i)_k (first maximum).
/// input: f32 (B, *sample_shape); target: i64 (B).
class SyntheticClassification : public Dataset {
 public:
  static constexpr uint64_t kWeightBase = uint64_t(1) << 62;

  explicit SyntheticClassification(SyntheticClassificationOptions opts);
  int64_t size() const override { return opts_.size; }
  Batch get_batch(const std::vector<int64_t>& indices) const override;

  const SyntheticClassificationOptions& options() const { return opts_; }
  /// The labelling map W, (K,D) row-major.
  const std::vector<float>& weight() const { return weight_; }

 private:
  SyntheticClassificationOptions opts_;
  int64_t dim_;
  std::vector<float> weight_;
};

struct SyntheticTokensOptions {
  int64_t size = 1024;
  int64_t block_size = 32;
  int64_t vocab_size = 64;
  /// Probability that a token is uniform noise instead of the successor of the last.
  double noise = 0.1;
  uint64_t seed = 0;
};

/// GPT-shaped token windows with a learnable bigram structure. A fixed permutation
/// `succ` of the vocabulary is drawn from the seed (random_permutation(V, seed, kPermStream)).
/// Sample i is a sequence x_0..x_T (T = block_size): x_0 uniform; then with
/// probability `noise` x_t is uniform, else x_t = succ[x_{t-1}]. Position t reads
/// Philox block i*ceil((T+1)/2) + t/2 (two 32-bit words per position: coin, token).
/// input: i64 (B,T) = x_0..x_{T-1}; target: i64 (B,T) = x_1..x_T.
class SyntheticTokens : public Dataset {
 public:
  static constexpr uint64_t kPermStream = 0x7065726Dull;

  explicit SyntheticTokens(SyntheticTokensOptions opts);
  int64_t size() const override { return opts_.size; }
  Batch get_batch(const std::vector<int64_t>& indices) const override;

  const SyntheticTokensOptions& options() const { return opts_; }
  /// The successor map `succ` (V).
  const std::vector<int64_t>& successor() const { return succ_; }

 private:
  SyntheticTokensOptions opts_;
  std::vector<int64_t> succ_;
};

}  // namespace strata::data
