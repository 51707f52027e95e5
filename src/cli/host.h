// What the commands ask of the machine they run on.
#pragma once

#include <string>

namespace boostlm::cli {

// The CPUs this process may run on (its affinity mask; the machine's count where there is none).
int available_cpus();
// This program's own path (/proc/self/exe), to start itself again (launch, calibrate).
std::string this_executable();

}  // namespace boostlm::cli
