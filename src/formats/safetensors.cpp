#include "formats/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>

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

namespace {

// A header longer than this is refused before it is parsed (safetensors' own reader has the same
// limit): real headers are a few hundred bytes per tensor.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

// Bytes per element of every safetensors dtype; 0 for a name the format does not define.
size_t dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

// A JSON array of whole numbers as int64_t, or nothing: nlohmann's get<> converts a float (a
// dimension written 1e75, or an integer too long for 64 bits, parses as one) by a C++ cast,
// undefined behaviour outside the target's range, so every element is checked first.
std::optional<std::vector<int64_t>> whole_numbers(const nlohmann::json& array) {
  if (!array.is_array()) return std::nullopt;
  std::vector<int64_t> out;
  for (const auto& v : array) {
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return std::nullopt;
      out.push_back(static_cast<int64_t>(v.get<uint64_t>()));
    } else if (v.is_number_integer()) {
      out.push_back(v.get<int64_t>());
    } else {
      return std::nullopt;
    }
  }
  return out;
}

// shape's element count times `element` bytes, or nothing on a negative dimension or overflow.
std::optional<size_t> byte_size(const std::vector<int64_t>& shape, size_t element) {
  size_t bytes = element;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes))
      return std::nullopt;
  }
  return bytes;
}

}  // namespace

SafetensorsReader::SafetensorsReader(const std::string& path)
    : file_(std::make_unique<MappedFile>(path)),
      source_(path),
      data_(file_->data()),
      size_(file_->size()) {
  parse_header();
}

SafetensorsReader::SafetensorsReader(const unsigned char* data, size_t size, std::string source)
    : source_(std::move(source)), data_(data), size_(size) {
  parse_header();
}

void SafetensorsReader::parse_header() {
  auto bad = [&](const std::string& why) {
    return error(source_, ": not a valid safetensors file: ", why);
  };
  if (size_ < 8) throw bad("shorter than its 8-byte header length");
  uint64_t header_size;
  std::memcpy(&header_size, data_, 8);
  if (header_size > size_ - 8)
    throw bad("header length " + std::to_string(header_size) + " exceeds the file size");
  if (header_size > kMaxHeaderBytes)
    throw bad("header length " + std::to_string(header_size) + " exceeds the format's 100 MB");
  data_start_ = 8 + header_size;
  const size_t data_size = size_ - data_start_;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(data_ + 8, data_ + data_start_);
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
      const auto shape = whole_numbers(value.at("shape"));
      if (!shape)
        throw bad("tensor '" + name + "' has a shape that is not a list of whole numbers");
      e.shape = *shape;
      const auto offsets = whole_numbers(value.at("data_offsets"));
      if (!offsets || offsets->size() != 2 || (*offsets)[0] < 0 || (*offsets)[0] > (*offsets)[1])
        throw bad("tensor '" + name + "' has data_offsets that are not [begin, end]");
      const size_t element = dtype_bytes(e.dtype);
      if (!element)
        throw bad("tensor '" + name + "' has unknown dtype '" + e.dtype +
                  "' (safetensors defines BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, "
                  "I32, U32, F32, F64, I64, U64)");
      e.begin = static_cast<size_t>((*offsets)[0]);
      e.end = static_cast<size_t>((*offsets)[1]);
      if (e.end > data_size)
        throw bad("tensor '" + name + "' lies outside the file (truncated?): it ends at byte " +
                  std::to_string(e.end) + " of a " + std::to_string(data_size) +
                  "-byte data section");
      const auto expected = byte_size(e.shape, element);
      if (!expected)
        throw bad("tensor '" + name + "' has an impossible shape " + shape_string(e.shape));
      if (e.end - e.begin != *expected)
        throw bad("tensor '" + name + "' has " + std::to_string(e.end - e.begin) +
                  " bytes, but shape " + shape_string(e.shape) + " of " + e.dtype + " needs " +
                  std::to_string(*expected));
      entries_[name] = std::move(e);
    } catch (const nlohmann::json::exception& ex) {
      throw bad("entry '" + name + "' is malformed (" + ex.what() + ")");
    }
  }
  check_layout();
}

