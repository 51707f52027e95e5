#include "cuda_emulator/record.h"

#include <fcntl.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>

#include "cuda_emulator/emulator.h"
#include "cuda_emulator/internal.h"
#include "cuda_emulator/memory.h"

namespace cuda_emulator {

namespace {

// A word-at-a-time hash of `bytes` (not cryptographic: two runs of one program are compared).
std::uint64_t hash_bytes(const char* data, std::size_t bytes) {
  std::uint64_t h = 0x243f6a8885a308d3ull ^ (bytes * 0x9e3779b97f4a7c15ull);
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t word;
    std::memcpy(&word, data + i, 8);
    h = (h ^ word) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (; i < bytes; ++i) h = (h ^ static_cast<unsigned char>(data[i])) * 0x100000001b3ull;
  return h ^ (h >> 32);
}

int log_descriptor() {
  static const int fd = [] {
    const std::string& path = settings().record_path;
    const int opened = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (opened < 0) fault("BOOSTLM_CUDA_EMULATOR_RECORD=" + path + ": cannot open it for writing");
    return opened;
  }();
  return fd;
}

}  // namespace

void record_launch(const KernelLaunch& launch) {
  if (settings().record_path.empty()) return;
  static std::uint64_t launches = 0;
  const LaunchConfig& c = launch.config;
  char head[512];
  std::snprintf(head, sizeof head, "%" PRIu64 " %s %s:%d grid=(%u,%u,%u) block=(%u,%u,%u) smem=%zu",
                ++launches, launch.name, launch.file, launch.line, c.grid.x, c.grid.y, c.grid.z,
                c.block.x, c.block.y, c.block.z, c.shared_bytes);
  std::string line = head;
  for (const memory::Range& r : memory::allocations_named_by(launch.pointers)) {
    char part[64];
    std::snprintf(part, sizeof part, " %zu:%016" PRIx64, r.bytes, hash_bytes(r.begin, r.bytes));
    line += part;
  }
  line += "\n";
  const ssize_t written = write(log_descriptor(), line.data(), line.size());
  if (written != static_cast<ssize_t>(line.size())) fault("cannot write the launch record");
}

}  // namespace cuda_emulator
