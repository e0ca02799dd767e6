// Seeded synthetic datasets. Normals are produced a Philox block (4 values) at a time
// with the exact formula of Generator::normal, so the documented streams hold.
#include <strata/data/synthetic.h>

#include <cmath>

#include <strata/core/rng.h>
#include <strata/data/sampler.h>

namespace strata::data {
namespace {

/// out[k] = gen.normal(base, first + k) for k in [0, n), one Philox block per 4 values.
void fill_normal(const Generator& gen, uint64_t base, uint64_t first, int64_t n, float* out) {
  uint64_t e = first;
  const uint64_t end = first + uint64_t(n);
  while (e < end) {
    const uint64_t blk = e / 4;
    const auto w = gen.block(base + blk);
    float v[4];
    for (int pair = 0; pair < 2; ++pair) {
      const float u1 = Generator::to_unit(w[size_t(pair * 2)]) + 0x1p-25f;  // (0,1]
      const float u2 = Generator::to_unit(w[size_t(pair * 2 + 1)]);
      const float r = std::sqrt(-2.0f * std::log(u1));
      const float th = 6.283185307179586f * u2;
      v[pair * 2] = r * std::cos(th);
      v[pair * 2 + 1] = r * std::sin(th);
    }
    for (uint64_t j = e % 4; j < 4 && e < end; ++j, ++e) out[e - first] = v[j];
  }
}

}  // namespace

SyntheticClassification::SyntheticClassification(SyntheticClassificationOptions opts) : opts_(std::move(opts)) {
  STRATA_CHECK(opts_.size >= 0, "[synthetic] size must be >= 0, got ", opts_.size);
  STRATA_CHECK(opts_.num_classes >= 2, "[synthetic] num_classes must be >= 2, got ", opts_.num_classes);
  STRATA_CHECK(!opts_.sample_shape.empty(), "[synthetic] sample_shape must have at least one dimension");
  for (int64_t d : opts_.sample_shape) {
    STRATA_CHECK(d > 0, "[synthetic] sample_shape ", shape_str(opts_.sample_shape), " has a non-positive dimension");
  }
  dim_ = shape_numel(opts_.sample_shape);
  weight_.resize(size_t(opts_.num_classes * dim_));
  fill_normal(Generator(opts_.seed), kWeightBase, 0, int64_t(weight_.size()), weight_.data());
}

Batch SyntheticClassification::get_batch(const std::vector<int64_t>& indices) const {
  detail::check_indices("synthetic", indices, opts_.size);
  const int64_t b = int64_t(indices.size()), d = dim_, k_n = opts_.num_classes;
  Shape in_shape{b};
  in_shape.insert(in_shape.end(), opts_.sample_shape.begin(), opts_.sample_shape.end());
  Batch out{Tensor::empty(in_shape, DType::f32), Tensor::empty({b}, DType::i64)};
  float* x = out.input.data<float>();       // (B,D)
  int64_t* y = out.target.data<int64_t>();  // (B)
  const Generator gen(opts_.seed);
  for (int64_t s = 0; s < b; ++s) {
    float* xs = x + s * d;
    fill_normal(gen, 0, uint64_t(indices[size_t(s)]) * uint64_t(d), d, xs);
    int64_t best = 0;
    float best_v = 0.0f;
    for (int64_t k = 0; k < k_n; ++k) {
      const float* wk = weight_.data() + k * d;
      float acc = 0.0f;
      for (int64_t j = 0; j < d; ++j) acc += wk[j] * xs[j];
      if (k == 0 || acc > best_v) best = k, best_v = acc;
    }
    y[s] = best;
  }
  return out;
}

SyntheticTokens::SyntheticTokens(SyntheticTokensOptions opts) : opts_(opts) {
  STRATA_CHECK(opts_.size >= 0, "[synthetic_tokens] size must be >= 0, got ", opts_.size);
  STRATA_CHECK(opts_.block_size > 0, "[synthetic_tokens] block_size must be positive, got ", opts_.block_size);
  STRATA_CHECK(opts_.vocab_size >= 2, "[synthetic_tokens] vocab_size must be >= 2, got ", opts_.vocab_size);
  STRATA_CHECK(opts_.noise >= 0.0 && opts_.noise <= 1.0, "[synthetic_tokens] noise must be in [0, 1], got ",
               opts_.noise);
  succ_ = random_permutation(opts_.vocab_size, opts_.seed, kPermStream);
}

Batch SyntheticTokens::get_batch(const std::vector<int64_t>& indices) const {
  detail::check_indices("synthetic_tokens", indices, opts_.size);
  const int64_t b = int64_t(indices.size()), t = opts_.block_size, v = opts_.vocab_size;
  const uint64_t blocks_per_sample = uint64_t(t + 2) / 2;  // ceil((T+1)/2)
  const float noise = float(opts_.noise);
  Batch out{Tensor::empty({b, t}, DType::i64), Tensor::empty({b, t}, DType::i64)};
  int64_t* x = out.input.data<int64_t>();   // (B,T)
  int64_t* y = out.target.data<int64_t>();  // (B,T)
  const Generator gen(opts_.seed);
  for (int64_t s = 0; s < b; ++s) {
    const uint64_t c0 = uint64_t(indices[size_t(s)]) * blocks_per_sample;
    int64_t prev = 0;
    std::array<uint32_t, 4> w{};
    for (int64_t p = 0; p <= t; ++p) {
      if (p % 2 == 0) w = gen.block(c0 + uint64_t(p / 2));
      const uint32_t coin = w[size_t((p % 2) * 2)], draw = w[size_t((p % 2) * 2 + 1)];
      const bool random = p == 0 || Generator::to_unit(coin) < noise;
      const int64_t tok = random ? int64_t(uint64_t(draw) % uint64_t(v)) : succ_[size_t(prev)];
      if (p < t) x[s * t + p] = tok;
      if (p > 0) y[s * t + p - 1] = tok;
      prev = tok;
    }
  }
  return out;
}

}  // namespace strata::data
