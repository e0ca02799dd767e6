// Thread-local autocast mode and the two casting policies the ops call at their entry.
#include <strata/autograd/autocast.h>

#include <unordered_map>

#include <strata/autograd/functions.h>
#include <strata/autograd/grad_mode.h>

namespace strata {
namespace {

thread_local std::optional<DType> t_autocast;

bool is_half(DType dt) { return dt == DType::bf16 || dt == DType::f16; }

// Floating and not f64: what autocast lowers (PyTorch leaves f64 alone as well).
bool lowerable(const Tensor& t) { return t.defined() && (t.dtype() == DType::f32 || is_half(t.dtype())); }

// The autocast region's parameter casts (AutocastGuard), keyed by the parameter's impl; an
// entry is reused only while that impl is alive and its version, the autocast dtype, the
// path and the grad mode are those of the cast.
struct CachedCast {
  std::weak_ptr<TensorImpl> source;
  uint32_t version;
  DType dtype;
  autocast::Path path;
  bool grad;
  Tensor lowered;
};
thread_local std::unordered_map<const TensorImpl*, CachedCast> t_cast_cache;

}  // namespace

AutocastGuard::~AutocastGuard() {
  set_autocast_dtype(prev_);
  if (on_ && !prev_) t_cast_cache.clear();
}

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
  // native: fn saves the 16-bit tensors for its backward; emulated: exact f32 copies of
  // the rounded values
  const auto lower = [&](const Tensor& t) {
    return path == Path::native ? cast(t, dt) : cast(cast(t, dt), DType::f32);
  };
  std::vector<Tensor> lowered;
  lowered.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    if (!lowerable(t)) {
      lowered.push_back(t);
    } else if (t.is_leaf() && t.requires_grad()) {  // a parameter: cast once per region
      const bool grad = grad_enabled();
      auto it = t_cast_cache.find(t.impl());
      if (it == t_cast_cache.end() || it->second.source.lock() != t.impl_ptr() || it->second.version != t.version() ||
          it->second.dtype != dt || it->second.path != path || it->second.grad != grad)
        it = t_cast_cache.insert_or_assign(t.impl(), CachedCast{t.impl_ptr(), t.version(), dt, path, grad, lower(t)}).first;
      lowered.push_back(it->second.lowered);
    } else {
      lowered.push_back(lower(t));
    }
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

size_t cached_casts() { return t_cast_cache.size(); }

}  // namespace autocast
}  // namespace strata
