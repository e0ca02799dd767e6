// Column- and row-parallel linears (Megatron-LM's ColumnParallelLinear /
// RowParallelLinear), built from an existing nn::Linear by taking this rank's shard of
// its weight, so a model is made tensor-parallel by swapping children in place.
#pragma once
#include <memory>

#include <strata/comm/process_group.h>
#include <strata/nn/linear.h>
#include <strata/nn/normalization.h>

namespace strata::parallel {

/// How a tensor is split over tp: along `dim`, whose extent is `parts` equal blocks (3 for
/// a fused q|k|v weight), each block cut into tp chunks; rank r holds chunk r of every
/// block, concatenated. parts = 1 is the plain contiguous chunk.
struct TpSplit {
  int64_t dim = 0;
  int64_t parts = 1;
};

/// Rank `rank` of `n`'s shard of the global tensor t (a new contiguous tensor with storage of
/// its own, never a view keeping t alive).
/// Error unless t.size(dim) divides into parts * n.
Tensor tp_shard(const Tensor& t, TpSplit s, int rank, int n);
/// The global tensor from every rank's shard (collective over tp; inverse of tp_shard).
Tensor tp_unshard(const Tensor& shard, TpSplit s, comm::ProcessGroup& tp);

/// A module apply_tp put in place of a single-rank one (same parameter names).
class TpModule : public nn::Module {
 public:
  /// The single-rank module it replaced, holding the whole (gathered) parameters as new
  /// tensors. Collective over tp when a parameter is sharded.
  virtual std::shared_ptr<nn::Module> whole() const = 0;
};

/// y = x W^T + b with W's output rows split over tp: each rank holds out / tp rows of W
/// and b (parameters "weight" (out/tp, in), "bias" (out/tp)). The input enters through
/// copy_to_tp (its gradient is summed over tp), or, with sequence_parallel, is this
/// rank's (B, T/tp, in) sequence shard gathered by all_gather_seq (gradient
/// reduce-scattered); the output is this rank's columns (..., out/tp), or all of them
/// (..., out) with gather_output.
class ColumnParallelLinear : public TpModule {
 public:
  /// Takes rank tp->rank()'s shard of src's parameters (split: TpSplit{0, parts}).
  ColumnParallelLinear(const nn::Linear& src, std::shared_ptr<comm::ProcessGroup> tp, int64_t parts = 1,
                       bool gather_output = false, bool sequence_parallel = false);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ColumnParallelLinear"; }
  std::shared_ptr<nn::Module> whole() const override;

 private:
  std::shared_ptr<comm::ProcessGroup> tp_;
  int64_t parts_;
  bool gather_output_, sequence_parallel_;
  Tensor* weight_;
  Tensor* bias_ = nullptr;
};

/// y = x W^T + b with W's input columns split over tp: each rank holds "weight"
/// (out, in/tp) and the whole "bias" (out), added once after the all-reduce. The input
/// is this rank's (..., in/tp) columns (input_is_parallel) or the whole (..., in),
/// scattered first. With sequence_parallel the partial sums are reduce-scattered along the
/// sequence (B, T/tp, out) instead of all-reduced, and the bias, added to this rank's rows
/// only, enters through copy_to_tp (its gradient is summed over tp).
class RowParallelLinear : public TpModule {
 public:
  RowParallelLinear(const nn::Linear& src, std::shared_ptr<comm::ProcessGroup> tp, bool input_is_parallel = true,
                    bool sequence_parallel = false);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "RowParallelLinear"; }
  std::shared_ptr<nn::Module> whole() const override;

 private:
  std::shared_ptr<comm::ProcessGroup> tp_;
  bool input_is_parallel_, sequence_parallel_;
  Tensor* weight_;
  Tensor* bias_ = nullptr;
};

/// LayerNorm or RMSNorm on a sequence shard (B, T/tp, C) (Megatron-SP): the whole
/// replicated "weight" (and a LayerNorm's "bias"), copies of src's, each entering through
/// copy_to_tp, so their gradients (partial: this rank's positions only) are summed over tp
/// in backward.
class SequenceParallelNorm : public TpModule {
 public:
  SequenceParallelNorm(const nn::LayerNorm& src, std::shared_ptr<comm::ProcessGroup> tp);
  SequenceParallelNorm(const nn::RMSNorm& src, std::shared_ptr<comm::ProcessGroup> tp);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "SequenceParallelNorm"; }
  std::shared_ptr<nn::Module> whole() const override;

 private:
  std::shared_ptr<comm::ProcessGroup> tp_;
  double eps_;
  bool rms_ = false;  ///< an RMSNorm (no mean, no bias)
  Tensor* weight_;
  Tensor* bias_ = nullptr;
};

}  // namespace strata::parallel
