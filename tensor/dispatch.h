// The op x device kernel table. Each op family's front end owns one KernelTable per
// kernel signature, filled with the cpu kernel (and the cuda one in CUDA builds).
#pragma once
#include <array>

#include "core/dtype.h"
#include "core/error.h"

namespace strata {

template <class Fn>
struct KernelTable {
  const char* op;
  std::array<Fn*, kNumDeviceTypes> fns;

  Fn* operator()(Device d) const {
    Fn* f = fns[int(d.type)];
    STRATA_CHECK(f != nullptr, "[", op, "] no kernel for device ", d.str(),
                 (d.type == DeviceType::CUDA ? ": this build has no CUDA support" : ""));
    return f;
  }
};

/// Throws unless every tensor is on the same device; returns it.
template <class T0, class... Ts>
Device common_device(const char* op, const T0& t0, const Ts&... ts) {
  const Device d = t0.device();
  for (Device o : {ts.device()...})
    STRATA_CHECK(o == d, "[", op, "] tensors on different devices: ", o.str(), " vs ", d.str());
  return d;
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
