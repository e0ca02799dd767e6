// ZeroDataParallel's state in and out (see zero.h): this rank's checkpoint pieces, loading
// a checkpoint of any layout by reading only this rank's ranges, and the full state dict.
#include <unordered_map>

#include <strata/parallel/data/coalesced.h>
#include <strata/comm/agreement.h>
#include <strata/parallel/data/zero.h>
#include <strata/parallel/data/zero_state.h>
#include <strata/tensor/ops.h>

namespace strata::parallel {

using detail::slice1d;

nn::NamedTensors ZeroDataParallel::full_state_dict() {
  // Buffers as rank 0 holds them (what broadcast_buffers gives every rank's next forward).
  if (!s_->buffers.empty() && s_->world > 1) broadcast_coalesced(group_, s_->buffers, 0);
  auto full = summon_full_params();
  nn::NamedTensors out;
  for (auto& [n, t] : module_->state_dict()) out.emplace_back(n, ops::clone(t));
  return out;
}

std::vector<ShardPiece> ZeroDataParallel::state_pieces() const {
  const auto& s = *s_;
  std::vector<ShardPiece> out;
  if (replicate_ && replicate_->rank() != 0) return out;  // HSDP: replica 0 holds the same slices
  std::unordered_map<std::string, std::pair<int, const ShardSlice*>> slice_of;  // param name -> (unit, slice)
  // 16-bit model states: the checkpoint holds this rank's slices of the f32 masters
  std::unordered_map<std::string, Tensor> masters;
  for (const auto& [n, m] : s.optimizer->named_masters()) masters.emplace(n, m);
  for (size_t k = 0; k < s.units.size(); ++k)
    for (const ShardSlice& sl : s.units[k].slices) {
      const std::string& name = s.names[size_t(sl.param)];
      slice_of[name] = {int(k), &sl};
      auto m = masters.find(name);
      out.push_back({name, s.shapes[size_t(sl.param)], sl.param_begin, sl.param_end,
                     m != masters.end() ? ops::flatten(m->second)
                                        : slice1d(s.units[k].param_shard, sl.shard_offset, sl.size())});
    }
  // Optimizer state tensors are named "<state>.<param>" and shaped like this rank's slice.
  for (auto& [sname, t] : s.optimizer->state_dict().tensors) {
    const size_t dot = sname.find('.');
    const std::string param = dot == std::string::npos ? sname : sname.substr(dot + 1);
    auto it = slice_of.find(param);
    STRATA_CHECK(it != slice_of.end(), "[zero] optimizer state '", sname, "' names no parameter slice of rank ", s.rank);
    const ShardSlice& sl = *it->second.second;
    out.push_back({sname, s.shapes[size_t(sl.param)], sl.param_begin, sl.param_end, ops::flatten(t)});
  }
  if (s.rank == 0)
    for (auto& [n, b] : module_->named_buffers()) out.push_back({n, b.shape(), 0, b.numel(), ops::flatten(b)});
  return out;
}

void ZeroDataParallel::load_state(const RangeReader& read, const nlohmann::json* optimizer_scalars,
                                  comm::ProcessGroup* agree_over) {
  auto& s = *s_;
  // Read this rank's slices only, everything before anything changes (a DataError
  // leaves the model untouched): at most this rank's shard of the checkpoint is held.
  std::vector<Tensor> param_vals;
  std::vector<Tensor> buffer_vals;
  const auto bufs = module_->named_buffers();
  optim::OptimizerState st;
  comm::run_agreed(agree_over, [&] {
    for (auto& u : s.units)
      for (const ShardSlice& sl : u.slices) {
        Tensor v = read(s.names[size_t(sl.param)], sl.param_begin, sl.param_end);
        STRATA_CHECK(v.numel() == sl.size(), "[zero load] '", s.names[size_t(sl.param)], "' [", sl.param_begin, ", ",
                     sl.param_end, ") read ", v.numel(), " elements");
        param_vals.push_back(v);
      }
    for (auto& [n, b] : bufs) buffer_vals.push_back(read(n, 0, b.numel()));
    if (optimizer_scalars) {
      st.scalars = *optimizer_scalars;
      // Before the first step a checkpoint holds no state tensors.
      const std::vector<std::string> kinds =
          st.scalars.value("step", int64_t(0)) > 0 ? s.optimizer->state_kinds() : std::vector<std::string>{};
      for (const auto& u : s.units)
        for (const ShardSlice& sl : u.slices)
          for (const auto& kind : kinds) {
            const std::string name = kind + "." + s.names[size_t(sl.param)];
            Tensor v = read(name, sl.param_begin, sl.param_end);
            // state is f32 for 16-bit parameters (a checkpoint of another precision converts)
            const DType want = u.dtype == DType::bf16 || u.dtype == DType::f16 ? DType::f32 : u.dtype;
            st.tensors.emplace_back(name, v.dtype() == want ? v : ops::to_dtype(v, want));
          }
    }
  });
  // Apply: the optimizer first (load_state_dict checks everything before it changes
  // anything), dropping the read state as soon as it is copied, then the parameters.
  if (optimizer_scalars) {
    s.optimizer->load_state_dict(st);
    st = {};
  }
  size_t i = 0;
  for (auto& u : s.units)
    for (const ShardSlice& sl : u.slices) {
      Tensor dst = slice1d(u.param_shard, sl.shard_offset, sl.size());
      Tensor v = ops::reshape(param_vals[i], {sl.size()});
      ops::copy_(dst, v);  // rounds wider values into 16-bit parameters
      // the optimizer's f32 masters take the checkpoint's values exactly (f32 masters of a
      // 16-bit run, an f32 run's weights, or 16-bit weights widened)
      if (u.dtype == DType::bf16 || u.dtype == DType::f16) s.optimizer->set_weight(s.names[size_t(sl.param)], v);
      param_vals[i++] = Tensor();
    }
  for (size_t b = 0; b < bufs.size(); ++b) {
    Tensor dst = bufs[b].second;
    ops::copy_(dst, ops::reshape(buffer_vals[b], dst.shape()));
  }
  if (!s.policy.shards_params) {
    double wait_s = 0;
    s.all_gather_params(wait_s);
  }
}

}  // namespace strata::parallel
