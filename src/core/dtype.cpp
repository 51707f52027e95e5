#include "core/dtype.h"

#include "core/error.h"

namespace boostlm {

std::string to_string(DType dtype) {
  return dtype == DType::f32 ? "fp32" : "bf16";
}

DType parse_dtype(const std::string& text) {
  if (text == "fp32" || text == "f32" || text == "float32") return DType::f32;
  if (text == "bf16" || text == "bfloat16") return DType::bf16;
  throw error("unknown precision '", text, "' (expected fp32 or bf16)");
}

}  // namespace boostlm
