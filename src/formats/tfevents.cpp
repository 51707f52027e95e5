#include "formats/tfevents.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/file_io.h"
#include "core/hostfile.h"

namespace boostlm {

namespace {

constexpr std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = crc32c_table();

// Protobuf's wire format (protobuf.dev/programming-guides/encoding): a key is the field number
// shifted left by 3 with the wire type in the low bits.
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, uint32_t field, WireType type) {
  put_varint(out, (uint64_t{field} << 3) | type);
}

template <class T>
void put_little_endian(std::string& out, T value) {  // x86 and ARM: the host order is little
  char bytes[sizeof value];
  std::memcpy(bytes, &value, sizeof value);
  out.append(bytes, sizeof value);
}

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// Event's header: wall_time = 1 (double), step = 2 (int64; proto3 leaves a zero out).
std::string event_header(double wall_time, int64_t step) {
  std::string event;
  put_key(event, 1, kFixed64);
  put_little_endian(event, wall_time);
  if (step != 0) {
    put_key(event, 2, kVarint);
    put_varint(event,
               static_cast<uint64_t>(step));  // a negative int64 is its 10-byte two's complement
  }
  return event;
}

uint32_t load_u32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

uint32_t crc32c(const void* data, size_t bytes, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < bytes; ++i) crc = kCrc32cTable[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(const void* data, size_t bytes) {
  const uint32_t crc = crc32c(data, bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view payload) {
  std::string record;
  record.reserve(payload.size() + 16);
  put_little_endian(record, static_cast<uint64_t>(payload.size()));
  put_little_endian(record, masked_crc32c(record.data(), 8));
  record.append(payload);
  put_little_endian(record, masked_crc32c(payload.data(), payload.size()));
  return record;
}

std::vector<std::string> read_tfrecords(std::string_view bytes, const std::string& name) {
  std::vector<std::string> payloads;
  size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) throw error(name, ": record at byte ", at, " is cut short");
    uint64_t length;
    std::memcpy(&length, bytes.data() + at, sizeof length);
    if (masked_crc32c(bytes.data() + at, 8) != load_u32(bytes.data() + at + 8))
      throw error(name, ": record at byte ", at, ": its length fails its CRC-32C");
    if (length > bytes.size() - at - 16)
      throw error(name, ": record at byte ", at, " is cut short");
    const char* payload = bytes.data() + at + 12;
    if (masked_crc32c(payload, length) != load_u32(payload + length))
      throw error(name, ": record at byte ", at, ": its data fails its CRC-32C");
    payloads.emplace_back(payload, length);
    at += 16 + length;
  }
  return payloads;
}

std::string file_version_event(double wall_time) {
  std::string event = event_header(wall_time, 0);
  put_bytes(event, 3, "brain.Event:2");
  return event;
}

std::string scalars_event(double wall_time, int64_t step, const std::vector<Scalar>& scalars) {
  std::string summary;
  for (const Scalar& s : scalars) {
    std::string value;
    put_bytes(value, 1, s.tag);
    uint32_t bits;
    std::memcpy(&bits, &s.value, sizeof bits);
    if (bits != 0) {  // proto3 leaves +0.0 out, as protobuf's own encoder does
      put_key(value, 2, kFixed32);
      put_little_endian(value, s.value);
    }
    put_bytes(summary, 1, value);
  }
  std::string event = event_header(wall_time, step);
  put_bytes(event, 5, summary);
  return event;
}

std::string session_start_event(double wall_time, int64_t step) {
  std::string session_log;
  put_key(session_log, 1, kVarint);
  put_varint(session_log, 1);  // SessionLog.SessionStatus START
  std::string event = event_header(wall_time, step);
  put_bytes(event, 7, session_log);
  return event;
}

double wall_time_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

EventFileWriter::EventFileWriter(const std::filesystem::path& dir) {
  const double now = wall_time_now();
  char name[400];
  std::snprintf(name, sizeof name, "events.out.tfevents.%010ld.%s.%d", static_cast<long>(now),
                this_host_name().c_str(), static_cast<int>(::getpid()));
  // O_EXCL: a file of this name is an earlier start's within the same second by this process
  // (a resume in-process); the next free suffix .1, .2, ... tells them apart.
  const std::string base = (dir / name).string();
  for (int n = 0; fd_ < 0; ++n) {
    path_ = base;
    if (n > 0) path_.append(".").append(std::to_string(n));
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0 && (errno != EEXIST || n >= 1000))
      throw error("cannot create ", path_, ": ", std::strerror(errno));
  }
  write_record(file_version_event(now));
}

EventFileWriter::~EventFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

EventFileWriter::EventFileWriter(EventFileWriter&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_) {
  other.fd_ = -1;
}

EventFileWriter& EventFileWriter::operator=(EventFileWriter&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void EventFileWriter::write_record(const std::string& payload) {
  BOOSTLM_ASSERT_MSG(fd_ >= 0, "event file not open");
  const std::string record = tfrecord(payload);
  write_fully(fd_, record.data(), record.size(), path_);  // one write(2): no partial flush
}

void EventFileWriter::write_scalars(int64_t step, const std::vector<Scalar>& scalars) {
  write_record(scalars_event(wall_time_now(), step, scalars));
}

void EventFileWriter::write_session_start(int64_t step) {
  write_record(session_start_event(wall_time_now(), step));
}

}  // namespace boostlm
