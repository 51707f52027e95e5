// Open MPI hostfiles: one host per line, "name [slots=N] [max_slots=M]", '#' to the end of a line
// is a comment. `boostlm launch --hostfile` reads one to place ranks before mpirun reads it again,
// so a mistake is reported here, by line, instead of by mpirun after the job has started.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace boostlm {

struct HostfileEntry {
  std::string host;
  int slots = 0;      // 0: not given (mpirun then counts the host's cores)
  int max_slots = 0;  // 0: not given
  int line = 0;       // 1-based, for messages
};

// The largest slot count accepted: far above any machine, small enough to add without overflow.
inline constexpr int kMaxHostfileSlots = 1 << 20;

// Throws Error naming `source` and the line for an unknown key, a slot count that is not a whole
// number in [1, kMaxHostfileSlots], max_slots below slots, a host name with control characters,
// or a file that lists no host. Also accepts Open MPI's spellings "slot", "count", "cpu" (slots)
// and "max-slots", "slots_max", "slots-max" (max_slots).
std::vector<HostfileEntry> parse_hostfile(std::string_view text, const std::string& source);
std::vector<HostfileEntry> read_hostfile(const std::string& path);

// Distinct host names (a host may be listed on several lines).
int count_hosts(const std::vector<HostfileEntry>& entries);

// This machine's host name ("?" when it has none to give).
std::string this_host_name();

}  // namespace boostlm
