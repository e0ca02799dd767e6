// Element types and devices: the two tags every Tensor carries.
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include <strata/core/error.h>
#include <strata/core/half_bits.h>

namespace strata {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8 };

constexpr size_t element_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}
const char* dtype_name(DType t);
/// Parses "f32", "float32", "bf16", ...; throws ConfigError naming the value otherwise.
DType parse_dtype(const std::string& s);
constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };
constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  bool operator==(const Device&) const = default;
  bool is_cpu() const { return type == DeviceType::CPU; }
  std::string str() const;
};
inline constexpr Device kCPU{};
/// "cpu", "cuda" (= cuda:0) or "cuda:N" -> Device; nullopt for anything else. Says
/// nothing about whether the device exists.
std::optional<Device> try_parse_device(const std::string& s);
/// The error text for a string that is not a device: "'s' is not a device: expected cpu,
/// cuda or cuda:N" (config loaders put it behind the key path).
std::string not_a_device(const std::string& s);
/// try_parse_device, throwing Error "[device] " + not_a_device(s) for anything else.
Device parse_device(const std::string& s);

/// 16-bit float types are storage formats: kernels compute in f32 and convert.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};
inline float half_to_float(uint16_t h) { return half_bits_to_float(h); }
inline uint16_t float_to_half(float f) { return float_to_half_bits(f); }
inline float bf16_to_float(uint16_t b) { return bf16_bits_to_float(b); }
inline uint16_t float_to_bf16(float f) { return float_to_bf16_bits(f); }

/// Maps a C++ type to its DType tag.
template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };
template <class T> inline constexpr DType dtype_v = dtype_of<T>::value;

/// Calls f(T{}) with T the C++ element type of `t` (all seven dtypes) and returns its result.
template <class F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::f16: return f(Half{});
    case DType::bf16: return f(BFloat16{});
    case DType::i32: return f(int32_t{});
    case DType::i64: return f(int64_t{});
    case DType::u8: return f(uint8_t{});
  }
  STRATA_THROW(Error, "[visit_dtype] invalid dtype tag ", int(t));
}

}  // namespace strata
