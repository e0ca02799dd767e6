// Vocabulary-parallel embedding and cross-entropy (Megatron-LM's VocabParallelEmbedding
// and vocab_parallel_cross_entropy): each tp rank holds a contiguous vocabulary range,
// and the loss is computed from the sharded logits without materialising (N, V).
#pragma once
#include <memory>

#include <strata/comm/process_group.h>
#include <strata/nn/embedding.h>
#include <strata/parallel/tensor/layers.h>

namespace strata::parallel {

/// Rows [rank * V/tp, (rank+1) * V/tp) of an embedding table ("weight" (V/tp, D), global
/// name kept). Ids outside the range give zero rows; the results are all-reduced over tp
/// (reduce_from_tp), so every rank gets the whole (..., D) lookup.
class VocabParallelEmbedding : public TpModule {
 public:
  /// Takes rank tp->rank()'s range of src's table. V must divide by tp.
  VocabParallelEmbedding(const nn::Embedding& src, std::shared_ptr<comm::ProcessGroup> tp);
  /// idx (...) i64/i32 -> (..., D); collective over tp.
  Tensor forward(const Tensor& idx) override;
  std::string type_name() const override { return "VocabParallelEmbedding"; }
  int64_t vocab_start() const { return start_; }
  /// An nn::Embedding holding the gathered table (collective over tp).
  std::shared_ptr<nn::Module> whole() const override;

 private:
  std::shared_ptr<comm::ProcessGroup> tp_;
  int64_t start_;
  Tensor* weight_;
};

/// Mean cross-entropy over the rows whose target != ignore_index, from this rank's logits
/// (N, V/tp) for vocabulary entries [tp.rank() * V/tp, ...) and the global targets (N).
/// Three all-reduces of N values (the max, the sum of exponentials, the target logit);
/// the result is the same on every rank and equals cross_entropy of the gathered (N, V)
/// logits, and its gradient is this rank's slice of that loss's gradient. Collective.
Tensor vocab_parallel_cross_entropy(const Tensor& local_logits, const Tensor& targets, comm::ProcessGroup& tp,
                                    int64_t ignore_index = -100);

}  // namespace strata::parallel