// The format packs tensors back to back: sorted by offset, each starts where the previous one
// ends and the last ends at the end of the file. Anything else is a corrupt or hand-made header
// (overlapping tensors would alias each other's bytes).
void SafetensorsReader::check_layout() const {
  std::vector<const std::pair<const std::string, Entry>*> order;
  for (const auto& entry : entries_) order.push_back(&entry);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return std::tie(a->second.begin, a->second.end) < std::tie(b->second.begin, b->second.end);
  });
  auto bad = [&](const auto&... why) {
    return error(source_, ": not a valid safetensors file: ", why...);
  };
  size_t offset = 0;
  std::string previous = "the header";
  for (const auto* entry : order) {
    const auto& [name, e] = *entry;
    if (e.begin < offset)
      throw bad("tensor '", name, "' (bytes ", e.begin, "..", e.end, ") overlaps ", previous,
                " (ending at byte ", offset, ")");
    if (e.begin > offset)
      throw bad("tensor '", name, "' starts at byte ", e.begin, ", leaving a gap of ",
                e.begin - offset, " bytes after ", previous, " (tensors must be contiguous)");
    offset = e.end;
    previous = "tensor '" + name + "'";
  }
  const size_t data_size = size_ - data_start_;
  if (offset != data_size)
    throw bad(data_size - offset, " bytes after the last tensor that no tensor describes");
}

const unsigned char* SafetensorsReader::f32_bytes(const std::string& name, int64_t n) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw error(source_, ": missing tensor '", name, "'");
  const Entry& e = it->second;
  if (e.dtype != "F32")
    throw error(source_, ": tensor '", name, "' has dtype ", e.dtype, ", expected F32");
  if (numel(e.shape) != n)
    throw error(source_, ": tensor '", name, "' has shape ", shape_string(e.shape), ", expected ",
                n, " elements");
  return data_ + data_start_ + e.begin;
}

void SafetensorsReader::read(const std::string& name, const std::vector<int64_t>& shape,
                             float* out) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw error(source_, ": missing tensor '", name, "'");
  const Entry& e = it->second;
  if (e.shape != shape)
    throw error(source_, ": tensor '", name, "' has shape ", shape_string(e.shape), ", expected ",
                shape_string(shape));
  const unsigned char* src = data_ + data_start_ + e.begin;
  const int64_t n = numel(shape);
  if (e.dtype == "F32") {
    // An empty tensor may come with a null `out`, which memcpy must not see even for 0 bytes
    // (found by fuzz_safetensors).
    if (n > 0) std::memcpy(out, src, static_cast<size_t>(n) * sizeof(float));
  } else if (e.dtype == "BF16" || e.dtype == "F16") {  // (F16: Hugging Face checkpoints)
    const bool bf16 = e.dtype == "BF16";
    for (int64_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, src + 2 * i, 2);
      out[i] = bf16 ? bf16_to_float(v) : half_to_float(v);
    }
  } else {
    throw error(source_, ": tensor '", name, "' has dtype ", e.dtype,
                ", which boostlm cannot read (it reads F32, BF16 and F16)");
  }
  int64_t non_finite = 0;
  for (int64_t i = 0; i < n; ++i) non_finite += !std::isfinite(out[i]);
  if (non_finite)
    throw error(source_, ": tensor '", name, "' holds ", non_finite, " non-finite values (NaN or ",
                "inf) among its ", n, ": it was saved from a diverged run or is corrupt");
}

}  // namespace boostlm

namespace boostlm {

size_t safetensors_element_bytes(const std::string& dtype) {
  return dtype_bytes(dtype);
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

}  // namespace boostlm
