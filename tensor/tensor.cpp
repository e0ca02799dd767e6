#include <strata/tensor/tensor.h>

#include <sstream>
#include <utility>

#include <strata/tensor/ops.h>

namespace strata {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? "," : "") << s[i];
  os << ")";
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (int64_t i = int64_t(s.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= std::max<int64_t>(s[i], 1);
  }
  return st;
}

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  for (auto d : shape) STRATA_CHECK(d >= 0, "[empty] negative dimension in shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(size_t(shape_numel(shape)) * element_size(dtype), device);
  impl->strides = contiguous_strides(shape);
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  impl->device = device;
  return Tensor(std::move(impl));
}

Tensor Tensor::make_view(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset,
                         DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->device = storage->device();
  impl->storage = std::move(storage);
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

void Tensor::dim_out_of_range(int64_t d, const char* what) const {
  STRATA_THROW(Error, "[", what, "] dim ", d, " out of range for shape ", shape_str(shape()));
}

bool Tensor::is_contiguous() const {
  int64_t expect = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (impl_->shape[i] == 1) continue;
    if (impl_->strides[i] != expect) return false;
    expect *= impl_->shape[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  auto* base = static_cast<char*>(impl_->storage->data());
  if (!base && impl_->storage->released())
    STRATA_THROW(Error, "[tensor] the storage of this ", dtype_name(impl_->dtype), " tensor ", shape_str(impl_->shape),
                 " was released (a sharded FSDP parameter used outside forward/backward: gather it first, e.g. "
                 "with summon_full_params)");
  return base ? base + impl_->offset * int64_t(element_size(impl_->dtype)) : nullptr;
}

double Tensor::item_double() const {
  STRATA_CHECK(numel() == 1, "[item] tensor has ", numel(), " elements, expected 1: ", str());
  return ops::to_cpu(*this).to_vector<double>()[0];
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = ops::contiguous(ops::to_cpu(*this));
  if (c.dtype() != dtype_v<T>) c = ops::to_dtype(c, dtype_v<T>);
  const T* p = c.data<T>();
  return std::vector<T>(p, p + c.numel());
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;

std::string Tensor::str() const {
  if (!defined()) return "undefined";
  return std::string(dtype_name(dtype())) + shape_str(shape()) + " " + device().str();
}

Tensor Tensor::to(Device d) const { return ops::to_device(*this, d); }

Tensor& Tensor::set_requires_grad(bool r) {
  STRATA_CHECK(!r || is_floating(dtype()), "[requires_grad] only floating tensors can require grad, got ",
               str());
  STRATA_CHECK(is_leaf(), "[requires_grad] can only be set on a leaf tensor; use detach() first");
  impl_->requires_grad = r;
  return *this;
}

void Tensor::register_post_accumulate_grad_hook(PostAccumulateHook fn) {
  STRATA_CHECK(is_leaf() && requires_grad(),
               "[hook] post-accumulate-grad hooks need a leaf that requires grad: ", str());
  impl_->post_accumulate_hooks.push_back(std::move(fn));
}

Tensor Tensor::detach() const {
  return make_view(impl_->storage, impl_->shape, impl_->strides, impl_->offset, impl_->dtype);
}

}  // namespace strata
