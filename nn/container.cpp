// Sequential and ModuleList.
#include <strata/nn/container.h>

#include <strata/nn/activation.h>
#include <strata/nn/normalization.h>
#include <strata/nn/pooling.h>

namespace strata::nn {

Sequential::Sequential(const std::vector<std::shared_ptr<Module>>& layers) {
  for (const auto& m : layers) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> m) { register_module(std::to_string(size()), std::move(m)); }

namespace {
bool pool_2x2(const ops::Pool2dParams& p) {
  return p.kernel_h == 2 && p.kernel_w == 2 && p.stride_h == 2 && p.stride_w == 2 && p.pad_h == 0 && p.pad_w == 0;
}
}  // namespace

Tensor Sequential::forward(const Tensor& x) {
  // A BatchNorm2d followed by a ReLU runs as one op (BatchNorm2d::forward_relu: one pass
  // over the activations in forward and one in backward instead of two each), and with a
  // 2x2 stride-2 MaxPool2d after them, on the CPU, the three as one
  // (forward_relu_max_pool2: the ReLU's output never stored). Not when any of them has
  // forward hooks (ZeRO-3 gathers, tracing wrappers), which must see their own calls. The
  // same values and gradients either way.
  Tensor h = x;
  for (size_t i = 0; i < size(); ++i) {
    BatchNorm2d* bn = plain_module<BatchNorm2d>(child_at(i));
    if (bn && i + 1 < size() && plain_module<ReLU>(child_at(i + 1))) {
      const MaxPool2d* pool = i + 2 < size() ? plain_module<MaxPool2d>(child_at(i + 2)) : nullptr;
      const bool with_pool = pool && pool_2x2(pool->params()) && h.device().is_cpu() && h.dim() == 4 &&
                             h.size(2) >= 2 && h.size(3) >= 2;
      h = bn->traced([&] { return with_pool ? bn->forward_relu_max_pool2(h) : bn->forward_relu(h); });
      i += with_pool ? 2 : 1;
      continue;
    }
    h = child_at(i)(h);
  }
  return h;
}

void ModuleList::push_back(std::shared_ptr<Module> m) { register_module(std::to_string(size()), std::move(m)); }

}  // namespace strata::nn
