// Checkpoint glue for unsharded and ZeRO layouts (see checkpoint_io.h).
#include <strata/parallel/checkpoint_io.h>

#include <strata/tensor/ops.h>

namespace strata::parallel {
namespace {

// DataError unless `ck` holds `name` with `shape` and `dtype`.
void expect_tensor(const CheckpointReader& ck, const std::string& name, const Shape& shape, DType dtype) {
  if (!ck.contains(name))
    STRATA_THROW(DataError, "checkpoint '", ck.dir(), "': tensor '", name, "' is missing (the model has it)");
  if (ck.global_shape(name) != shape || ck.dtype(name) != dtype)
    STRATA_THROW(DataError, "checkpoint '", ck.dir(), "': tensor '", name, "' is ", dtype_name(ck.dtype(name)), " ",
                 shape_str(ck.global_shape(name)), " but the model expects ", dtype_name(dtype), " ", shape_str(shape));
}

const nlohmann::json& optimizer_meta(const CheckpointReader& ck) {
  if (!ck.meta().contains(kOptimizerMetaKey))
    STRATA_THROW(DataError, "checkpoint '", ck.dir(), "': index meta has no '", kOptimizerMetaKey,
                 "' entry (saved without optimizer state)");
  return ck.meta()[kOptimizerMetaKey];
}

bool has_state(const nlohmann::json& scalars) { return scalars.value("step", int64_t(0)) > 0; }

}  // namespace

std::vector<ShardPiece> replicated_pieces(const nn::Module& model, const optim::Optimizer* opt, int rank) {
  std::vector<ShardPiece> out;
  if (rank != 0) return out;
  for (const auto& [n, t] : model.state_dict()) out.push_back({n, t.shape(), 0, t.numel(), ops::flatten(t)});
  if (opt)
    for (const auto& [n, t] : opt->state_dict().tensors) out.push_back({n, t.shape(), 0, t.numel(), ops::flatten(t)});
  return out;
}

void load_replicated(const CheckpointReader& ck, nn::Module& model, optim::Optimizer* opt) {
  nn::NamedTensors sd;
  for (const auto& [n, t] : model.state_dict()) {
    expect_tensor(ck, n, t.shape(), t.dtype());
    sd.emplace_back(n, ck.read_full(n));
  }
  optim::OptimizerState st;
  if (opt) {
    st.scalars = optimizer_meta(ck);
    if (has_state(st.scalars))
      for (const auto& kind : opt->state_kinds())
        for (const auto& [pn, p] : opt->named_parameters()) {
          const std::string name = kind + "." + pn;
          expect_tensor(ck, name, p.shape(), p.dtype());
          st.tensors.emplace_back(name, ck.read_full(name));
        }
  }
  model.load_state_dict(sd);  // validates everything before copying
  if (opt) opt->load_state_dict(st);
}

void load_zero(const CheckpointReader& ck, ZeroDataParallel& zero, bool with_optimizer) {
  // Check every name, shape and dtype up front (full shapes from the module).
  const nn::NamedTensors sd = zero.module().state_dict();
  for (const auto& [n, t] : sd) expect_tensor(ck, n, t.shape(), t.dtype());
  const nlohmann::json* scalars = with_optimizer ? &optimizer_meta(ck) : nullptr;
  if (scalars && has_state(*scalars))
    for (const auto& kind : zero.optimizer().state_kinds())
      for (const auto& [n, t] : zero.module().named_parameters()) expect_tensor(ck, kind + "." + n, t.shape(), t.dtype());
  zero.load_state([&](const std::string& name, int64_t b, int64_t e) { return ck.read(name, b, e); }, scalars);
}

}  // namespace strata::parallel
