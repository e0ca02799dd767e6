// Sequential and ModuleList.
#include <strata/nn/container.h>

namespace strata::nn {

Sequential::Sequential(const std::vector<std::shared_ptr<Module>>& layers) {
  for (const auto& m : layers) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> m) { register_module(std::to_string(size()), std::move(m)); }

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (size_t i = 0; i < size(); ++i) h = child_at(i)(h);
  return h;
}

void ModuleList::push_back(std::shared_ptr<Module> m) { register_module(std::to_string(size()), std::move(m)); }

}  // namespace strata::nn
