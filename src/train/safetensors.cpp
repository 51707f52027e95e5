#include "train/safetensors.h"

#include <cstring>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"

namespace boostlm {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {
int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
}  // namespace

uint64_t write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                           const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& t : tensors) {
    const size_t bytes = static_cast<size_t>(numel(t.shape)) * sizeof(float);
    header[t.name] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the format pads the header with spaces
  const uint64_t header_size = text.size();     // little-endian on every machine we target
  AtomicFile file(path);
  file.write(&header_size, sizeof header_size);
  file.write(text);
  for (const auto& t : tensors)
    file.write(t.data, static_cast<size_t>(numel(t.shape)) * sizeof(float));
  const uint64_t checksum = file.checksum();
  file.commit();
  return checksum;
}

SafetensorsReader::SafetensorsReader(const std::string& path)
    : file_(std::make_unique<MappedFile>(path)) {
  auto bad = [&](const std::string& why) {
    return error(path, ": not a valid safetensors file: ", why);
  };
  if (file_->size() < 8) throw bad("shorter than its 8-byte header length");
  uint64_t header_size;
  std::memcpy(&header_size, file_->data(), 8);
  if (header_size > file_->size() - 8) throw bad("header length exceeds the file size");
  data_start_ = 8 + header_size;
  const size_t data_size = file_->size() - data_start_;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(file_->data() + 8, file_->data() + data_start_);
  } catch (const nlohmann::json::exception& e) {
    throw bad(std::string("header is not JSON (") + e.what() + ")");
  }
  if (!header.is_object()) throw bad("header is not a JSON object");
  for (const auto& [name, value] : header.items()) {
    try {
      if (name == "__metadata__") {
        for (const auto& [k, v] : value.items()) metadata_[k] = v.get<std::string>();
        continue;
      }
      Entry e;
      e.dtype = value.at("dtype").get<std::string>();
      e.shape = value.at("shape").get<std::vector<int64_t>>();
      const auto offsets = value.at("data_offsets").get<std::vector<size_t>>();
      if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > data_size)
        throw bad("tensor '" + name + "' lies outside the file (truncated?)");
      e.begin = offsets[0];
      e.end = offsets[1];
      const size_t element = e.dtype == "F32" ? 4 : (e.dtype == "BF16" || e.dtype == "F16") ? 2 : 0;
      if (element && e.end - e.begin != static_cast<size_t>(numel(e.shape)) * element)
        throw bad("tensor '" + name + "' has " + std::to_string(e.end - e.begin) +
                  " bytes for shape " + shape_string(e.shape));
      entries_[name] = std::move(e);
    } catch (const nlohmann::json::exception& ex) {
      throw bad("entry '" + name + "' is malformed (" + ex.what() + ")");
    }
  }
}

void SafetensorsReader::read(const std::string& name, const std::vector<int64_t>& shape,
                             float* out) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw error(file_->path(), ": missing tensor '", name, "'");
  const Entry& e = it->second;
  if (e.shape != shape)
    throw error(file_->path(), ": tensor '", name, "' has shape ", shape_string(e.shape),
                ", expected ", shape_string(shape));
  const unsigned char* src = file_->data() + data_start_ + e.begin;
  const int64_t n = numel(shape);
  if (e.dtype == "F32") {
    std::memcpy(out, src, static_cast<size_t>(n) * sizeof(float));
  } else if (e.dtype == "BF16") {
    for (int64_t i = 0; i < n; ++i) {
      bf16_t v;
      std::memcpy(&v, src + 2 * i, 2);
      out[i] = bf16_to_float(v);
    }
  } else {
    throw error(file_->path(), ": tensor '", name, "' has dtype ", e.dtype,
                " (boostlm reads F32 and BF16)");
  }
}

}  // namespace boostlm

namespace boostlm {

size_t safetensors_element_bytes(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  return 0;
}

uint64_t write_safetensors_raw(const std::string& path,
                               const std::vector<RawTensorToWrite>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  std::vector<size_t> sizes;
  for (const auto& t : tensors) {
    const size_t element = safetensors_element_bytes(t.dtype);
    BOOSTLM_ASSERT_MSG(element > 0, "unsupported safetensors dtype");
    sizes.push_back(static_cast<size_t>(numel(t.shape)) * element);
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + sizes.back()}}};
    offset += sizes.back();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_size = text.size();
  AtomicFile file(path);
  file.write(&header_size, sizeof header_size);
  file.write(text);
  for (size_t i = 0; i < tensors.size(); ++i) file.write(tensors[i].data, sizes[i]);
  const uint64_t checksum = file.checksum();
  file.commit();
  return checksum;
}

const unsigned char* SafetensorsReader::bytes(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw error(file_->path(), ": missing tensor '", name, "'");
  return file_->data() + data_start_ + it->second.begin;
}

}  // namespace boostlm
