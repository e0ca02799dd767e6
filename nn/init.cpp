// Parameter initialisers on top of the generator-driven ops::uniform / ops::normal.
#include <strata/nn/init.h>

#include <cmath>

namespace strata::nn::init {

Tensor uniform(const Shape& shape, double bound, Generator& gen) {
  MemoryScope scope(MemCategory::params);
  return ops::uniform(shape, -bound, bound, gen);
}

Tensor normal(const Shape& shape, double std, Generator& gen) {
  MemoryScope scope(MemCategory::params);
  return ops::normal(shape, 0.0, std, gen);
}

Tensor zeros(const Shape& shape) { return full(shape, 0.0); }

Tensor full(const Shape& shape, double value) {
  MemoryScope scope(MemCategory::params);
  return ops::full(shape, value);
}

Tensor kaiming_uniform_default(const Shape& shape, int64_t fan_in, Generator& gen) {
  STRATA_CHECK(fan_in > 0, "[init] fan_in must be positive, got ", fan_in, " for shape ", shape_str(shape));
  return uniform(shape, 1.0 / std::sqrt(double(fan_in)), gen);
}

void normal_(Tensor& t, double mean, double std, Generator& gen) {
  Tensor src = ops::normal(t.shape(), mean, std, gen, t.dtype());
  ops::copy_(t, src);
}

}  // namespace strata::nn::init
