// Column- and row-parallel linears (Megatron-LM's ColumnParallelLinear /
// RowParallelLinear), built from an existing nn::Linear by taking this rank's shard of
// its weight, so a model is made tensor-parallel by swapping children in place.
#pragma once
#include <memory>

#include <strata/comm/process_group.h>
#include <strata/nn/linear.h>

namespace strata::parallel {

/// How a tensor is split over tp: along `dim`, whose extent is `parts` equal blocks (3 for
/// a fused q|k|v weight), each block cut into tp chunks; rank r holds chunk r of every
/// block, concatenated. parts = 1 is the plain contiguous chunk.
struct TpSplit {
  int64_t dim = 0;
  int64_t parts = 1;
};

/// Rank `rank` of `n`'s shard of the global tensor t (a new contiguous tensor).
/// Error unless t.size(dim) divides into parts * n.
Tensor tp_shard(const Tensor& t, TpSplit s, int rank, int n);
/// The global tensor from every rank's shard (collective over tp; inverse of tp_shard).
Tensor tp_unshard(const Tensor& shard, TpSplit s, comm::ProcessGroup& tp);

/// y = x W^T + b with W's output rows split over tp: each rank holds out / tp rows of W
/// and b (parameters "weight" (out/tp, in), "bias" (out/tp)). The input enters through
/// copy_to_tp (its gradient is summed over tp); the output is this rank's columns
/// (..., out/tp), or all of them (..., out) with gather_output.
class ColumnParallelLinear : public nn::Module {
 public:
  /// Takes rank tp->rank()'s shard of src's parameters (split: TpSplit{0, parts}).
  ColumnParallelLinear(const nn::Linear& src, std::shared_ptr<comm::ProcessGroup> tp, int64_t parts = 1,
                       bool gather_output = false);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ColumnParallelLinear"; }

 private:
  std::shared_ptr<comm::ProcessGroup> tp_;
  bool gather_output_;
  Tensor* weight_;
  Tensor* bias_ = nullptr;
};

/// y = x W^T + b with W's input columns split over tp: each rank holds "weight"
/// (out, in/tp) and the whole "bias" (out), added once after the all-reduce. The input
/// is this rank's (..., in/tp) columns (input_is_parallel) or the whole (..., in),
/// scattered first.
class RowParallelLinear : public nn::Module {
 public:
  RowParallelLinear(const nn::Linear& src, std::shared_ptr<comm::ProcessGroup> tp, bool input_is_parallel = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "RowParallelLinear"; }

 private:
  std::shared_ptr<comm::ProcessGroup> tp_;
  bool input_is_parallel_;
  Tensor* weight_;
  Tensor* bias_ = nullptr;
};

}  // namespace strata::parallel
