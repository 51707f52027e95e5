#include "core/dtype.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace boostlm {

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf, NaN (payload kept)
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);  // rebias 15 → 127
  } else {
    // Zero or subnormal: mantissa · 2^−24, exact in fp32.
    float value = std::ldexp(static_cast<float>(mantissa), -24);
    std::memcpy(&bits, &value, sizeof bits);
    bits |= sign;
  }
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

uint16_t float_to_half(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((abs >> 13) & 0x3ffu);
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds past 65504: inf
  if (abs < 0x38800000u) {
    // Subnormal (or zero) in fp16: |value| / 2^−24 rounded to nearest even, in integer steps.
    const float scaled = std::fabs(value) * 16777216.0f;  // exact: a power-of-two scale
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  // Normal: rebias the exponent (127 → 15) and round the 13 dropped mantissa bits to even.
  const uint32_t rebased = abs - (112u << 23);
  const uint32_t rounded = rebased + 0x0fffu + ((rebased >> 13) & 1u);
  return sign | static_cast<uint16_t>(rounded >> 13);
}

std::string to_string(DType dtype) {
  return dtype == DType::f32 ? "fp32" : "bf16";
}

DType parse_dtype(const std::string& text) {
  if (text == "fp32" || text == "f32" || text == "float32") return DType::f32;
  if (text == "bf16" || text == "bfloat16") return DType::bf16;
  throw error("unknown precision '", text, "' (expected fp32 or bf16)");
}

double float_as_decimal(float value) {
  if (!std::isfinite(value)) return value;
  char text[64];
  const auto result = std::to_chars(text, text + sizeof text - 1, value);  // shortest, as float
  *result.ptr = '\0';
  return std::strtod(text, nullptr);
}

}  // namespace boostlm
