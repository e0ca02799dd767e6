// Creation, copy and conversion front ends.
#include <cmath>
#include <utility>

#include <strata/tensor/cpu/copy.h>
#include <strata/tensor/dispatch.h>
#include <strata/tensor/ops.h>

namespace strata::ops {
namespace {
using CopyFn = void(Tensor&, const Tensor&);
using FillFn = void(Tensor&, double);
using RandFn = void(Tensor&, double, double, const Generator&, uint64_t);
const KernelTable<CopyFn> kCopy{"copy", {&cpu::copy_kernel, nullptr}};
const KernelTable<FillFn> kFill{"fill", {&cpu::fill_kernel, nullptr}};
const KernelTable<RandFn> kUniform{"uniform", {&cpu::uniform_kernel, nullptr}};
const KernelTable<RandFn> kNormal{"normal", {&cpu::normal_kernel, nullptr}};
// Copies between devices; run by the non-CPU side's backend (out is contiguous).
const KernelTable<CopyFn> kTransfer{"to_device", {nullptr, nullptr}};
}  // namespace

Tensor empty(Shape shape, DType dtype, Device device) { return Tensor::empty(std::move(shape), dtype, device); }

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  kFill(device)(t, value);
  return t;
}
Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype(), t.device()); }

Tensor arange(double start, double end, double step, DType dtype) {
  STRATA_CHECK(step != 0, "[arange] step must be nonzero");
  const int64_t n = std::max<int64_t>(0, int64_t(std::ceil((end - start) / step)));
  Tensor t = Tensor::empty({n}, DType::f64);
  double* p = t.data<double>();
  for (int64_t i = 0; i < n; ++i) p[i] = start + double(i) * step;
  return dtype == DType::f64 ? t : to_dtype(t, dtype);
}

Tensor causal_mask(int64_t t) {
  Tensor mask = Tensor::empty({t, t}, DType::u8);
  uint8_t* m = mask.data<uint8_t>();
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < t; ++j) m[i * t + j] = j > i;
  return mask;
}

template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
  STRATA_CHECK(int64_t(values.size()) == shape_numel(shape), "[from_vector] ", values.size(),
               " values do not fill shape ", shape_str(shape));
  Tensor t = Tensor::empty(shape, dtype_v<T>);
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}
template Tensor from_vector<float>(const std::vector<float>&, const Shape&);
template Tensor from_vector<double>(const std::vector<double>&, const Shape&);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, const Shape&);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, const Shape&);
template Tensor from_vector<uint8_t>(const std::vector<uint8_t>&, const Shape&);

Tensor uniform(const Shape& shape, double lo, double hi, Generator& gen, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  kUniform(t.device())(t, lo, hi, gen, gen.reserve(uint64_t(t.numel())));
  return t;
}

Tensor normal(const Shape& shape, double mean, double std, Generator& gen, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  kNormal(t.device())(t, mean, std, gen, gen.reserve(uint64_t(t.numel())));
  return t;
}

void copy_(Tensor& dst, const Tensor& src) {
  STRATA_CHECK(broadcast_shapes(dst.shape(), src.shape()) == dst.shape(), "[copy_] cannot broadcast ",
               shape_str(src.shape()), " to ", shape_str(dst.shape()));
  if (dst.device() == src.device()) {
    kCopy(dst.device())(dst, src);
  } else if (dst.is_contiguous() && dst.dtype() == src.dtype() && dst.shape() == src.shape()) {
    kTransfer(dst.device().is_cpu() ? src.device() : dst.device())(dst, src);  // straight into dst
  } else {
    kCopy(dst.device())(dst, to_device(src, dst.device()));  // move, then convert/broadcast/stride there
  }
  dst.bump_version();
}

void fill_(Tensor& t, double value) {
  kFill(t.device())(t, value);
  t.bump_version();
}

Tensor clone(const Tensor& t) {
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  kCopy(t.device())(out, t);
  return out;
}

Tensor contiguous(const Tensor& t) { return t.is_contiguous() ? t : clone(t); }
Tensor contig_or_undef(const Tensor& t) { return t.defined() ? contiguous(t) : t; }

Tensor to_dtype(const Tensor& t, DType d) {
  if (t.dtype() == d) return t;
  Tensor out = Tensor::empty(t.shape(), d, t.device());
  kCopy(t.device())(out, t);
  return out;
}

Tensor to_cpu(const Tensor& t) { return to_device(t, kCPU); }

Tensor to_device(const Tensor& t, Device d) {
  STRATA_CHECK(t.defined(), "[to_device] input is an undefined tensor");
  if (t.device() == d) return t;
  Tensor out = Tensor::empty(t.shape(), t.dtype(), d);
  kTransfer(d.is_cpu() ? t.device() : d)(out, t);
  return out;
}

}  // namespace strata::ops
