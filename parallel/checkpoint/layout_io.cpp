// Checkpoint glue for unsharded and ZeRO layouts (see checkpoint_io.h).
#include <strata/parallel/checkpoint/layout_io.h>

#include <strata/comm/agreement.h>

#include <map>

#include <strata/tensor/ops.h>

namespace strata::parallel {
namespace {

// DataError unless `ck` holds `name` with `shape` and `dtype`.
void expect_tensor(const TensorSource& ck, const std::string& name, const Shape& shape, DType dtype) {
  if (!ck.contains(name))
    STRATA_THROW(DataError, "checkpoint '", ck.dir(), "': tensor '", name, "' is missing (the model has it)");
  if (ck.global_shape(name) != shape || ck.dtype(name) != dtype)
    STRATA_THROW(DataError, "checkpoint '", ck.dir(), "': tensor '", name, "' is ", dtype_name(ck.dtype(name)), " ",
                 shape_str(ck.global_shape(name)), " but the model expects ", dtype_name(dtype), " ", shape_str(shape));
}

bool has_state(const nlohmann::json& scalars) { return scalars.value("step", int64_t(0)) > 0; }

}  // namespace

// Parameters and optimizer state move between precisions (f32, autocast, 16-bit model
// states): any floating checkpoint dtype loads into any floating tensor of the same shape.
void expect_floating(const TensorSource& ck, const std::string& name, const Shape& shape, DType dtype) {
  if (ck.contains(name) && is_floating(ck.dtype(name)) && is_floating(dtype))
    return expect_tensor(ck, name, shape, ck.dtype(name));
  expect_tensor(ck, name, shape, dtype);
}

const nlohmann::json& optimizer_meta(const TensorSource& ck) {
  if (!ck.meta().contains(kOptimizerMetaKey))
    STRATA_THROW(DataError, "checkpoint '", ck.dir(), "': index meta has no '", kOptimizerMetaKey,
                 "' entry (saved without optimizer state)");
  return ck.meta()[kOptimizerMetaKey];
}


std::vector<ShardPiece> replicated_pieces(const nn::Module& model, const optim::Optimizer* opt, int rank) {
  std::vector<ShardPiece> out;
  if (rank != 0) return out;
  // 16-bit model states: a checkpoint holds the f32 master weights (the 16-bit parameters
  // are their rounding), so a resume is bit-exact and any precision can load it
  std::map<std::string, Tensor> masters;
  if (opt)
    for (const auto& [n, m] : opt->named_masters()) masters.emplace(n, m);
  for (const auto& [n, t] : model.state_dict()) {
    auto it = masters.find(n);
    out.push_back({n, t.shape(), 0, t.numel(), ops::flatten(it != masters.end() ? it->second : t)});
  }
  if (opt)
    for (const auto& [n, t] : opt->state_dict().tensors) out.push_back({n, t.shape(), 0, t.numel(), ops::flatten(t)});
  return out;
}

void load_replicated(const TensorSource& ck, nn::Module& model, optim::Optimizer* opt,
                     comm::ProcessGroup* agree_over) {
  nn::NamedTensors sd, weights;  // weights: parameters as saved, for the optimizer's f32 masters
  std::map<std::string, bool> is_param;
  for (const auto& [n, p] : model.named_parameters()) is_param[n] = true;
  optim::OptimizerState st;
  // Every rank's reads succeed before any rank changes its model (with agree_over).
  comm::run_agreed(agree_over, [&] {
    for (const auto& [n, t] : model.state_dict()) {
      expect_floating(ck, n, t.shape(), t.dtype());
      Tensor v = ck.read_full(n);
      if (is_param.count(n) && opt && v.dtype() != t.dtype()) weights.emplace_back(n, v);
      sd.emplace_back(n, v.dtype() == t.dtype() ? v : ops::to_dtype(v, t.dtype()));
    }
    if (opt) {
      st.scalars = optimizer_meta(ck);
      if (has_state(st.scalars))
        for (const auto& kind : opt->state_kinds())
          for (const auto& [pn, p] : opt->named_parameters()) {
            const std::string name = kind + "." + pn;
            expect_floating(ck, name, p.shape(), p.dtype());
            Tensor v = ck.read_full(name);
            // state is f32 for 16-bit parameters, the parameter's dtype otherwise
            const DType want = p.dtype() == DType::bf16 || p.dtype() == DType::f16 ? DType::f32 : p.dtype();
            st.tensors.emplace_back(name, v.dtype() == want ? v : ops::to_dtype(v, want));
          }
    }
  });
  model.load_state_dict(sd);  // validates everything before copying
  if (opt) {
    opt->load_state_dict(st);
    opt->reload_masters_from_params();  // 16-bit weights in the checkpoint: masters are their values
    for (const auto& [n, v] : weights) opt->set_weight(n, v);  // wider weights: masters take them exactly
  }
}

void load_zero(const TensorSource& ck, ZeroDataParallel& zero, bool with_optimizer, comm::ProcessGroup* agree_over) {
  // Check every name, shape and dtype up front (full shapes from the module).
  const nn::NamedTensors sd = zero.module().state_dict();
  for (const auto& [n, t] : sd) expect_floating(ck, n, t.shape(), t.dtype());
  const nlohmann::json* scalars = with_optimizer ? &optimizer_meta(ck) : nullptr;
  if (scalars && has_state(*scalars))
    for (const auto& kind : zero.optimizer().state_kinds())
      for (const auto& [n, t] : zero.module().named_parameters())
        expect_floating(ck, kind + "." + n, t.shape(), t.dtype());
  zero.load_state([&](const std::string& name, int64_t b, int64_t e) { return ck.read(name, b, e); }, scalars,
                  agree_over);
}

}  // namespace strata::parallel
