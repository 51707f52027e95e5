// TensorBoard event files (events.out.tfevents.*), which TensorBoard reads live and Weights &
// Biases imports (`wandb sync DIR`, `wandb.init(sync_tensorboard=True)`).
//
// A file is a sequence of TFRecords: the payload's length as a little-endian uint64, the masked
// CRC-32C of those 8 bytes (uint32), the payload, the masked CRC-32C of the payload. Each payload
// is one `Event` of TensorBoard's event.proto; the first names the file's version
// ("brain.Event:2"), the others carry a step's scalars (a Summary of tag, value pairs).
//
// The three messages are encoded by hand here rather than through libprotobuf: they need five
// fields and three wire types, and a generated-code dependency (protoc at build time, a runtime
// library whose version must match it) would cost more than the encoder. The tests read the files
// back with protoc and Python's google.protobuf, which no one on this project wrote.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace boostlm {

// CRC-32C (Castagnoli, reflected polynomial 0x82f63b78) of `bytes`, continuing from `crc` (0 for
// a fresh sum), as iSCSI (RFC 3720) and TFRecord use it.
uint32_t crc32c(const void* data, size_t bytes, uint32_t crc = 0);
// TFRecord's masked form of a CRC-32C: rotated right by 15 and offset, so that the CRC of bytes
// that themselves hold a CRC is not trivially related to it.
uint32_t masked_crc32c(const void* data, size_t bytes);

// One TFRecord framing `payload`.
std::string tfrecord(std::string_view payload);
// The payloads of the TFRecords in `bytes`, in order. A record cut short, or one whose length or
// payload fails its CRC, throws Error naming `name` and the record's offset.
std::vector<std::string> read_tfrecords(std::string_view bytes, const std::string& name);

struct Scalar {
  std::string tag;  // TensorBoard groups tags by their prefix before '/'
  float value;      // Summary.Value.simple_value is a float
};

// Event payloads (event.proto's field numbers; summary.proto's for the Summary):
// Event{double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5;
//       SessionLog session_log = 7}, Summary{repeated Value value = 1},
// Summary.Value{string tag = 1; float simple_value = 2}, SessionLog{SessionStatus status = 1}.
std::string file_version_event(double wall_time);
std::string scalars_event(double wall_time, int64_t step, const std::vector<Scalar>& scalars);
// A SessionLog START at `step`: a restart from a checkpoint, after which readers that honour it
// drop the earlier files' events from `step` on.
std::string session_start_event(double wall_time, int64_t step);

// An event file of its own in `dir`, named as TensorBoard's writers name theirs:
// events.out.tfevents.<10-digit seconds>.<hostname>.<pid> (W&B's importer takes the seconds and
// the host from the name). Each write reaches the file before it returns (no buffering), so a
// live TensorBoard sees every step; a failed write throws Error naming the file.
class EventFileWriter {
 public:
  EventFileWriter() = default;
  explicit EventFileWriter(const std::filesystem::path& dir);  // writes the file_version event
  ~EventFileWriter();
  EventFileWriter(EventFileWriter&& other) noexcept;
  EventFileWriter& operator=(EventFileWriter&& other) noexcept;
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  bool is_open() const { return fd_ >= 0; }
  void write_scalars(int64_t step, const std::vector<Scalar>& scalars);
  void write_session_start(int64_t step);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& payload);
  std::string path_;
  int fd_ = -1;
};

// Seconds since the epoch, as Event.wall_time holds them.
double wall_time_now();

}  // namespace boostlm
