// The GGUF file format, version 3 (ggml's docs/gguf.md), as llama.cpp reads it:
//
//   "GGUF"  uint32 version = 3  uint64 tensor_count  uint64 kv_count
//   kv_count × { string key, uint32 value_type, value }        typed key/values
//   tensor_count × { string name, uint32 n_dims, uint64 ne[n_dims], uint32 ggml_type,
//                    uint64 offset }                            offset into the data section
//   zero padding to `general.alignment` (32 unless the file says otherwise)
//   tensor data, each tensor at a multiple of the alignment, zero padding between
//
// Everything little-endian; a string is a uint64 byte count and the bytes (no terminator). A
// tensor's dimensions run innermost first (ggml's ne[0] is a row's length), so a row-major [rows,
// cols] matrix is written as ne = {cols, rows} with the same bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace boostlm {

// ggml's tensor types that boostlm writes (values from ggml's enum ggml_type).
enum class GgmlType : uint32_t { f32 = 0, f16 = 1, q8_0 = 8, bf16 = 30 };

const char* to_string(GgmlType type);
// Values per block (1, or 32 for q8_0) and bytes per block (q8_0: an fp16 scale and 32 int8).
int64_t ggml_block_values(GgmlType type);
int64_t ggml_block_bytes(GgmlType type);
// Bytes of `n` values (n a multiple of the block size).
int64_t ggml_bytes(GgmlType type, int64_t n);

// `rows` rows of `row_length` fp32 values, encoded as `type`. f16 and bf16 round to nearest even;
// q8_0 is ggml's block layout (quantize_row_q8_0_ref): per 32 values of a row, d = max|x| / 127
// stored as fp16, then q = roundf(x · (1/d)) as int8 (0 when d = 0). q8_0 needs row_length to be
// a multiple of 32.
std::vector<unsigned char> encode_ggml(const float* values, int64_t rows, int64_t row_length,
                                       GgmlType type);

// GGUF's value types (gguf_metadata_value_type).
enum class GgufValueType : uint32_t {
  uint8 = 0,
  int8 = 1,
  uint16 = 2,
  int16 = 3,
  uint32 = 4,
  int32 = 5,
  float32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  uint64 = 10,
  int64 = 11,
  float64 = 12,
};

class GgufWriter {
 public:
  // `alignment` (a multiple of 8) is written as general.alignment.
  explicit GgufWriter(uint32_t alignment = 32);

  // Key/values in the order given. A key is lower_snake_case segments joined by '.'; adding one
  // twice is a bug (asserted).
  void add_uint32(const std::string& key, uint32_t value);
  void add_int32(const std::string& key, int32_t value);
  void add_uint64(const std::string& key, uint64_t value);
  void add_float32(const std::string& key, float value);
  void add_bool(const std::string& key, bool value);
  void add_string(const std::string& key, const std::string& value);
  void add_string_array(const std::string& key, const std::vector<std::string>& values);
  void add_float32_array(const std::string& key, const std::vector<float>& values);
  void add_int32_array(const std::string& key, const std::vector<int32_t>& values);

  // A tensor of dimensions `ne` (innermost first) and `type`; `encode` gives its bytes when the
  // file is written (one tensor in memory at a time), exactly ggml_bytes(type, Π ne) of them.
  void add_tensor(const std::string& name, std::vector<int64_t> ne, GgmlType type,
                  std::function<std::vector<unsigned char>()> encode);

  // Writes the file atomically (core/file_io.h AtomicFile); returns its size in bytes.
  uint64_t write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
    uint64_t offset, bytes;
    std::function<std::vector<unsigned char>()> encode;
  };
  void begin_kv(const std::string& key, GgufValueType type);

  uint32_t alignment_;
  std::string kv_;  // the serialised key/values
  uint64_t kv_count_ = 0;
  std::set<std::string> keys_;
  std::vector<Tensor> tensors_;
  uint64_t data_bytes_ = 0;  // the data section so far, each tensor padded to the alignment
};

}  // namespace boostlm
