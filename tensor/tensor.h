// Tensor: a cheap handle (shared TensorImpl) over shape, strides, offset, dtype,
// device and a shared Storage. Views share storage. The autograd fields live here as
// plain data; the graph machinery that uses them is in autograd/.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <strata/core/dtype.h>
#include <strata/core/error.h>
#include <strata/tensor/storage.h>

namespace strata {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);
Shape contiguous_strides(const Shape& s);

class Node;  // autograd/node.h
class Tensor;

/// Called after a leaf's .grad has been accumulated in backward (DDP/ZeRO hooks).
using PostAccumulateHook = std::function<void(Tensor&)>;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;  // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  Device device;

  // --- autograd state (used by autograd/) ---
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;      // accumulated gradient of a leaf
  std::shared_ptr<Node> grad_fn;         // producer node of a non-leaf
  std::shared_ptr<Node> grad_accumulator;  // cached AccumulateGrad of a leaf
  std::vector<PostAccumulateHook> post_accumulate_hooks;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  /// A new contiguous, uninitialised tensor. The shape is taken by value: a temporary (a
  /// braced list, as most ops' outputs) moves into the tensor instead of being copied.
  static Tensor empty(Shape shape, DType dtype = DType::f32, Device device = kCPU);
  /// A view over existing storage.
  static Tensor make_view(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset,
                          DType dtype);

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  const Shape& shape() const { return impl_->shape; }
  const Shape& strides() const { return impl_->strides; }
  int64_t offset() const { return impl_->offset; }
  int64_t dim() const { return int64_t(impl_->shape.size()); }
  /// Size of dimension d; negative d counts from the end. Inline: the GEMM and kernel
  /// front ends call these per operand, and a tiny op's whole overhead is a few of them.
  int64_t size(int64_t d) const { return impl_->shape[size_t(wrap(d, "size"))]; }
  int64_t stride(int64_t d) const { return impl_->strides[size_t(wrap(d, "stride"))]; }
  int64_t numel() const { return shape_numel(impl_->shape); }
  int64_t nbytes() const { return numel() * int64_t(element_size(impl_->dtype)); }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->device; }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return impl_->storage; }
  /// True when both tensors view the same Storage.
  bool shares_storage(const Tensor& o) const { return defined() && o.defined() && storage() == o.storage(); }

  /// Pointer to element 0 (storage + offset). Checks that T matches dtype.
  template <class T>
  T* data() const {
    STRATA_CHECK(dtype_v<T> == impl_->dtype, "[data] tensor is ", dtype_name(impl_->dtype), ", asked for ",
                 dtype_name(dtype_v<T>));
    return static_cast<T*>(raw_data());
  }
  /// data<T>(), or null for an undefined tensor (an optional weight, bias or gradient).
  template <class T>
  T* data_or_null() const {
    return defined() ? data<T>() : nullptr;
  }
  void* raw_data() const;

  /// Value of a one-element tensor as T (any dtype converts).
  template <class T>
  T item() const {
    return static_cast<T>(item_double());
  }
  double item_double() const;
  /// Copy of the elements in logical (row-major) order, converted to T.
  template <class T>
  std::vector<T> to_vector() const;

  std::string str() const;  // short description: "f32[2, 3] cpu"

  /// This tensor on device d: itself when already there, else a contiguous copy
  /// (host <-> CUDA or CUDA <-> CUDA; ops::to_device). A copy to the CPU is complete
  /// when it returns; a copy to a GPU is ordered on the destination's current stream.
  Tensor to(Device d) const;

  // --- autograd accessors ---
  bool requires_grad() const { return impl_->requires_grad; }
  /// Marks a leaf as requiring grad. Returns *this for chaining.
  Tensor& set_requires_grad(bool r);
  Tensor grad() const { return impl_->grad ? Tensor(impl_->grad) : Tensor(); }
  void set_grad(const Tensor& g) { impl_->grad = g.impl_; }
  const std::shared_ptr<Node>& grad_fn() const { return impl_->grad_fn; }
  bool is_leaf() const { return impl_->grad_fn == nullptr; }
  /// Registers fn to run after backward accumulated this leaf's .grad.
  void register_post_accumulate_grad_hook(PostAccumulateHook fn);
  /// A tensor sharing storage with no autograd history.
  Tensor detach() const;
  /// In-place ops bump the version of the storage (shared by all views);
  /// saved tensors check it in backward.
  uint32_t version() const { return impl_->storage->version(); }
  void bump_version() const { impl_->storage->bump_version(); }

 private:
  int64_t wrap(int64_t d, const char* what) const {
    const int64_t n = dim();
    if (d < 0) d += n;
    if (d < 0 || d >= n) [[unlikely]] dim_out_of_range(d, what);
    return d;
  }
  [[noreturn]] void dim_out_of_range(int64_t d, const char* what) const;

  std::shared_ptr<TensorImpl> impl_;
};

}  // namespace strata
