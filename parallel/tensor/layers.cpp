// Column/row-parallel linears: the shard arithmetic and the two forwards.
#include <strata/parallel/tensor/layers.h>

#include <strata/autograd/functions.h>
#include <strata/parallel/tensor/regions.h>

namespace strata::parallel {
namespace {

// The global shape viewed as (pre, parts, n, chunk, post): the axes a shard selects on.
Shape split_view(const Shape& global, TpSplit s, int64_t n) {
  int64_t pre = 1, post = 1;
  for (int64_t d = 0; d < s.dim; ++d) pre *= global[size_t(d)];
  for (size_t d = size_t(s.dim) + 1; d < global.size(); ++d) post *= global[d];
  return {pre, s.parts, n, global[size_t(s.dim)] / (s.parts * n), post};
}

Shape shard_shape(Shape global, TpSplit s, int64_t n) {
  global[size_t(s.dim)] /= n;
  return global;
}

}  // namespace

Tensor tp_shard(const Tensor& t, TpSplit s, int rank, int n) {
  STRATA_CHECK(s.dim >= 0 && s.dim < t.dim() && s.parts >= 1 && t.size(s.dim) % (s.parts * n) == 0,
               "[tp] cannot split ", shape_str(t.shape()), " along dimension ", s.dim, " into ", s.parts,
               " part(s) x ", n, " tensor-parallel rank(s)");
  Tensor v = ops::reshape(ops::contiguous(t), split_view(t.shape(), s, n));
  // Always new storage: a contiguous chunk (the rows of a column split) would otherwise be
  // a view keeping the whole tensor alive.
  Tensor chunk = ops::narrow(v, 2, rank, 1);
  chunk = chunk.is_contiguous() ? ops::clone(chunk) : ops::contiguous(chunk);
  return ops::reshape(chunk, shard_shape(t.shape(), s, n));
}

Tensor tp_unshard(const Tensor& shard, TpSplit s, comm::ProcessGroup& tp) {
  const int64_t n = tp.size();
  Shape global = shard.shape();
  global[size_t(s.dim)] *= n;
  if (n == 1) return ops::clone(shard);
  Shape v = split_view(global, s, n);  // (pre, parts, n, chunk, post)
  Tensor buf = ops::empty({n, v[0], v[1], v[3], v[4]}, shard.dtype(), shard.device());
  tp.all_gather(ops::contiguous(shard), buf).wait();  // block j = rank j's shard
  return ops::reshape(ops::contiguous(ops::permute(buf, {1, 2, 0, 3, 4})), global);
}

ColumnParallelLinear::ColumnParallelLinear(const nn::Linear& src, std::shared_ptr<comm::ProcessGroup> tp,
                                           int64_t parts, bool gather_output, bool sequence_parallel)
    : tp_(std::move(tp)), parts_(parts), gather_output_(gather_output), sequence_parallel_(sequence_parallel) {
  STRATA_CHECK(!gather_output || parts == 1, "[ColumnParallelLinear] gather_output needs an unfused weight");
  const TpSplit s{0, parts};
  weight_ = &register_parameter("weight", tp_shard(src.weight(), s, tp_->rank(), tp_->size()));
  if (src.has_bias()) bias_ = &register_parameter("bias", tp_shard(src.bias(), s, tp_->rank(), tp_->size()));
}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  Tensor in = sequence_parallel_ ? all_gather_seq(x, *tp_) : copy_to_tp(x, *tp_);
  Tensor y = linear(in, *weight_, bias_ ? *bias_ : Tensor());
  return gather_output_ ? gather_from_tp(y, *tp_) : y;
}

std::shared_ptr<nn::Module> ColumnParallelLinear::whole() const {
  const TpSplit s{0, parts_};
  return std::make_shared<nn::Linear>(tp_unshard(*weight_, s, *tp_), bias_ ? tp_unshard(*bias_, s, *tp_) : Tensor());
}

RowParallelLinear::RowParallelLinear(const nn::Linear& src, std::shared_ptr<comm::ProcessGroup> tp,
                                     bool input_is_parallel, bool sequence_parallel)
    : tp_(std::move(tp)), input_is_parallel_(input_is_parallel), sequence_parallel_(sequence_parallel) {
  weight_ = &register_parameter("weight", tp_shard(src.weight(), {1, 1}, tp_->rank(), tp_->size()));
  if (src.has_bias()) bias_ = &register_parameter("bias", ops::clone(src.bias()));
}

Tensor RowParallelLinear::forward(const Tensor& x) {
  Tensor in = input_is_parallel_ ? x : scatter_to_tp(x, *tp_);
  Tensor partial = linear(in, *weight_, Tensor());
  if (sequence_parallel_) {
    Tensor y = reduce_scatter_seq(partial, *tp_);
    return bias_ ? y + copy_to_tp(*bias_, *tp_) : y;  // on this rank's rows: gradient summed over tp
  }
  Tensor y = reduce_from_tp(partial, *tp_);
  return bias_ ? y + *bias_ : y;  // once, after the reduce
}

std::shared_ptr<nn::Module> RowParallelLinear::whole() const {
  return std::make_shared<nn::Linear>(tp_unshard(*weight_, {1, 1}, *tp_), bias_ ? ops::clone(*bias_) : Tensor());
}

SequenceParallelNorm::SequenceParallelNorm(const nn::LayerNorm& src, std::shared_ptr<comm::ProcessGroup> tp)
    : tp_(std::move(tp)), eps_(src.eps()) {
  weight_ = &register_parameter("weight", ops::clone(src.weight()));
  if (src.bias().defined()) bias_ = &register_parameter("bias", ops::clone(src.bias()));
}

SequenceParallelNorm::SequenceParallelNorm(const nn::RMSNorm& src, std::shared_ptr<comm::ProcessGroup> tp)
    : tp_(std::move(tp)), eps_(src.eps()), rms_(true) {
  weight_ = &register_parameter("weight", ops::clone(src.weight()));
}

Tensor SequenceParallelNorm::forward(const Tensor& x) {
  if (rms_) return rms_norm(x, copy_to_tp(*weight_, *tp_), eps_);
  return layer_norm(x, copy_to_tp(*weight_, *tp_), bias_ ? copy_to_tp(*bias_, *tp_) : Tensor(), eps_);
}

std::shared_ptr<nn::Module> SequenceParallelNorm::whole() const {
  if (rms_) {
    auto rms = std::make_shared<nn::RMSNorm>(weight_->size(0), eps_);
    rms->to(weight_->dtype());  // the shard's dtype and device (an f64 or bf16 model's)
    rms->to(weight_->device());
    rms->load_state_dict({{"weight", weight_->detach()}});
    return rms;
  }
  auto ln = std::make_shared<nn::LayerNorm>(weight_->size(0), eps_, bias_ != nullptr);
  ln->to(weight_->dtype());
  ln->to(weight_->device());
  nn::NamedTensors sd{{"weight", weight_->detach()}};
  if (bias_) sd.emplace_back("bias", bias_->detach());
  ln->load_state_dict(sd);
  return ln;
}

}  // namespace strata::parallel
