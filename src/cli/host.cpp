#include "cli/host.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "core/error.h"

namespace boostlm::cli {

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::string this_executable() {
  std::vector<char> path(4096);
  const ssize_t n = readlink("/proc/self/exe", path.data(), path.size() - 1);
  if (n <= 0) throw error("cannot find this program's path (/proc/self/exe)");
  return std::string(path.data(), static_cast<size_t>(n));
}

}  // namespace boostlm::cli
