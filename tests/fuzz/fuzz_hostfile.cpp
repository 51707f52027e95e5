// Open MPI hostfiles, as `boostlm launch --hostfile` reads them.
#include "core/error.h"
#include "core/hostfile.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace boostlm;
  try {
    const auto entries = parse_hostfile(text_of(data, size), "hosts");
    FUZZ_CHECK(!entries.empty());
    FUZZ_CHECK(count_hosts(entries) >= 1 &&
               count_hosts(entries) <= static_cast<int>(entries.size()));
    for (const auto& e : entries) {
      FUZZ_CHECK(!e.host.empty() && e.host.find_first_of(" \t\n#") == std::string::npos);
      FUZZ_CHECK(e.slots >= 0 && e.slots <= kMaxHostfileSlots);
      FUZZ_CHECK(e.max_slots == 0 || e.slots <= e.max_slots);
    }
  } catch (const Error&) {
  }
  return 0;
}
