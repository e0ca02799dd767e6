// The vocabulary range masks (built on the host from the ids: B*T integers), and the
// sharded log-sum-exp of the loss through the tp regions.
#include <strata/parallel/tensor/vocab.h>

#include <strata/autograd/functions.h>
#include <strata/parallel/tensor/layers.h>
#include <strata/parallel/tensor/regions.h>

namespace strata::parallel {
namespace {

// ids (any shape) -> (the local ids, ids outside [start, start+n) mapped to 0; `keep`: 1
// inside the range, 0 outside, of dtype dt and shape ids.shape() + {1}), on ids' device.
std::pair<Tensor, Tensor> local_ids(const Tensor& ids, int64_t start, int64_t n, DType dt) {
  auto v = ops::to_dtype(ids, DType::i64).to(kCPU).to_vector<int64_t>();
  std::vector<double> keep(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    keep[i] = v[i] >= start && v[i] < start + n;
    v[i] = keep[i] != 0 ? v[i] - start : 0;
  }
  Shape ks = ids.shape();
  ks.push_back(1);
  return {ops::from_vector(v, ids.shape()).to(ids.device()),
          ops::to_dtype(ops::from_vector(keep, ks), dt).to(ids.device())};
}

}  // namespace

VocabParallelEmbedding::VocabParallelEmbedding(const nn::Embedding& src, std::shared_ptr<comm::ProcessGroup> tp)
    : tp_(std::move(tp)), start_(tp_->rank() * (src.num_embeddings() / tp_->size())) {
  weight_ = &register_parameter("weight", tp_shard(src.weight(), {0, 1}, tp_->rank(), tp_->size()));
}

Tensor VocabParallelEmbedding::forward(const Tensor& idx) {
  auto [ids, keep] = local_ids(idx, start_, weight_->size(0), weight_->dtype());
  return reduce_from_tp(embedding(*weight_, ids) * keep, *tp_);  // (..., D), zero rows outside
}

std::shared_ptr<nn::Module> VocabParallelEmbedding::whole() const {
  Tensor table = tp_unshard(*weight_, {0, 1}, *tp_);
  Generator unused(0);  // the init is overwritten by the gathered table
  auto e = std::make_shared<nn::Embedding>(table.size(0), table.size(1), unused);
  e->to(table.dtype());  // a 16-bit model's table stays 16-bit
  e->load_state_dict({{"weight", table}});
  return e;
}

Tensor vocab_parallel_cross_entropy(const Tensor& local_logits, const Tensor& targets, comm::ProcessGroup& tp,
                                    int64_t ignore_index) {
  STRATA_CHECK(local_logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == local_logits.size(0),
               "[vocab_parallel_cross_entropy] expects logits (N, V/tp) and targets (N), got ",
               shape_str(local_logits.shape()), " and ", shape_str(targets.shape()));
  // 16-bit logits (run.precision bf16_params) are widened once here and the loss is
  // computed in f32, as the one-process cross-entropy does per row; the widened shard is
  // what that kernel keeps for backward anyway (f32 probabilities), and the logits'
  // gradient comes back 16-bit through the cast.
  const bool half = local_logits.dtype() == DType::bf16 || local_logits.dtype() == DType::f16;
  if (half) return vocab_parallel_cross_entropy(cast(local_logits, DType::f32), targets, tp, ignore_index);
  const int64_t vl = local_logits.size(1);
  // The max over the whole vocabulary, a constant for the gradient (it cancels).
  Tensor m = ops::contiguous(amax(local_logits.detach(), 1, /*keepdim=*/true));
  tp.all_reduce(m, comm::ReduceOp::max).wait();
  Tensor shifted = local_logits - m;                                   // (N, V/tp)
  Tensor sum_exp = reduce_from_tp(sum(exp(shifted), {1}), tp);         // (N)
  auto [ids, keep] = local_ids(targets, tp.rank() * vl, vl, local_logits.dtype());
  Tensor picked = gather(shifted, 1, unsqueeze(ids, 1)) * keep;  // (N, 1): 0 outside this range
  Tensor target_logit = reduce_from_tp(squeeze(picked, 1), tp);
  Tensor per_row = log(sum_exp) - target_logit;  // -log softmax at the target
  const auto tv = ops::to_dtype(targets, DType::i64).to(kCPU).to_vector<int64_t>();
  std::vector<double> counted(tv.size());
  double kept = 0;
  for (size_t i = 0; i < tv.size(); ++i) kept += counted[i] = tv[i] != ignore_index;
  STRATA_CHECK(kept > 0, "[vocab_parallel_cross_entropy] every target is ignore_index ", ignore_index);
  const Tensor w = ops::to_dtype(ops::from_vector(counted, targets.shape()), local_logits.dtype()).to(targets.device());
  return sum(per_row * w) * (1.0 / kept);
}

}  // namespace strata::parallel
