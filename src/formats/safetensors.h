// The safetensors format (Hugging Face): an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}, then the raw
// little-endian tensor bytes. Readable by PyTorch (safetensors.torch.load_file) and HF tools.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/file_io.h"

namespace boostlm {

struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  const float* data;  // written as F32
};

// Writes atomically (AtomicFile). Returns the checksum of the file's bytes.
uint64_t write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                           const std::map<std::string, std::string>& metadata = {});

// A tensor already in its stored form: dtype "F32", "BF16" or "F16", bytes little-endian.
struct RawTensorToWrite {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const void* data;
};
// As write_safetensors, for tensors in any dtype (the Hugging Face export).
uint64_t write_safetensors_raw(const std::string& path,
                               const std::vector<RawTensorToWrite>& tensors,
                               const std::map<std::string, std::string>& metadata = {});
// Bytes per element of a safetensors dtype (0: a name the format does not define).
size_t safetensors_element_bytes(const std::string& dtype);

class SafetensorsReader {
 public:
  struct Entry {
    std::string dtype;  // "F32" or "BF16" are readable as fp32
    std::vector<int64_t> shape;
    size_t begin = 0, end = 0;  // byte offsets into the data section
  };

  // Maps the file and validates the header; throws Error naming the file on anything malformed:
  // a header that is not JSON or too long, an unknown dtype, a negative or overflowing shape, a
  // byte size that disagrees with shape x dtype, or offsets that overlap, leave gaps, or do not
  // cover the data section exactly (the format packs tensors back to back).
  explicit SafetensorsReader(const std::string& path);
  // The same over a file image in memory (not copied: it must outlive the reader); `source` names
  // it in errors. The fuzz target reads through this.
  SafetensorsReader(const unsigned char* data, size_t size, std::string source);

  const std::map<std::string, Entry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const { return entries_.count(name) > 0; }
  // Copies `name` into out as fp32; throws Error if it is missing, its shape is not `shape`, its
  // dtype is not F32, BF16 or F16 (Hugging Face checkpoints), or it holds NaN or infinite values
  // (a diverged or corrupt save).
  void read(const std::string& name, const std::vector<int64_t>& shape, float* out) const;
  // The stored bytes of an F32 tensor `name` of `numel` elements, in place (mapped, at any
  // alignment): a sharded checkpoint copies the parts it needs from them. Throws Error if it is
  // missing, of another dtype or of another size.
  const unsigned char* f32_bytes(const std::string& name, int64_t numel) const;

 private:
  void parse_header();
  void check_layout() const;

  std::unique_ptr<MappedFile> file_;  // null when reading an image in memory
  std::string source_;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
  size_t data_start_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

std::string shape_string(const std::vector<int64_t>& shape);  // "[2, 3]"

}  // namespace boostlm
