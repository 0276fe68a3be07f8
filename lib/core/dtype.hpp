#pragma once
// Element types. Compute is fp32 (f64 in finite-difference tests); bf16 is a storage type.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace dyncp::core {

enum class DType : std::uint8_t { f32, f64, bf16, i32, i64, u8 };

constexpr std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::bf16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
  }
  return "?";
}

template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct dtype_of<std::int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct dtype_of<std::uint8_t> {
  static constexpr DType value = DType::u8;
};

// bfloat16 <-> float. Rounding to nearest even, NaN kept quiet (as torch does).
inline std::uint16_t float_to_bf16_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  }
  const std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

inline float bf16_bits_to_float(std::uint16_t value) {
  const std::uint32_t bits = static_cast<std::uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

}  // namespace dyncp::core
