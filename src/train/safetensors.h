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

class SafetensorsReader {
 public:
  struct Entry {
    std::string dtype;  // "F32" or "BF16" are readable as fp32
    std::vector<int64_t> shape;
    size_t begin = 0, end = 0;  // byte offsets into the data section
  };

  // Maps the file and validates the header; throws Error naming the file on anything malformed.
  explicit SafetensorsReader(const std::string& path);

  const std::map<std::string, Entry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const { return entries_.count(name) > 0; }
  // Copies `name` into out as fp32; throws Error if it is missing or its shape is not `shape`.
  void read(const std::string& name, const std::vector<int64_t>& shape, float* out) const;

 private:
  std::unique_ptr<MappedFile> file_;
  size_t data_start_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

std::string shape_string(const std::vector<int64_t>& shape);  // "[2, 3]"

}  // namespace boostlm
