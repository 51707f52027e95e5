// Files that are either whole or absent, read-only mappings, and checksums.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace boostlm {

// Streaming 64-bit checksum (four-lane multiply-rotate over 32-byte stripes, in the style of
// xxHash64; not cryptographic). The result depends only on the bytes, not on how they were split
// into update() calls.
class Checksum64 {
 public:
  void update(const void* data, size_t bytes);
  uint64_t digest() const;
  static uint64_t of(const void* data, size_t bytes);
  static std::string hex(uint64_t value);

 private:
  void stripe(const unsigned char* p);
  uint64_t lanes_[4] = {0x243f6a8885a308d3ull, 0x13198a2e03707344ull, 0xa4093822299f31d0ull,
                        0x082efa98ec4e6c89ull};
  unsigned char tail_[32];
  size_t tail_size_ = 0;
  uint64_t total_ = 0;
};

// Writes a file under a temporary name in the same directory; commit() flushes, fsyncs, renames
// it over `path` and fsyncs the directory, so a crash leaves either the old file or the new one.
// Destroying an uncommitted AtomicFile removes the temporary. Errors throw Error naming the file.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  uint64_t checksum() const { return checksum_.digest(); }  // of everything written so far
  void commit();

 private:
  std::string path_, temp_path_;
  int fd_ = -1;
  Checksum64 checksum_;
};

// A std::filesystem error as a message a user can act on: what boostlm was doing, then the
// system's reason and the path ("writing the checkpoint out/ckpt: Permission denied (out/ckpt)"),
// instead of "filesystem error: cannot create directories: ...".
std::string describe_filesystem_error(const std::string& doing,
                                      const std::filesystem::filesystem_error& e);

[[noreturn]] void throw_filesystem_error(const std::string& doing,
                                         const std::filesystem::filesystem_error& e);

// Runs `work`, rethrowing a std::filesystem error it throws as Error(describe_filesystem_error).
// For the boundaries where a command writes where the user told it to (run directory, prepare's
// and convert's output).
template <class Work>
decltype(auto) while_doing(const std::string& doing, Work&& work) {
  try {
    return work();
  } catch (const std::filesystem::filesystem_error& e) {
    throw_filesystem_error(doing, e);
  }
}

void write_file_atomically(const std::string& path, std::string_view contents);
// Writes all `bytes` to `fd` (retrying short writes and EINTR); throws Error naming `path`.
void write_fully(int fd, const void* data, size_t bytes, const std::string& path);
std::string read_text_file(const std::string& path);  // throws Error naming the file
void fsync_directory(const std::string& dir);

// A read-only memory mapping of a whole file.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws Error naming the file
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace boostlm
