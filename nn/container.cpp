// Sequential and ModuleList.
#include <strata/nn/container.h>

#include <typeinfo>

#include <strata/nn/activation.h>
#include <strata/nn/normalization.h>

namespace strata::nn {

Sequential::Sequential(const std::vector<std::shared_ptr<Module>>& layers) {
  for (const auto& m : layers) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> m) { register_module(std::to_string(size()), std::move(m)); }

namespace {
// child is exactly T (not a subclass that may override forward) and has no forward hooks.
template <class T>
T* plain(Module& m) {
  return typeid(m) == typeid(T) && !m.has_forward_hooks() ? static_cast<T*>(&m) : nullptr;
}
}  // namespace

Tensor Sequential::forward(const Tensor& x) {
  // A BatchNorm2d followed by a ReLU runs as one op (BatchNorm2d::forward_relu: one pass
  // over the activations in forward and one in backward instead of two each), unless either
  // has forward hooks (ZeRO-3 gathers, tracing wrappers), which must see their own calls.
  // The same values and gradients either way.
  Tensor h = x;
  for (size_t i = 0; i < size(); ++i) {
    BatchNorm2d* bn = plain<BatchNorm2d>(child_at(i));
    if (bn && i + 1 < size() && plain<ReLU>(child_at(i + 1))) {
      h = bn->traced([&] { return bn->forward_relu(h); });
      ++i;
      continue;
    }
    h = child_at(i)(h);
  }
  return h;
}

void ModuleList::push_back(std::shared_ptr<Module> m) { register_module(std::to_string(size()), std::move(m)); }

}  // namespace strata::nn
