#include "core/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace boostlm {

namespace {
constexpr uint64_t kPrime1 = 0x9e3779b185ebca87ull, kPrime2 = 0xc2b2ae3d27d4eb4full,
                   kPrime3 = 0x165667b19e3779f9ull;

inline uint64_t rotl(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}
inline uint64_t load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint64_t round_lane(uint64_t acc, uint64_t input) {
  return rotl(acc + input * kPrime2, 31) * kPrime1;
}

std::string system_error(const std::string& what, const std::string& path) {
  return what + " '" + path + "': " + std::strerror(errno);
}
}  // namespace

void Checksum64::stripe(const unsigned char* p) {
  for (int i = 0; i < 4; ++i) lanes_[i] = round_lane(lanes_[i], load64(p + 8 * i));
}

void Checksum64::update(const void* data, size_t bytes) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  total_ += bytes;
  if (tail_size_) {
    const size_t take = std::min(bytes, 32 - tail_size_);
    std::memcpy(tail_ + tail_size_, p, take);
    tail_size_ += take;
    p += take;
    bytes -= take;
    if (tail_size_ < 32) return;
    stripe(tail_);
    tail_size_ = 0;
  }
  for (; bytes >= 32; p += 32, bytes -= 32) stripe(p);
  std::memcpy(tail_, p, bytes);
  tail_size_ = bytes;
}

uint64_t Checksum64::digest() const {
  uint64_t h = rotl(lanes_[0], 1) + rotl(lanes_[1], 7) + rotl(lanes_[2], 12) + rotl(lanes_[3], 18);
  h ^= total_ * kPrime3;
  for (size_t i = 0; i < tail_size_; ++i) h = rotl(h ^ (tail_[i] * kPrime3), 11) * kPrime1;
  h ^= h >> 33;
  h *= kPrime2;
  h ^= h >> 29;
  h *= kPrime3;
  return h ^ (h >> 32);
}

uint64_t Checksum64::of(const void* data, size_t bytes) {
  Checksum64 c;
  c.update(data, bytes);
  return c.digest();
}

std::string Checksum64::hex(uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  temp_path_ = path_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(system_error("cannot create", temp_path_));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_path_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t bytes) {
  BOOSTLM_ASSERT_MSG(fd_ >= 0, "write after commit");
  checksum_.update(data, bytes);
  write_fully(fd_, data, bytes, temp_path_);
}

void write_fully(int fd, const void* data, size_t bytes, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, std::min<size_t>(bytes, size_t{1} << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(system_error("cannot write", path));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  BOOSTLM_ASSERT_MSG(fd_ >= 0, "commit twice");
  if (::fsync(fd_) != 0) throw Error(system_error("cannot fsync", temp_path_));
  ::close(fd_);
  fd_ = -1;
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const std::string message = system_error("cannot rename into place", path_);
    ::unlink(temp_path_.c_str());
    throw Error(message);
  }
  const auto parent = std::filesystem::path(path_).parent_path();
  fsync_directory(parent.empty() ? "." : parent.string());
}

void write_file_atomically(const std::string& path, std::string_view contents) {
  AtomicFile file(path);
  file.write(contents);
  file.commit();
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(system_error("cannot open", path));
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Error(system_error("cannot open directory", dir));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw Error(system_error("cannot fsync directory", dir));
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(system_error("cannot open", path));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw Error(system_error("cannot stat", path));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      throw Error(system_error("cannot map", path));
    }
    data_ = static_cast<const unsigned char*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
}

std::string describe_filesystem_error(const std::string& doing,
                                      const std::filesystem::filesystem_error& e) {
  std::string where = e.path1().string();
  if (!e.path2().empty()) where += ", " + e.path2().string();
  return doing + ": " + e.code().message() + (where.empty() ? "" : " (" + where + ")");
}

void throw_filesystem_error(const std::string& doing, const std::filesystem::filesystem_error& e) {
  throw Error(describe_filesystem_error(doing, e));
}

}  // namespace boostlm
