#include "formats/gguf_writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"
#include "core/file_io.h"

namespace boostlm {

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr uint32_t kGgufVersion = 3;
constexpr int64_t kQ8Block = 32;  // ggml's QK8_0

template <class T>
void put(std::string& out, T value) {
  static_assert(std::is_trivially_copyable_v<T>);
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

uint64_t padded(uint64_t offset, uint64_t alignment) {
  return offset + (alignment - offset % alignment) % alignment;
}

// One q8_0 block (block_q8_0: ggml_half d; int8_t qs[32]) as ggml's reference quantizer makes it.
void quantize_q8_0_block(const float* x, unsigned char* out) {
  float amax = 0.0f;
  for (int64_t j = 0; j < kQ8Block; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const uint16_t d_half = float_to_half(d);
  std::memcpy(out, &d_half, 2);
  for (int64_t j = 0; j < kQ8Block; ++j) {
    const auto q = static_cast<int8_t>(std::roundf(x[j] * id));  // |x·id| ≤ 127 + rounding
    std::memcpy(out + 2 + j, &q, 1);
  }
}

}  // namespace

const char* to_string(GgmlType type) {
  switch (type) {
    case GgmlType::f32:
      return "f32";
    case GgmlType::f16:
      return "f16";
    case GgmlType::q8_0:
      return "q8_0";
    case GgmlType::bf16:
      return "bf16";
  }
  return "?";
}

int64_t ggml_block_values(GgmlType type) {
  return type == GgmlType::q8_0 ? kQ8Block : 1;
}

int64_t ggml_block_bytes(GgmlType type) {
  switch (type) {
    case GgmlType::f32:
      return 4;
    case GgmlType::f16:
    case GgmlType::bf16:
      return 2;
    case GgmlType::q8_0:
      return 2 + kQ8Block;
  }
  return 0;
}

int64_t ggml_bytes(GgmlType type, int64_t n) {
  BOOSTLM_ASSERT(n % ggml_block_values(type) == 0);
  return n / ggml_block_values(type) * ggml_block_bytes(type);
}

std::vector<unsigned char> encode_ggml(const float* values, int64_t rows, int64_t row_length,
                                       GgmlType type) {
  BOOSTLM_ASSERT(row_length % ggml_block_values(type) == 0);
  const int64_t n = rows * row_length;
  std::vector<unsigned char> out(ggml_bytes(type, n));
  switch (type) {
    case GgmlType::f32:
      std::memcpy(out.data(), values, out.size());
      break;
    case GgmlType::f16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = float_to_half(values[i]);
        std::memcpy(out.data() + 2 * i, &h, 2);
      }
      break;
    case GgmlType::bf16:
      for (int64_t i = 0; i < n; ++i) {
        const bf16_t b = float_to_bf16(values[i]);
        std::memcpy(out.data() + 2 * i, &b, 2);
      }
      break;
    case GgmlType::q8_0:
      // Blocks never straddle rows: row_length is a multiple of the block.
      for (int64_t b = 0; b < n / kQ8Block; ++b)
        quantize_q8_0_block(values + b * kQ8Block, out.data() + b * ggml_block_bytes(type));
      break;
  }
  return out;
}

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  BOOSTLM_ASSERT(alignment > 0 && alignment % 8 == 0);
  add_uint32("general.alignment", alignment);
}

void GgufWriter::begin_kv(const std::string& key, GgufValueType type) {
  BOOSTLM_ASSERT_MSG(keys_.insert(key).second, "GGUF key added twice");
  put_string(kv_, key);
  put<uint32_t>(kv_, static_cast<uint32_t>(type));
  ++kv_count_;
}

void GgufWriter::add_uint32(const std::string& key, uint32_t value) {
  begin_kv(key, GgufValueType::uint32);
  put(kv_, value);
}

void GgufWriter::add_int32(const std::string& key, int32_t value) {
  begin_kv(key, GgufValueType::int32);
  put(kv_, value);
}

void GgufWriter::add_uint64(const std::string& key, uint64_t value) {
  begin_kv(key, GgufValueType::uint64);
  put(kv_, value);
}

void GgufWriter::add_float32(const std::string& key, float value) {
  begin_kv(key, GgufValueType::float32);
  put(kv_, value);
}

void GgufWriter::add_bool(const std::string& key, bool value) {
  begin_kv(key, GgufValueType::boolean);
  put<uint8_t>(kv_, value ? 1 : 0);
}

void GgufWriter::add_string(const std::string& key, const std::string& value) {
  begin_kv(key, GgufValueType::string);
  put_string(kv_, value);
}

void GgufWriter::add_string_array(const std::string& key, const std::vector<std::string>& values) {
  begin_kv(key, GgufValueType::array);
  put<uint32_t>(kv_, static_cast<uint32_t>(GgufValueType::string));
  put<uint64_t>(kv_, values.size());
  for (const auto& v : values) put_string(kv_, v);
}

void GgufWriter::add_float32_array(const std::string& key, const std::vector<float>& values) {
  begin_kv(key, GgufValueType::array);
  put<uint32_t>(kv_, static_cast<uint32_t>(GgufValueType::float32));
  put<uint64_t>(kv_, values.size());
  for (float v : values) put(kv_, v);
}

void GgufWriter::add_int32_array(const std::string& key, const std::vector<int32_t>& values) {
  begin_kv(key, GgufValueType::array);
  put<uint32_t>(kv_, static_cast<uint32_t>(GgufValueType::int32));
  put<uint64_t>(kv_, values.size());
  for (int32_t v : values) put(kv_, v);
}

void GgufWriter::add_tensor(const std::string& name, std::vector<int64_t> ne, GgmlType type,
                            std::function<std::vector<unsigned char>()> encode) {
  BOOSTLM_ASSERT(!name.empty() && name.size() <= 64);  // the spec's limit on tensor names
  BOOSTLM_ASSERT(!ne.empty() && ne.size() <= 4);
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  const auto bytes = static_cast<uint64_t>(ggml_bytes(type, n));
  tensors_.push_back({name, std::move(ne), type, data_bytes_, bytes, std::move(encode)});
  data_bytes_ = padded(data_bytes_ + bytes, alignment_);
}

uint64_t GgufWriter::write(const std::string& path) const {
  std::string head;
  put(head, kGgufMagic);
  put(head, kGgufVersion);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, kv_count_);
  head += kv_;
  for (const Tensor& t : tensors_) {
    put_string(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put<uint64_t>(head, static_cast<uint64_t>(d));
    put<uint32_t>(head, static_cast<uint32_t>(t.type));
    put<uint64_t>(head, t.offset);
  }
  head.resize(padded(head.size(), alignment_), '\0');

  AtomicFile file(path);
  file.write(head);
  uint64_t written = head.size();
  const std::string zeros(alignment_, '\0');
  for (const Tensor& t : tensors_) {
    BOOSTLM_ASSERT(head.size() + t.offset == written);
    const std::vector<unsigned char> bytes = t.encode();
    BOOSTLM_ASSERT(bytes.size() == t.bytes);
    file.write(bytes.data(), bytes.size());
    const uint64_t pad = padded(t.bytes, alignment_) - t.bytes;
    file.write(zeros.data(), pad);
    written += t.bytes + pad;
  }
  file.commit();
  return written;
}

}  // namespace boostlm
