// Embedding: a (V, D) table looked up by integer ids (token and position embeddings).
#pragma once
#include <strata/nn/module.h>

namespace strata::nn {

/// weight (V, D) initialised N(0, std) (PyTorch default std = 1; GPT uses 0.02).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, Generator& gen, double init_std = 1.0);
  /// idx (...) i64/i32 -> (..., D)
  Tensor forward(const Tensor& idx) override;
  std::string type_name() const override { return "Embedding"; }
  int64_t num_embeddings() const { return num_; }
  int64_t embedding_dim() const { return dim_; }
  const Tensor& weight() const { return *weight_; }

 private:
  int64_t num_, dim_;
  Tensor* weight_;
};

}  // namespace strata::nn
