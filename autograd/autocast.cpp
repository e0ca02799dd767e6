// Thread-local autocast mode and the two casting policies the ops call at their entry.
#include <strata/autograd/autocast.h>

#include <strata/autograd/functions.h>

namespace strata {
namespace {

thread_local std::optional<DType> t_autocast;

bool is_half(DType dt) { return dt == DType::bf16 || dt == DType::f16; }

// Floating and not f64: what autocast lowers (PyTorch leaves f64 alone as well).
bool lowerable(const Tensor& t) { return t.defined() && (t.dtype() == DType::f32 || is_half(t.dtype())); }

}  // namespace

std::optional<DType> autocast_dtype() { return t_autocast; }

void set_autocast_dtype(std::optional<DType> dt) {
  STRATA_CHECK(!dt || is_half(*dt), "[autocast] dtype must be bf16 or f16, got ", dtype_name(*dt));
  t_autocast = dt;
}

namespace autocast {

bool wants_low_precision(const std::vector<Tensor>& inputs) {
  if (!t_autocast) return false;
  for (const Tensor& t : inputs)
    if (lowerable(t)) return true;
  return false;
}

Path path_for(DeviceType device) { return device == DeviceType::CUDA ? Path::native : Path::emulated; }

Tensor run_low_precision(const std::vector<Tensor>& inputs,
                         const std::function<Tensor(const std::vector<Tensor>&)>& fn) {
  const DType dt = *t_autocast;
  Path path = Path::emulated;
  for (const Tensor& t : inputs)
    if (lowerable(t)) {
      path = path_for(t.device().type);
      break;
    }
  std::vector<Tensor> lowered;
  lowered.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    if (!lowerable(t))
      lowered.push_back(t);
    else if (path == Path::native)
      lowered.push_back(cast(t, dt));  // fn saves these 16-bit tensors for its backward
    else
      lowered.push_back(cast(cast(t, dt), DType::f32));  // exact f32 copies of the rounded values
  }
  Tensor y;
  {
    AutocastGuard off(std::nullopt);  // fn re-enters the op this call came from
    y = fn(lowered);
  }
  // native: y already is 16-bit, widening is exact; emulated: round the f32 result once
  return path == Path::native ? cast(y, DType::f32) : cast(cast(y, dt), DType::f32);
}

Tensor to_f32(const Tensor& x) { return t_autocast && x.defined() && is_half(x.dtype()) ? cast(x, DType::f32) : x; }

}  // namespace autocast
}  // namespace strata
