// The shard <-> global-range arithmetic of tensor-parallel checkpoints, and the loads.
#include <strata/parallel/tensor/checkpoint.h>

#include <strata/comm/agreement.h>

#include <algorithm>
#include <map>

#include <strata/parallel/checkpoint/layout_io.h>
#include <strata/tensor/ops.h>

namespace strata::parallel {
namespace {

// Elements per contiguous row of a shard (chunk * post of the split view).
int64_t shard_row(const TpShardedParam& p, int n) {
  int64_t row = p.global_shape[size_t(p.split.dim)] / (p.split.parts * n);
  for (size_t d = size_t(p.split.dim) + 1; d < p.global_shape.size(); ++d) row *= p.global_shape[d];
  return row;
}

Shape shard_shape(const TpShardedParam& p, int n) {
  Shape s = p.global_shape;
  s[size_t(p.split.dim)] /= n;
  return s;
}

}  // namespace

const TpShardedParam* tp_sharded_of(const TpLayout& layout, const std::string& name) {
  if (const TpShardedParam* p = layout.find(name)) return p;
  return layout.find(optim::Optimizer::state_param_name(name));
}

std::vector<std::pair<int64_t, int64_t>> tp_global_runs(const TpShardedParam& p, int rank, int n, int64_t b,
                                                        int64_t e) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const int64_t row = shard_row(p, n);
  for (int64_t i = b; i < e;) {
    const int64_t r = i / row, within = i % row, len = std::min(row - within, e - i);
    const int64_t g = (r * n + rank) * row + within;  // row r of the shard is row r*n + rank of the global
    out.emplace_back(g, g + len);
    i += len;
  }
  return out;
}

std::vector<ShardPiece> tp_global_pieces(const std::vector<ShardPiece>& local, const TpLayout& layout) {
  const int rank = layout.tp->rank(), n = layout.tp->size();
  std::vector<ShardPiece> out;
  for (const ShardPiece& pc : local) {
    const TpShardedParam* p = tp_sharded_of(layout, pc.name);
    if (!p) {
      if (rank == 0) out.push_back(pc);
      continue;
    }
    STRATA_CHECK(pc.global_shape == shard_shape(*p, n), "[tp checkpoint] piece '", pc.name, "' of ",
                 shape_str(pc.global_shape), " is not the tp shard ", shape_str(shard_shape(*p, n)));
    const Tensor flat = ops::reshape(pc.data, {pc.end - pc.begin});
    int64_t at = 0;  // each run's data: the next elements of the piece's flat data (views)
    for (const auto& [gb, ge] : tp_global_runs(*p, rank, n, pc.begin, pc.end)) {
      out.push_back({pc.name, p->global_shape, gb, ge, ops::narrow(flat, 0, at, ge - gb)});
      at += ge - gb;
    }
  }
  return out;
}

Tensor tp_read(const TensorSource& ck, const TpLayout& layout, const std::string& name, const Shape& local,
               DType dtype, int64_t b, int64_t e) {
  const TpShardedParam* p = tp_sharded_of(layout, name);
  const Shape want = p ? p->global_shape : local;
  if (!ck.contains(name))
    STRATA_THROW(DataError, "checkpoint '", ck.dir(), "': tensor '", name, "' is missing (the model has it)");
  if (ck.global_shape(name) != want || ck.dtype(name) != dtype)
    STRATA_THROW(DataError, "checkpoint '", ck.dir(), "': tensor '", name, "' is ", dtype_name(ck.dtype(name)), " ",
                 shape_str(ck.global_shape(name)), " but the model expects ", dtype_name(dtype), " ", shape_str(want));
  if (!p) return ck.read(name, b, e);
  Tensor out = ops::empty({e - b}, dtype);
  int64_t at = 0;
  for (const auto& [gb, ge] : tp_global_runs(*p, layout.tp->rank(), layout.tp->size(), b, e)) {
    ck.read_into(name, gb, ge, ops::narrow(out, 0, at, ge - gb));
    at += ge - gb;
  }
  return out;
}

void load_tp(const TensorSource& ck, nn::Module& model, optim::Optimizer* opt, const TpLayout& layout,
             comm::ProcessGroup* agree_over) {
  const auto whole = [&](const std::string& name, const Tensor& t) {
    return ops::reshape(tp_read(ck, layout, name, t.shape(), t.dtype(), 0, t.numel()), t.shape());
  };
  nn::NamedTensors sd;
  optim::OptimizerState st;
  // Every rank's reads succeed before any rank changes its model (with agree_over).
  comm::run_agreed(agree_over, [&] {
    for (const auto& [n, t] : model.state_dict()) sd.emplace_back(n, whole(n, t));
    if (opt) {
      st.scalars = optimizer_meta(ck);
      if (st.scalars.value("step", int64_t(0)) > 0)  // before the first step there is no state
        for (const auto& kind : opt->state_kinds())
          for (const auto& [pn, p] : opt->named_parameters())
            st.tensors.emplace_back(kind + "." + pn, whole(kind + "." + pn, p));
    }
  });
  model.load_state_dict(sd);  // validates everything before copying
  if (opt) opt->load_state_dict(st);
}

void load_tp_zero(const TensorSource& ck, ZeroDataParallel& zero, bool with_optimizer, const TpLayout& layout,
                  comm::ProcessGroup* agree_over) {
  // Shapes and dtypes of this rank's shards (tp_read checks them against the checkpoint).
  std::map<std::string, std::pair<Shape, DType>> local;
  for (const auto& [n, t] : zero.module().state_dict()) local[n] = {t.shape(), t.dtype()};
  const nlohmann::json* scalars = with_optimizer ? &optimizer_meta(ck) : nullptr;
  zero.load_state(
      [&](const std::string& name, int64_t b, int64_t e) {
        const size_t dot = name.find('.');
        auto it = local.find(name);
        if (it == local.end() && dot != std::string::npos) it = local.find(name.substr(dot + 1));
        STRATA_CHECK(it != local.end(), "[tp checkpoint] '", name, "' names no tensor of the model");
        return tp_read(ck, layout, name, it->second.first, it->second.second, b, e);
      },
      scalars, agree_over);
}

}  // namespace strata::parallel
