#pragma once
// Emulated cuda_bf16.h: the bf16 storage type and its round-to-nearest-even conversions.

#include <cstdint>
#include <cstring>

struct alignas(2) __nv_bfloat16 {
  std::uint16_t bits;
};

inline float __bfloat162float(__nv_bfloat16 value) {
  const std::uint32_t word = static_cast<std::uint32_t>(value.bits) << 16;
  float result;
  std::memcpy(&result, &word, sizeof(result));
  return result;
}

inline __nv_bfloat16 __float2bfloat16_rn(float value) {
  std::uint32_t word;
  std::memcpy(&word, &value, sizeof(word));
  if ((word & 0x7fffffffu) > 0x7f800000u) return {static_cast<std::uint16_t>((word >> 16) | 0x40)};
  word += 0x7fffu + ((word >> 16) & 1u);
  return {static_cast<std::uint16_t>(word >> 16)};
}

inline __nv_bfloat16 __float2bfloat16(float value) {
  return __float2bfloat16_rn(value);
}
