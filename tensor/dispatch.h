// The op x device kernel table. Each op family's front end owns one KernelTable per
// kernel signature, filled with the cpu kernel. A backend compiled into the build (the
// CUDA kernels in tensor/cuda/) registers its kernels under the table's op name; a
// table looks an empty slot up there, so front ends never name backend functions.
#pragma once
#include <array>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include <strata/core/dtype.h>
#include <strata/core/error.h>
#include <strata/tensor/cpu/op_profile.h>

namespace strata {

namespace detail {
using AnyKernel = void (*)();
/// Registers `fn` (whose real type is `type`) as the kernel of `op` on device type t.
/// Re-registering replaces the previous entry. Thread-safe.
void register_kernel(const char* op, DeviceType t, const std::type_info& type, AnyKernel fn);
/// The kernel registered for (op, t), loading t's backend first (CUDA registers lazily);
/// nullptr when none. Throws when it was registered with a different signature.
AnyKernel find_kernel(const char* op, DeviceType t, const std::type_info& type);
}  // namespace detail

/// Registers a backend kernel for `op` (the KernelTable's op name) on device type t.
template <class Fn>
void register_kernel(const char* op, DeviceType t, Fn* fn) {
  detail::register_kernel(op, t, typeid(Fn), reinterpret_cast<detail::AnyKernel>(fn));
}

/// Op names with a kernel registered for device type t, sorted (for tests and `strata info`).
std::vector<std::string> registered_kernels(DeviceType t);

/// A kernel looked up in a KernelTable, called through: while `strata bench train --ops`
/// records (cpu::op_profile), each call is one timed scope named after the table's op
/// (with the op enum's value for the kernels whose first argument selects the op:
/// binary, unary, ...);
/// otherwise the check is one relaxed atomic load.
template <class Fn>
struct ProfiledKernel;
template <class R, class... A>
struct ProfiledKernel<R(A...)> {
  R (*fn)(A...);
  const char* op;
  R operator()(A... a) const {
    if (!cpu::op_profile::enabled()) return fn(std::forward<A>(a)...);
    cpu::op_profile::Scope s(op, sub_of(a...));
    return fn(std::forward<A>(a)...);
  }

 private:
  static int sub_of() { return -1; }
  template <class T, class... Rest>
  static int sub_of(const T& t, const Rest&...) {
    if constexpr (std::is_enum_v<T> && !std::is_same_v<T, DType>) return int(t);  // the op, not the dtype
    else return -1;
  }
};

template <class Fn>
struct KernelTable {
  const char* op;
  std::array<Fn*, kNumDeviceTypes> fns;

  /// The table's own kernel for d, else the one a backend registered under `op`, else nullptr.
  Fn* find(Device d) const {
    if (Fn* f = fns[int(d.type)]) return f;
    return reinterpret_cast<Fn*>(detail::find_kernel(op, d.type, typeid(Fn)));
  }

  ProfiledKernel<Fn> operator()(Device d) const {
    Fn* f = find(d);
    STRATA_CHECK(f != nullptr, "[", op, "] no kernel for device ", d.str(),
                 (d.type == DeviceType::CUDA ? kNoCudaKernelHint : ""));
    return {f, op};
  }

 private:
#ifdef STRATA_WITH_CUDA
  static constexpr const char* kNoCudaKernelHint = ": the CUDA backend has no kernel for this op yet";
#else
  static constexpr const char* kNoCudaKernelHint = ": this build has no CUDA support (rebuild with STRATA_CUDA=ON)";
#endif
};

[[noreturn]] void throw_devices_differ(const char* op, Device expected, std::initializer_list<Device> got);

/// Throws unless every tensor is on the same device; returns it. The check inlines to a
/// compare per operand (every op's front end runs it).
template <class T0, class... Ts>
Device common_device(const char* op, const T0& t0, const Ts&... ts) {
  const Device d = t0.device();
  if (((ts.device() != d) || ...)) [[unlikely]]
    throw_devices_differ(op, d, {ts.device()...});
  return d;
}

/// Whether an op writes its result over its input t, which the caller hands over (`handed`:
/// nothing else will read t): on the CPU, and only over a contiguous t. There a fresh output
/// block (the caching allocator's, last used a step earlier) has each line read in from
/// memory before its stores, where t's lines are the ones the op has just read; GPU stores
/// do not read lines in, so there the ops allocate as usual.
template <class TensorT>
bool writes_over(const TensorT& t, bool handed) {
  return handed && t.device().is_cpu() && t.is_contiguous();
}

/// Index tensors are i64 or i32: calls f(int64_t{}) or f(int32_t{}) (a tag carrying the
/// index type), else throws naming `op`. Shared by the CPU and CUDA index kernels.
template <class TensorT, class F>
void dispatch_index(const TensorT& idx, const char* op, F&& f) {
  switch (idx.dtype()) {
    case DType::i64: return f(int64_t{});
    case DType::i32: return f(int32_t{});
    default: STRATA_THROW(Error, "[", op, "] index must be i64 or i32, got ", dtype_name(idx.dtype()));
  }
}

/// Calls f.template operator()<T>() with T the C++ type of a floating dtype (f32/f64).
#define STRATA_DISPATCH_FLOAT(dtype, op, ...)                                                          \
  [&] {                                                                                                \
    switch (dtype) {                                                                                   \
      case ::strata::DType::f32: { using scalar_t = float; return __VA_ARGS__(); }                     \
      case ::strata::DType::f64: { using scalar_t = double; return __VA_ARGS__(); }                    \
      default:                                                                                         \
        STRATA_THROW(Error, "[", op, "] unsupported dtype ", ::strata::dtype_name(dtype),              \
                     " (expected f32 or f64)");                                                        \
    }                                                                                                  \
  }()

/// As STRATA_DISPATCH_FLOAT plus the integer dtypes i32, i64, u8.
#define STRATA_DISPATCH_ALL(dtype, op, ...)                                                            \
  [&] {                                                                                                \
    switch (dtype) {                                                                                   \
      case ::strata::DType::f32: { using scalar_t = float; return __VA_ARGS__(); }                     \
      case ::strata::DType::f64: { using scalar_t = double; return __VA_ARGS__(); }                    \
      case ::strata::DType::i32: { using scalar_t = int32_t; return __VA_ARGS__(); }                   \
      case ::strata::DType::i64: { using scalar_t = int64_t; return __VA_ARGS__(); }                   \
      case ::strata::DType::u8: { using scalar_t = uint8_t; return __VA_ARGS__(); }                    \
      default:                                                                                         \
        STRATA_THROW(Error, "[", op, "] unsupported dtype ", ::strata::dtype_name(dtype));             \
    }                                                                                                  \
  }()

}  // namespace strata
