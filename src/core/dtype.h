// Element types. Parameters, gradients, optimizer state and activations are fp32; `bf16` is the
// precision GEMM inputs are rounded to in mixed-precision training (fp32 accumulation).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace boostlm {

enum class DType { f32, bf16 };

std::string to_string(DType dtype);
// Parses "fp32"/"f32"/"float32" and "bf16"/"bfloat16"; throws Error otherwise.
DType parse_dtype(const std::string& text);

using bf16_t = uint16_t;

// Round-to-nearest-even, NaN preserved (matches what hardware conversion instructions do).
inline bf16_t float_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<bf16_t>(bits >> 16);
}

inline float bf16_to_float(bf16_t value) {
  uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// IEEE binary16 (fp16, the third dtype of Hugging Face checkpoints): to fp32 exactly, and from
// fp32 rounding to nearest even (overflow to inf, NaN kept). Not a compute type here.
float half_to_float(uint16_t half);
uint16_t float_to_half(float value);

// The double nearest the shortest decimal that reads back as `value` (1e-6f -> 1e-06, where the
// float widened exactly is 9.999999974752427e-07): what a float field is written as in JSON, so
// that a file says what was written in the config and reads back as the same float.
double float_as_decimal(float value);

}  // namespace boostlm
