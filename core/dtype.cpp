#include <strata/core/dtype.h>

#include <strata/core/error.h>

namespace strata {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
  }
  return "?";
}

DType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "float32" || s == "float") return DType::f32;
  if (s == "f64" || s == "float64" || s == "double") return DType::f64;
  if (s == "f16" || s == "float16" || s == "half") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "i32" || s == "int32") return DType::i32;
  if (s == "i64" || s == "int64") return DType::i64;
  if (s == "u8" || s == "uint8") return DType::u8;
  STRATA_THROW(ConfigError, "unknown dtype '", s, "' (expected f32, f64, f16, bf16, i32, i64 or u8)");
}

std::string Device::str() const {
  return type == DeviceType::CPU ? std::string("cpu") : "cuda:" + std::to_string(index);
}

std::optional<Device> try_parse_device(const std::string& s) {
  if (s == "cpu") return kCPU;
  if (s == "cuda") return Device{DeviceType::CUDA, 0};
  if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.size() <= 9 &&
      s.find_first_not_of("0123456789", 5) == std::string::npos)
    return Device{DeviceType::CUDA, std::stoi(s.substr(5))};
  return std::nullopt;
}

std::string not_a_device(const std::string& s) { return "'" + s + "' is not a device: expected cpu, cuda or cuda:N"; }

Device parse_device(const std::string& s) {
  if (const auto d = try_parse_device(s)) return *d;
  STRATA_THROW(Error, "[device] ", not_a_device(s));
}

}  // namespace strata
