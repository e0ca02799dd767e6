// run.precision's names and what each one implies.
#include <strata/core/precision.h>

#include <strata/core/config.h>

namespace strata {

Precision parse_precision(const std::string& s, const std::string& key) {
  for (Precision p : {Precision::f32, Precision::bf16, Precision::f16, Precision::bf16_params, Precision::f16_params})
    if (s == precision_name(p)) return p;
  config_fail(key, "expected one of f32|bf16|f16|bf16_params|f16_params, got '" + s + "'");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::f32: return "f32";
    case Precision::bf16: return "bf16";
    case Precision::f16: return "f16";
    case Precision::bf16_params: return "bf16_params";
    case Precision::f16_params: return "f16_params";
  }
  return "?";
}

std::optional<DType> precision_autocast(Precision p) {
  if (p == Precision::bf16) return DType::bf16;
  if (p == Precision::f16) return DType::f16;
  return std::nullopt;
}

std::optional<DType> precision_state_dtype(Precision p) {
  if (p == Precision::bf16_params) return DType::bf16;
  if (p == Precision::f16_params) return DType::f16;
  return std::nullopt;
}

bool scales_loss(Precision p) { return p == Precision::f16 || p == Precision::f16_params; }

const char* precision_summary(Precision p) {
  switch (p) {
    case Precision::f32: return "";
    case Precision::bf16: return " (autocast)";
    case Precision::f16: return " (autocast, dynamic loss scaling)";
    case Precision::bf16_params: return " (16-bit model states, f32 master weights)";
    case Precision::f16_params: return " (16-bit model states, f32 master weights, dynamic loss scaling)";
  }
  return "";
}

}  // namespace strata
