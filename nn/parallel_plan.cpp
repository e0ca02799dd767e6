// Style names and the sharding rule of the tensor-parallel plan (see parallel_plan.h).
#include <strata/nn/parallel_plan.h>

namespace strata::nn {

const char* tp_style_name(TpStyle s) {
  switch (s) {
    case TpStyle::colwise: return "colwise";
    case TpStyle::colwise_qkv: return "colwise_qkv";
    case TpStyle::rowwise: return "rowwise";
    case TpStyle::parallel_rng: return "parallel_rng";
    case TpStyle::vocab_parallel: return "vocab_parallel";
    case TpStyle::sequence_norm: return "sequence_norm";
  }
  return "?";
}

bool tp_shards(const TpPlan& plan, const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  const auto it = plan.find(name.substr(0, dot));
  if (it == plan.end()) return false;
  switch (it->second) {
    case TpStyle::colwise:
    case TpStyle::colwise_qkv:
    case TpStyle::vocab_parallel: return true;
    case TpStyle::rowwise: return name.compare(dot + 1, std::string::npos, "weight") == 0;  // a row layer's bias is whole
    case TpStyle::parallel_rng:
    case TpStyle::sequence_norm: return false;
  }
  return false;
}

DType stage_activation_dtype(const Module& model) {
  const auto ps = model.parameters();
  return ps.empty() ? DType::f32 : ps.front().dtype();
}

}  // namespace strata::nn
