// MaxPool2d / AvgPool2d: window settings around the differentiable pooling ops.
#include <strata/nn/pooling.h>

namespace strata::nn {
namespace {
ops::Pool2dParams pool_params(const char* op, int64_t k, int64_t stride, int64_t padding) {
  if (stride <= 0) stride = k;
  STRATA_CHECK(k > 0 && padding >= 0 && 2 * padding <= k, "[", op, "] bad window: kernel=", k, " stride=", stride,
               " padding=", padding, " (padding must be at most half the kernel)");
  return {k, k, stride, stride, padding, padding};
}
}  // namespace

MaxPool2d::MaxPool2d(int64_t kernel_size, int64_t stride, int64_t padding)
    : p_(pool_params("MaxPool2d", kernel_size, stride, padding)) {}
Tensor MaxPool2d::forward(const Tensor& x) { return strata::max_pool2d(x, p_); }

AvgPool2d::AvgPool2d(int64_t kernel_size, int64_t stride, int64_t padding)
    : p_(pool_params("AvgPool2d", kernel_size, stride, padding)) {}
Tensor AvgPool2d::forward(const Tensor& x) { return strata::avg_pool2d(x, p_); }

}  // namespace strata::nn
